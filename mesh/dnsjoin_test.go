package mesh_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/miekg/dns"

	"github.com/meshnode/meshnode/fault"
	"github.com/meshnode/meshnode/internal/testkit"
	"github.com/meshnode/meshnode/mesh"
	"github.com/meshnode/meshnode/mesh/meshtest"
)

// seedsDNS is a DNS server of the test's own (TCP, on port 53 of a loopback address,
// which memberlist's resolver asks first): seeds.meshnode.test answers the addresses
// the test sets, any other name does not exist.
type seedsDNS struct {
	mu     sync.Mutex
	addrs  []string
	server *dns.Server
	conf   string // a resolv.conf naming it
}

func startSeedsDNS(t *testing.T) *seedsDNS {
	t.Helper()
	d := &seedsDNS{}
	ip := fmt.Sprintf("127.%d.%d.53", 100+rand.IntN(100), rand.IntN(250))
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "53"))
	if err != nil {
		t.Fatalf("a DNS server on %s:53 (this test binds port 53 on a loopback address, as root): %v", ip, err)
	}
	d.server = &dns.Server{Listener: ln, Handler: dns.HandlerFunc(d.serve)}
	go func() { _ = d.server.ActivateAndServe() }()
	t.Cleanup(func() { _ = d.server.Shutdown() })
	d.conf = filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(d.conf, []byte("nameserver "+ip+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return d
}

func (d *seedsDNS) set(addrs ...string) {
	d.mu.Lock()
	d.addrs = addrs
	d.mu.Unlock()
}

func (d *seedsDNS) serve(w dns.ResponseWriter, r *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(r)
	q := r.Question[0]
	if !strings.EqualFold(q.Name, "seeds.meshnode.test.") {
		m.Rcode = dns.RcodeNameError
		_ = w.WriteMsg(m)
		return
	}
	d.mu.Lock()
	addrs := append([]string(nil), d.addrs...)
	d.mu.Unlock()
	if q.Qtype == dns.TypeA || q.Qtype == dns.TypeANY { // memberlist asks ANY over TCP
		for _, a := range addrs {
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 0}, A: net.ParseIP(a)})
		}
	}
	_ = w.WriteMsg(m)
}

// DNS join: a seed name that resolves to several addresses joins through every one
// (the first address has nobody listening), a name resolved again on every retry
// joins once its answer names a live node, and a name that does not resolve fails
// the start with an error naming it.
func TestJoin_DNSNameResolvesToEveryAddressAndAgainOnRetry(t *testing.T) {
	d := startSeedsDNS(t)
	net3 := fmt.Sprintf("127.%d.%d.", 100+rand.IntN(100), rand.IntN(250))
	seed, err := mesh.Start(context.Background(), mesh.Config{BindHost: net3 + "3", Preset: mesh.PresetTest})
	if err != nil {
		t.Fatal(err)
	}
	defer meshtest.KillMesh(seed)
	_, port, _ := net.SplitHostPort(seed.MeshAddr())
	name := net.JoinHostPort("seeds.meshnode.test", port)

	d.set(net3+"2", net3+"3") // .2 has no node
	a, err := mesh.Start(context.Background(), mesh.Config{BindHost: net3 + "4", Join: []string{name}, DNSConfigPath: d.conf, Preset: mesh.PresetTest})
	if err != nil {
		t.Fatalf("join through %s: %v", name, err)
	}
	defer meshtest.KillMesh(a)
	waitLive(t, a, seed)

	d.set(net3 + "2") // only the address with no node, for now
	b, err := mesh.Start(context.Background(), mesh.Config{BindHost: net3 + "5", Join: []string{name}, DNSConfigPath: d.conf, Preset: mesh.PresetTest})
	if err != nil {
		t.Fatalf("start while the name names no live node: %v", err)
	}
	defer meshtest.KillMesh(b)
	d.set(net3+"2", net3+"3")
	waitLive(t, b, seed)

	_, err = mesh.Start(context.Background(), mesh.Config{BindHost: net3 + "6", Join: []string{"nope.meshnode.test:" + port}, DNSConfigPath: d.conf, Preset: mesh.PresetTest})
	if err == nil || !errors.Is(err, fault.NotConfigured) || !strings.Contains(err.Error(), "nope.meshnode.test:"+port) {
		t.Fatalf("a join name that does not resolve: %v", err)
	}
}

func waitLive(t *testing.T, n, seed *mesh.Node) {
	t.Helper()
	testkit.Eventually(t, wait, n.ID().String()+" joins "+seed.ID().String()+" through the DNS name", func() bool {
		return n.Membership().IsLive(seed.ID())
	})
}
