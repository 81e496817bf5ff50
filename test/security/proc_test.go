package security

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meshnode/meshnode/internal/testkit"
	"github.com/meshnode/meshnode/mesh"
	"github.com/meshnode/meshnode/mesh/meshpb"
	"github.com/meshnode/meshnode/mesh/meshtest"
	"github.com/meshnode/meshnode/meshtls"
	"github.com/meshnode/meshnode/test/proc"
)

// Real meshnode processes with the protections on, and certificates, keys and tokens
// the tests make.

// fleetFiles are the files of a secured fleet: the PKI and one gossip key file per node
// (each node its own copy, so that a rotation edits them one by one).
type fleetFiles struct {
	pki   *testkit.FleetPKI
	dir   string
	key   []byte
	certs map[string]testkit.NodeFiles
}

func newFleetFiles(t *testing.T) *fleetFiles {
	key, _ := newKey(t)
	return &fleetFiles{pki: newPKI(t), dir: t.TempDir(), key: key, certs: map[string]testkit.NodeFiles{}}
}

// args returns the security flags of node id: its certificate, the CA, its key file.
func (f *fleetFiles) args(t *testing.T, id string) []string {
	t.Helper()
	nf, ok := f.certs[id]
	if !ok {
		nf = issue(t, f.pki, id)
		f.certs[id] = nf
		writeKeys(t, f.keyFile(id), f.key)
	}
	return []string{"--mesh-tls-cert", nf.Cert, "--mesh-tls-key", nf.Key, "--mesh-tls-ca", nf.CA,
		"--gossip-key-file", f.keyFile(id), "--cluster-label", "test-fleet"}
}

func (f *fleetFiles) keyFile(id string) string { return filepath.Join(f.dir, id+".keys") }

// startSecured starts n processes node-0.. with every mesh protection (admin open on
// loopback, so the kit reads it), joined through node-0, each seeing all alive.
func startSecured(t *testing.T, f *fleetFiles, n int, extra ...string) []*proc.Node {
	t.Helper()
	nodes := make([]*proc.Node, n)
	for i := range nodes {
		id := nodeID(i)
		cfg := proc.Config{ID: id, Args: append(f.args(t, id), extra...)}
		if i > 0 {
			cfg.Join = []string{nodes[0].Mesh}
		}
		nodes[i] = proc.Start(t, cfg)
	}
	for _, p := range nodes {
		proc.Eventually(t, p.ID+" sees every member alive", func() bool { return p.Alive() == n })
	}
	return nodes
}

// security reads a process's /v1/node security figures (admin open: no token).
func security(t *testing.T, p *proc.Node, token string) *nodeSecurity {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+p.Admin+"/v1/node", nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var n struct {
		Security *nodeSecurity `json:"security"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&n) != nil {
		return nil
	}
	return n.Security
}

type nodeSecurity struct {
	MeshTLS *meshtls.Status      `json:"meshTLS"`
	Gossip  mesh.GossipStatus    `json:"gossip"`
	Pending []mesh.PendingMember `json:"pending"`
	Refused map[string]int64     `json:"refused"`
}

func (s *nodeSecurity) pendingWithError(rid string) bool {
	for _, p := range s.Pending {
		if p.ID.RID == rid && p.Error != "" {
			return true
		}
	}
	return false
}

// A process whose certificate comes from another CA (it has the gossip key) never
// becomes a member of the fleet, nor the fleet of its view; an in-process peer with
// the key and no certificate at all sends a record and it is refused at the handshake
// (counted on the process's /metrics). The fleet keeps serving.
func TestProc_NodeWithoutFleetCertificateCannotJoinOrSendARecord(t *testing.T) {
	f := newFleetFiles(t)
	fleet := startSecured(t, f, 2)
	other := newFleetFiles(t)
	other.key = f.key // it has the gossip key: only the certificate keeps it out
	intruder := proc.Start(t, proc.Config{ID: "intruder", Args: other.args(t, "intruder"), Join: []string{fleet[0].Mesh}})
	proc.Eventually(t, "node-0 tried the intruder's node id and refused it", func() bool {
		s := security(t, fleet[0], "")
		return s != nil && s.pendingWithError("intruder")
	})
	for _, p := range fleet {
		if _, ok := findMember(p.Members(), "intruder"); ok {
			t.Fatalf("%s lists the intruder", p.ID)
		}
	}
	if got := intruder.Alive(); got != 1 {
		t.Fatalf("the intruder sees %d members alive, want itself only", got)
	}

	peer, err := mesh.Start(context.Background(), mesh.Config{RID: "plain-peer", GossipKeys: [][]byte{f.key}, ClusterLabel: "test-fleet",
		Join: []string{fleet[0].Mesh}, Preset: mesh.PresetTest})
	if err != nil {
		t.Fatal(err)
	}
	defer meshtest.KillMesh(peer)
	var n0 mesh.NodeID
	proc.Eventually(t, "the plain peer sees node-0", func() bool {
		m, ok := peer.Membership().Member("node-0")
		n0 = m.ID
		return ok && peer.Membership().IsLive(m.ID)
	})
	before := fleet[0].Metric("meshnode_mesh_tls_refused_total", "direction=in", "reason=not_tls")
	if err := peer.Records().Send(context.Background(), n0, replaced(n0)); err != nil {
		t.Fatal(err)
	}
	proc.Eventually(t, "node-0 refuses the plain peer's connection", func() bool {
		return fleet[0].Metric("meshnode_mesh_tls_refused_total", "direction=in", "reason=not_tls") > before
	})
	if n := fleet[0].Metric("meshnode_mesh_records_total", "command=boundSessionReplaced", "direction=in"); n != 0 {
		t.Fatalf("node-0 took %v records 51", n)
	}
	checkBound(t, fleet)
}

// checkBound: a client of node-0 bound to a room on node-1 gets its answers (the fleet
// serves across nodes).
func checkBound(t *testing.T, fleet []*proc.Node) {
	t.Helper()
	c := proc.Connect(t, fleet[0].Endpoints["tcp"])
	ctx, cancel := context.WithTimeout(context.Background(), proc.Wait)
	defer cancel()
	for k := 0; ; k++ {
		var out map[string]any
		id := fmt.Sprintf("room-%d", k)
		if err := c.Request(ctx, "bind", map[string]string{"actor": id}, &out); err != nil {
			t.Fatalf("bind %s: %v", id, err)
		}
		if out["node"] != fleet[1].ID {
			if err := c.Request(ctx, "unbind", map[string]string{"actor": id}, &out); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := c.Request(ctx, "room.echo", map[string]string{"x": "y"}, &out); err != nil || out["node"] != fleet[1].ID {
			t.Fatalf("room.echo across nodes: %v %v", out, err)
		}
		return
	}
}

func findMember(ms []proc.Member, rid string) (proc.Member, bool) {
	for _, m := range ms {
		if m.RID == rid {
			return m, true
		}
	}
	return proc.Member{}, false
}

// A process started with a valid certificate for node-a but --node-id node-b does not
// start, naming the flag; an in-process peer with a valid certificate for mallory that
// puts node-1's RID on a record is refused by a process (counted as identity).
func TestProc_ValidCertificateForAClaimingBIsRefused(t *testing.T) {
	f := newFleetFiles(t)
	fleet := startSecured(t, f, 2)
	args := f.args(t, "node-a")
	args = append(args, "--node-id", "node-b", "--mesh", "127.0.0.1:0", "--remote", "127.0.0.1:0", "--admin", "")
	out, err := execMeshnode(t, args...)
	if err == nil || !strings.Contains(out, "flag --node-id") || !strings.Contains(out, `"node-b"`) {
		t.Fatalf("a certificate for node-a as node-b: %v: %s", err, out)
	}

	nf := issue(t, f.pki, "mallory")
	certs, err := meshtls.Load(meshtls.Files{Cert: nf.Cert, Key: nf.Key, CA: nf.CA}, "mallory")
	if err != nil {
		t.Fatal(err)
	}
	mallory, err := mesh.Start(context.Background(), mesh.Config{RID: "mallory", TLS: certs, GossipKeys: [][]byte{f.key}, ClusterLabel: "test-fleet",
		Join: []string{fleet[0].Mesh}, Preset: mesh.PresetTest})
	if err != nil {
		t.Fatal(err)
	}
	defer meshtest.KillMesh(mallory)
	var n0, n1 mesh.NodeID
	proc.Eventually(t, "mallory is a member (a valid fleet certificate) and sees both", func() bool {
		m0, ok0 := mallory.Membership().Member("node-0")
		m1, ok1 := mallory.Membership().Member("node-1")
		n0, n1 = m0.ID, m1.ID
		_, admitted := findMember(fleet[0].Members(), "mallory")
		return ok0 && ok1 && admitted
	})
	meshtest.SendEnvelope(mallory, memberRemote(t, mallory, "node-0"), meshtest.RecordsActor, &meshpb.Envelope{
		FromRid: n1.RID, FromGeneration: n1.Generation, ToRid: n0.RID, ToGeneration: n0.Generation, Frames: replacedRecord(t, n0)})
	proc.Eventually(t, "node-0 refuses the record forged as node-1's", func() bool {
		return fleet[0].Metric("zlink_mesh_node_messages_dropped_total", "reason=identity") == 1
	})
	if n := fleet[0].Metric("meshnode_mesh_records_total", "command=boundSessionReplaced", "direction=in"); n != 0 {
		t.Fatalf("node-0 took %v records 51", n)
	}
	// mallory hosts no Actors (a bare mesh node): gone, the fleet serves on its own.
	meshtest.KillMesh(mallory)
	proc.Eventually(t, "the fleet marks mallory failed", func() bool {
		m, ok := findMember(fleet[0].Members(), "mallory")
		return ok && m.State == "dead"
	})
	checkBound(t, fleet)
}

func memberRemote(t *testing.T, n *mesh.Node, rid string) string {
	t.Helper()
	m, ok := n.Membership().Member(rid)
	if !ok {
		t.Fatalf("no member %s", rid)
	}
	return m.RemoteAddr
}

// execMeshnode runs the binary with args until it exits (a start that must fail).
func execMeshnode(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), proc.Wait)
	defer cancel()
	cmd := exec.CommandContext(ctx, proc.Binary(t), append([]string{"serve", "--data-dir", t.TempDir()}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// A process with another gossip key cannot join: the fleet refuses its gossip (counted
// on /metrics, logged once however many packets), neither side lists the other.
func TestProc_WrongGossipKeyCannotJoin(t *testing.T) {
	f := newFleetFiles(t)
	fleet := startSecured(t, f, 2)
	other := newFleetFiles(t) // another CA and another key
	other.pki = f.pki         // a valid certificate: only the key differs
	// It never joins, so it never becomes ready: it only serves its admin address.
	outsider := proc.Launch(t, proc.Config{ID: "outsider", Args: other.args(t, "outsider"), Join: []string{fleet[0].Mesh}})
	outsider.WaitAdmin(t)
	proc.Eventually(t, "node-0 refuses the outsider's gossip more than once", func() bool {
		return fleet[0].Metric("meshnode_mesh_gossip_refused_total", "reason=wrong_key") >= 2
	})
	if got := strings.Count(fleet[0].Stderr(), "mesh: gossip refused"); got != 1 {
		t.Fatalf("node-0 logged the refusal %d times, want once:\n%s", got, fleet[0].Stderr())
	}
	for _, p := range fleet {
		if _, ok := findMember(p.Members(), "outsider"); ok || p.Alive() != 2 {
			t.Fatalf("%s: %v", p.ID, p.Members())
		}
	}
	if got := outsider.Alive(); got != 1 || outsider.Ready() {
		t.Fatalf("the outsider sees %d members alive (ready %v)", got, outsider.Ready())
	}
}

// A key rotation on three live processes through their key files and SIGHUP: add the
// new key, make it the primary, remove the old one, each step on every node before
// the next. No member is lost (same generations, all alive), and at the end a process
// with only the new key joins while one with only the old key cannot.
func TestProc_GossipKeyRotationWithALiveFleet(t *testing.T) {
	f := newFleetFiles(t)
	fleet := startSecured(t, f, 3, "--mesh-timing", "lan")
	old := f.key
	fresh, _ := newKey(t)
	gens := map[string]uint64{}
	for _, m := range fleet[0].Members() {
		gens[m.RID] = m.Generation
	}
	step := func(what string, primary []byte, keys ...[]byte) {
		t.Helper()
		for _, p := range fleet {
			writeKeys(t, f.keyFile(p.ID), keys...)
			p.Signal(syscall.SIGHUP)
			proc.Eventually(t, what+" on "+p.ID, func() bool {
				s := security(t, p, "")
				return s != nil && s.Gossip.Keys == len(keys) && s.Gossip.Primary == mesh.KeyID(primary)
			})
		}
		for _, p := range fleet {
			for _, m := range p.Members() { // probes every member now, under the new keys
				if m.State != "alive" || m.Generation != gens[m.RID] {
					t.Fatalf("%s: %s sees %+v", what, p.ID, m)
				}
			}
		}
	}
	step("add the new key", old, old, fresh)
	step("make it the primary", fresh, fresh, old)
	step("remove the old key", fresh, fresh)
	for _, p := range fleet {
		if n := p.Metric("zlink_mesh_node_messages_dropped_total"); n < 0 {
			t.Fatalf("%s: no metrics", p.ID)
		}
		if strings.Contains(p.Stderr(), "member failed") {
			t.Fatalf("%s saw a member fail during the rotation:\n%s", p.ID, p.Stderr())
		}
	}
	stale := newFleetFiles(t)
	stale.pki, stale.key = f.pki, old
	s := proc.Launch(t, proc.Config{ID: "stale", Args: stale.args(t, "stale"), Join: []string{fleet[0].Mesh}, Timing: "lan"})
	s.WaitAdmin(t)
	proc.Eventually(t, "node-0 refuses the old key", func() bool {
		return fleet[0].Metric("meshnode_mesh_gossip_refused_total", "reason=wrong_key") > 0
	})
	if s.Alive() != 1 || s.Ready() {
		t.Fatalf("a node with only the old key joined: %v", s.Members())
	}
	joiner := newFleetFiles(t)
	joiner.pki, joiner.key = f.pki, fresh
	proc.Start(t, proc.Config{ID: "joiner", Args: joiner.args(t, "joiner"), Join: []string{fleet[0].Mesh}, Timing: "lan"})
	proc.Eventually(t, "a node with only the new key joins", func() bool { return fleet[0].Alive() == 4 })
}

// A renewed certificate written over a process's files is in use within seconds,
// without a restart (same generation): a new connection to its record transport gets
// the new certificate, and the fleet keeps serving across nodes. A broken file leaves
// the renewed one in use and shows on /readyz.
func TestProc_CertificateReloadWithoutRestart(t *testing.T) {
	f := newFleetFiles(t)
	fleet := startSecured(t, f, 2)
	gen := fleet[0].Members()
	nf := f.certs["node-0"]
	cert, key, err := f.pki.NodeWith("node-0", testkit.NodeCertOptions{NotAfter: time.Now().Add(72 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	// The key first, then the certificate: in between the pair does not match and the
	// node keeps the old one.
	if err := os.WriteFile(nf.Key, key, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(nf.Cert, cert, 0o600); err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(mustPEM(t, cert))
	if err != nil {
		t.Fatal(err)
	}
	serial := leaf.SerialNumber.Text(16)
	proc.Eventually(t, "node-0 serves the renewed certificate", func() bool {
		s := security(t, fleet[0], "")
		return s != nil && s.MeshTLS != nil && s.MeshTLS.Serial == serial
	})
	// A new connection, as a peer would make it, sees the renewed certificate.
	client := issue(t, f.pki, "probe")
	pair, err := tls.LoadX509KeyPair(client.Cert, client.Key)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(f.pki.CACert)
	conn, err := tls.Dial("tcp", fleet[0].Remote, &tls.Config{RootCAs: roots, ServerName: "node-0", Certificates: []tls.Certificate{pair}, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	got := conn.ConnectionState().PeerCertificates[0].SerialNumber.Text(16)
	_ = conn.Close()
	if got != serial {
		t.Fatalf("a new connection got serial %s, want the renewed %s", got, serial)
	}
	if now := fleet[0].Members(); now[0].Generation != gen[0].Generation {
		t.Fatal("node-0 restarted")
	}
	checkBound(t, fleet)
	if err := os.WriteFile(nf.Cert, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	fleet[0].Signal(syscall.SIGHUP)
	proc.Eventually(t, "/readyz says the reload failed, the node still ready", func() bool {
		resp, err := http.Get("http://" + fleet[0].Admin + "/readyz")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode == http.StatusOK && strings.Contains(string(b), "reload failed")
	})
	if s := security(t, fleet[0], ""); s == nil || s.MeshTLS.Serial != serial {
		t.Fatal("the broken file replaced the renewed certificate")
	}
}

func mustPEM(t *testing.T, b []byte) []byte {
	t.Helper()
	block, _ := pem.Decode(b)
	if block == nil {
		t.Fatal("no PEM block")
	}
	return block.Bytes
}

// The admin API of real processes: without the token every call that changes something
// or shows client data is 401 and changes nothing, the probes stay open; with the
// token they work, and the fleet figures of one node include the other's, which it
// gathered with its own token. With --admin-tls the same holds over TLS, the figures
// gathered with the node's client certificate.
func TestProc_AdminTokenProbesAndFleetAggregation(t *testing.T) {
	for _, withTLS := range []bool{false, true} {
		t.Run(fmt.Sprintf("admin-tls=%v", withTLS), func(t *testing.T) {
			f := newFleetFiles(t)
			token := "proc-admin-token-0123456789abcdef"
			tokenFile := filepath.Join(t.TempDir(), "admin.token")
			if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			extra := []string{"--admin-token-file", tokenFile}
			scheme := "http://"
			client := http.DefaultClient
			if withTLS {
				extra = append(extra, "--admin-tls")
				scheme = "https://"
				roots := x509.NewCertPool()
				roots.AppendCertsFromPEM(f.pki.CACert)
				client = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true,
					TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "node-0"}}}
			}
			n0 := proc.Start(t, proc.Config{ID: "node-0", Args: append(f.args(t, "node-0"), extra...)})
			n1 := proc.Start(t, proc.Config{ID: "node-1", Args: append(f.args(t, "node-1"), extra...), Join: []string{n0.Mesh}})
			do := func(method, path, authz string) (int, string) {
				t.Helper()
				req, _ := http.NewRequest(method, scheme+n0.Admin+path, nil)
				if authz != "" {
					req.Header.Set("Authorization", authz)
				}
				resp, err := client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, string(b)
			}
			for _, c := range []struct{ method, path string }{{"POST", "/v1/drain"}, {"POST", "/v1/actors/a/relocate?to=node-1"},
				{"GET", "/v1/sessions"}, {"GET", "/v1/bindings"}, {"GET", "/v1/fleet"}, {"GET", "/v1/members"}} {
				for _, authz := range []string{"", "Bearer wrong", "Bearer "} {
					if code, body := do(c.method, c.path, authz); code != http.StatusUnauthorized || !strings.Contains(body, `"rejected"`) {
						t.Fatalf("%s %s with %q: %d %s", c.method, c.path, authz, code, body)
					}
				}
			}
			for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
				resp, err := http.Get("http://" + n0.Admin + path) // plain HTTP, no token: probes and scrapers
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("%s: %s", path, resp.Status)
				}
			}
			if n0.Metric("meshnode_admin_refused_total") < 18 {
				t.Fatalf("refusals not counted: %v", n0.Metric("meshnode_admin_refused_total"))
			}
			proc.Eventually(t, "node-0's fleet figures include node-1's, gathered with node-0's credentials", func() bool {
				code, body := do("GET", "/v1/fleet", "Bearer "+token)
				var fl struct {
					Members []struct {
						RID   string          `json:"rid"`
						Node  json.RawMessage `json:"node"`
						Error string          `json:"error"`
					} `json:"members"`
				}
				if code != http.StatusOK || json.Unmarshal([]byte(body), &fl) != nil || len(fl.Members) != 2 {
					return false
				}
				for _, m := range fl.Members {
					if m.Node == nil || m.Error != "" {
						return false
					}
				}
				return true
			})
			_ = n1
			if code, body := do("POST", "/v1/drain", "Bearer "+token); code != http.StatusAccepted {
				t.Fatalf("drain with the token: %d %s", code, body)
			}
			select {
			case <-n0.Exited():
			case <-time.After(proc.Wait):
				t.Fatal("node-0 did not stop after the drain")
			}
		})
	}
}
