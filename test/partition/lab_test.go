package partition

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meshnode/meshnode/internal/testkit"
)

// The lab is a small network of the test's own, so that a partition cuts real links
// between real processes:
//
//	switch namespace P-sw: bridge br0 with ports s1..sN
//	node namespace P-k:    eth0 (10.213.X.k/24, peer sk on br0), lo,
//	                       mgmt0 (peer P-mk in the root namespace)
//	root namespace:        P-mk, 10.213.X.(100+k) point-to-point to 10.213.X.k
//
// The nodes talk to each other only through the bridge; the test (in the root
// namespace) reaches each node over its own management link. Cutting a node's bridge
// port therefore partitions it from the other nodes while the test still observes
// both sides: that is what lets it check that the minority stops serving, not merely
// that it went silent. The bridge lives in a namespace of its own rather than in the
// root one so that the host's firewall (br_netfilter with a FORWARD policy of DROP, as
// Docker hosts have) never sees the bridged traffic.
//
// A test binary killed outright (SIGKILL) runs no cleanup: its meshnode processes die
// with it (Pdeathsig), but its namespaces and root links stay; their names start with
// "mnp" (ip netns list, ip -o link).

// nodeIP is the address of node k (1-based) in the lab's /24.
func (l *lab) nodeIP(k int) string { return fmt.Sprintf("%s.%d", l.subnet, k) }

// rootIP is the root namespace's end of node k's management link.
func (l *lab) rootIP(k int) string { return fmt.Sprintf("%s.%d", l.subnet, 100+k) }

type lab struct {
	t      *testing.T
	prefix string // every name the lab creates starts with it
	subnet string // "10.213.X"
	sw     string // the switch namespace
	nodeNS []string
}

// requireNetAdmin fails (not skips) the test when it cannot build the lab: a
// partition test that silently does not run would hide exactly the bugs it is for.
func requireNetAdmin(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("ip"); err != nil {
		t.Fatalf("this test needs the ip command (iproute2; on Debian/Ubuntu: apt-get install -y iproute2) and root: %v", err)
	}
	if os.Geteuid() != 0 {
		t.Fatalf("this test needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN, to create network namespaces, veth pairs and a bridge); it runs as uid %d", os.Geteuid())
	}
}

// newLab builds the lab for n nodes; everything it creates is deleted when the test
// ends, whatever its outcome.
func newLab(t *testing.T, n int) *lab {
	t.Helper()
	l := &lab{t: t, prefix: "mnp" + randomHex(t, 3)}
	l.subnet = l.freeSubnet()
	l.sw = l.prefix + "-sw"
	// Registered before anything exists, so that a setup failing half way is cleaned
	// up too; it runs after the processes' cleanups (registered later), so no process
	// keeps a namespace alive.
	t.Cleanup(l.destroy)

	l.ip("netns", "add", l.sw)
	l.ip("-n", l.sw, "link", "add", "br0", "type", "bridge")
	l.ip("-n", l.sw, "link", "set", "br0", "up")
	for k := 1; k <= n; k++ {
		ns := fmt.Sprintf("%s-%d", l.prefix, k)
		l.ip("netns", "add", ns)
		l.nodeNS = append(l.nodeNS, ns)
		// Loopback up: a process reaching its own address goes through lo.
		l.ip("-n", ns, "link", "set", "lo", "up")

		// Data link to the bridge; both ends are created inside the namespaces, so no
		// name is ever taken in the root namespace.
		port := fmt.Sprintf("s%d", k)
		l.ip("-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", port, "netns", l.sw)
		l.ip("-n", l.sw, "link", "set", port, "master", "br0")
		l.ip("-n", l.sw, "link", "set", port, "up")
		l.ip("-n", ns, "addr", "add", l.nodeIP(k)+"/24", "dev", "eth0")
		l.ip("-n", ns, "link", "set", "eth0", "up")

		// Management link to the root namespace: a point-to-point address on the root
		// end gives the root a host route to the node, and the node a host route back;
		// the node has no other route toward the root, so no node traffic can take
		// this path around the bridge.
		mgmt := l.mgmtName(k)
		l.ip("link", "add", mgmt, "type", "veth", "peer", "name", "mgmt0", "netns", ns)
		l.ip("addr", "add", l.rootIP(k), "peer", l.nodeIP(k)+"/32", "dev", mgmt)
		l.ip("link", "set", mgmt, "up")
		l.ip("-n", ns, "link", "set", "mgmt0", "up")
		l.ip("-n", ns, "route", "add", l.rootIP(k)+"/32", "dev", "mgmt0")
	}
	return l
}

// mgmtName is the root namespace's end of node k's management link (at most 15
// characters, the kernel's limit).
func (l *lab) mgmtName(k int) string { return fmt.Sprintf("%sm%d", l.prefix, k) }

// cut takes node k's bridge port down: its packets to the other nodes, and theirs to
// it, are dropped silently, as on a pulled cable (no error that would tell the nodes
// early).
func (l *lab) cut(k int) { l.ip("-n", l.sw, "link", "set", fmt.Sprintf("s%d", k), "down") }

// heal takes node k's bridge port up again.
func (l *lab) heal(k int) { l.ip("-n", l.sw, "link", "set", fmt.Sprintf("s%d", k), "up") }

// ip runs the ip command and fails the test when it fails.
func (l *lab) ip(args ...string) {
	l.t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		l.t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// destroy deletes what the lab created. Deleting a namespace deletes the interfaces
// in it, and a veth pair goes with either end, so the namespaces are enough; the
// management links are deleted by name as well in case a namespace was never made.
// Anything left over is reported as an error.
func (l *lab) destroy() {
	for k := range l.nodeNS {
		_ = exec.Command("ip", "link", "del", l.mgmtName(k+1)).Run()
	}
	for _, ns := range append(l.nodeNS, l.sw) {
		if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil && !strings.Contains(string(out), "No such file") {
			l.t.Errorf("ip netns del %s: %v: %s", ns, err, out)
		}
	}
	if left := l.leftovers(); left != "" {
		l.t.Errorf("the lab left behind: %s", left)
	}
}

// leftovers lists the namespaces and root links whose name starts with the lab's
// prefix.
func (l *lab) leftovers() string {
	var left []string
	for _, cmd := range [][]string{{"netns", "list"}, {"-o", "link", "show"}} {
		out, _ := exec.Command("ip", cmd...).Output()
		sc := bufio.NewScanner(strings.NewReader(string(out)))
		for sc.Scan() {
			if strings.Contains(sc.Text(), l.prefix) {
				left = append(left, strings.TrimSpace(sc.Text()))
			}
		}
	}
	return strings.Join(left, "; ")
}

// freeSubnet picks 10.213.X with a random X that no route of the root namespace uses
// yet, so that parallel runs (each with its own random prefix) do not collide.
func (l *lab) freeSubnet() string {
	l.t.Helper()
	for range 64 {
		x, err := rand.Int(rand.Reader, big.NewInt(256))
		if err != nil {
			l.t.Fatal(err)
		}
		subnet := fmt.Sprintf("10.213.%d", x.Int64())
		out, err := exec.Command("ip", "-4", "route", "show", "root", subnet+".0/24").CombinedOutput()
		if err != nil {
			l.t.Fatalf("ip route show: %v: %s", err, out)
		}
		if strings.TrimSpace(string(out)) == "" {
			return subnet
		}
	}
	l.t.Fatal("no free 10.213.X.0/24 in the root namespace")
	return ""
}

func randomHex(t *testing.T, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// Ports inside a node's namespace: each namespace has its own ports, so they are
// fixed.
const (
	meshPort   = 7946
	remotePort = 8090
	streamPort = 7400
	adminPort  = 9464
)

// meshProc is one meshnode process in a node namespace.
type meshProc struct {
	id     string
	ip     string
	cmd    *exec.Cmd
	exited chan struct{}
	log    *testkit.LockedBuffer // stdout and stderr
}

func (p *meshProc) admin() string  { return fmt.Sprintf("%s:%d", p.ip, adminPort) }
func (p *meshProc) stream() string { return fmt.Sprintf("tcp://%s:%d", p.ip, streamPort) }
func (p *meshProc) mesh() string   { return fmt.Sprintf("%s:%d", p.ip, meshPort) }

// startProc starts `meshnode serve` in namespace ns, bound to and advertising ip, with
// the LAN timing, and waits until it is ready. It is stopped when the test ends.
func startProc(t *testing.T, bin, ns, id, ip string, join []string, timeout time.Duration, extra ...string) *meshProc {
	t.Helper()
	p := &meshProc{id: id, ip: ip, exited: make(chan struct{}), log: &testkit.LockedBuffer{}}
	args := []string{"netns", "exec", ns, bin, "serve",
		"--node-id", id,
		"--mesh", p.mesh(),
		"--remote", fmt.Sprintf("%s:%d", ip, remotePort),
		"--advertise-host", ip,
		"--stream", p.stream(),
		"--admin", p.admin(),
		"--mesh-timing", "lan",
		// The test closes its clients before it stops the nodes; a short drain keeps a
		// node that cannot reach its peers from holding the cleanup.
		"--drain-timeout", "3s",
		"--data-dir", t.TempDir(),
		// Addresses of the test's own namespaces, beyond loopback: the test is about
		// partitions, not the protections (test/security has those).
		"--insecure-mesh",
	}
	for _, j := range join {
		args = append(args, "--join", j)
	}
	args = append(args, extra...)
	// ip netns exec execs meshnode in place: the process is meshnode itself, so the
	// signals below reach it. Pdeathsig kills it should the test binary die without
	// running its cleanups (a go test timeout).
	p.cmd = exec.Command("ip", args...)
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p.cmd.Stderr = p.log
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.stop)
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		signalled := false
		for sc.Scan() {
			_, _ = fmt.Fprintln(p.log, sc.Text())
			if !signalled && strings.HasPrefix(sc.Text(), "meshnode: ready") {
				close(ready)
				signalled = true
			}
		}
		_ = p.cmd.Wait()
		close(p.exited)
	}()
	select {
	case <-ready:
	case <-p.exited:
		t.Fatalf("meshnode %s exited before it was ready: %s", id, p.log.Tail(3000))
	case <-time.After(timeout):
		t.Fatalf("meshnode %s not ready after %v: %s", id, timeout, p.log.Tail(3000))
	}
	return p
}

// stop stops the process (SIGTERM, then SIGKILL after 10 s) and waits until it is
// gone.
func (p *meshProc) stop() {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}
