package security

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/meshnode"
	"github.com/meshnode/meshnode/internal/nodert"
	proto "github.com/meshnode/meshnode/internal/protoactor/actor"
	"github.com/meshnode/meshnode/internal/testkit"
	"github.com/meshnode/meshnode/mesh"
	"github.com/meshnode/meshnode/mesh/meshpb"
	"github.com/meshnode/meshnode/mesh/meshtest"
	"github.com/meshnode/meshnode/mesh/wire"
	"github.com/meshnode/meshnode/meshtls"
)

const wait = 20 * time.Second

// securedCluster starts n in-process nodes node-0.. with mutual TLS and the gossip
// key, the record tap on.
func securedCluster(t *testing.T, n int, p *testkit.FleetPKI, key []byte) *meshtest.Cluster {
	t.Helper()
	return meshtest.Start(t, n, meshtest.Options{Config: secure(t, p, key)})
}

// refused returns node i's refusal count for key (see mesh.SecurityStatus.Refused).
func refused(c *meshtest.Cluster, i int, key string) int64 {
	return c.Node(i).Security().Mesh.Refused[key]
}

// replaced is a record 51 addressed to node to: what a forger would send to take a
// session's binding over.
func replaced(to mesh.NodeID) *wire.Record {
	return &wire.Record{Body: &wire.BoundSessionReplaced{
		ActorAuthority: wire.ActorRouteFence{Actor: wire.ActorRef{ID: "a", Generation: 1}, TargetNodeRID: to.RID,
			TargetNodeGeneration: to.Generation, ExpectedAuthorityOwnerGeneration: 1, ExpectedOwnerLeaseGeneration: 1},
		RetiredSession: wire.SessionFence{OwnerNodeRID: to.RID, OwnerNodeGeneration: to.Generation, OwnerID: "s",
			OwnerLeaseGeneration: 1, SessionRID: "s", BindingGeneration: 1},
	}}
}

// replacedRecord is replaced(to)'s frames.
func replacedRecord(t *testing.T, to mesh.NodeID) [][]byte {
	t.Helper()
	frames, err := wire.Encode(replaced(to))
	if err != nil {
		t.Fatal(err)
	}
	return frames
}

// inbound counts the records node to took in from rid, as the cluster's tap saw them.
func inbound(c *meshtest.Cluster, to, rid string) int {
	n := 0
	for _, r := range c.Tap().Records() {
		if r.Direction == mesh.Inbound && r.To.RID == to && r.From.RID == rid {
			n++
		}
	}
	return n
}

// A process with the gossip key but no certificate (its record transport in the clear)
// is never admitted as a member, and the record it sends never reaches the node: the
// node refuses its connection (counted as not_tls) and keeps serving.
func TestMeshTLS_NodeWithoutFleetCertificateCannotJoinOrSendARecord(t *testing.T) {
	p := newPKI(t)
	key, _ := newKey(t)
	c := securedCluster(t, 2, p, key)
	n0 := c.Node(0)
	intruder, err := mesh.Start(context.Background(), mesh.Config{RID: "intruder", GossipKeys: [][]byte{key},
		Join: []string{n0.MeshAddr()}, Preset: mesh.PresetTest})
	if err != nil {
		t.Fatal(err)
	}
	defer meshtest.KillMesh(intruder)
	testkit.Eventually(t, wait, "node-0 tried the intruder's node id and refused it", func() bool {
		for _, pm := range n0.Membership().PendingMembers() {
			if pm.ID.RID == "intruder" && pm.Error != "" {
				return true
			}
		}
		return false
	})
	if _, ok := n0.Membership().Member("intruder"); ok {
		t.Fatal("node-0 admitted a member that proved no node id")
	}
	// The intruder (no verification of its own) takes node-0 for a member and sends.
	testkit.Eventually(t, wait, "the intruder sees node-0", func() bool { return intruder.Membership().IsLive(n0.ID()) })
	if err := intruder.Records().Send(context.Background(), n0.ID(), replaced(n0.ID())); err != nil {
		t.Fatalf("the intruder's send: %v", err)
	}
	testkit.Eventually(t, wait, "node-0 refuses the intruder's plaintext connection", func() bool { return refused(c, 0, "tls.in.not_tls") > 0 })
	if got := inbound(c, "node-0", "intruder"); got != 0 {
		t.Fatalf("node-0 took %d records from the intruder", got)
	}
	checkServing(t, c)
}

// checkServing: records still flow between nodes 0 and 1, both ways.
func checkServing(t *testing.T, c *meshtest.Cluster) {
	t.Helper()
	for _, pair := range [][2]int{{0, 1}, {1, 0}} {
		from, to := c.Node(pair[0]), c.Node(pair[1])
		before := inbound(c, to.ID().RID, from.ID().RID)
		if err := from.Records().Send(context.Background(), to.ID(), replaced(to.ID())); err != nil {
			t.Fatalf("the fleet stopped serving: %v", err)
		}
		testkit.Eventually(t, wait, "a record between members arrives", func() bool { return inbound(c, to.ID().RID, from.ID().RID) > before })
	}
}

// Peers presenting no certificate, a self-signed one, one from another CA, an expired
// one or one not meant for client use are refused at the handshake, each counted with
// its reason; the node keeps serving.
func TestMeshTLS_BadPeerCertificatesAreRefusedWithTheirReason(t *testing.T) {
	p := newPKI(t)
	key, _ := newKey(t)
	c := securedCluster(t, 2, p, key)
	other, err := testkit.NewFleetPKI("another fleet")
	if err != nil {
		t.Fatal(err)
	}
	pair := func(cert, key []byte, err error) *tls.Certificate {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		kp, err := tls.X509KeyPair(cert, key)
		if err != nil {
			t.Fatal(err)
		}
		return &kp
	}
	cases := []struct {
		name, reason string
		cert         *tls.Certificate
	}{
		{"no certificate", "no_certificate", nil},
		{"self-signed", "unknown_authority", pair(testkit.SelfSigned("node-7"))},
		{"another CA", "unknown_authority", pair(other.Node("node-7"))},
		{"expired", "expired", pair(p.NodeWith("node-7", testkit.NodeCertOptions{NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour)}))},
		{"server use only", "wrong_usage", pair(p.NodeWith("node-7", testkit.NodeCertOptions{ServerOnly: true}))},
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(p.CACert)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := refused(c, 0, "tls.in."+tc.reason)
			cfg := &tls.Config{RootCAs: roots, ServerName: "node-0", NextProtos: []string{"h2"}}
			if tc.cert != nil {
				// Presented whatever the server says it accepts (Go's client would otherwise
				// send none of another CA's): an attacker chooses what it sends.
				cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return tc.cert, nil }
			}
			if err := handshake(c.Node(0).Mesh().RemoteAddr(), cfg); err == nil {
				t.Fatal("the node accepted the connection")
			}
			if !testkit.Within(wait, func() bool { return refused(c, 0, "tls.in."+tc.reason) == before+1 }) {
				t.Fatalf("the refusal was not counted as %s once: %v", tc.reason, c.Node(0).Security().Mesh.Refused)
			}
		})
	}
	checkServing(t, c)
}

// A node with a valid fleet certificate for its own id (mallory) that puts another
// member's RID (node-1) on its records, or on a record it forwards, is refused: the
// messages are dropped before anything handles them and counted (reason identity),
// while the same record under its own RID is taken.
func TestMeshTLS_ValidCertificateClaimingAnotherNodeIsRefused(t *testing.T) {
	p := newPKI(t)
	key, _ := newKey(t)
	c := securedCluster(t, 2, p, key)
	n0, n1 := c.Node(0), c.Node(1)
	mallory, m := joinMallory(t, p, key, n0)
	forged := &meshpb.Envelope{FromRid: n1.ID().RID, FromGeneration: n1.ID().Generation,
		ToRid: n0.ID().RID, ToGeneration: n0.ID().Generation, Frames: replacedRecord(t, n0.ID())}
	meshtest.SendEnvelope(mallory, n0.Mesh().RemoteAddr(), meshtest.RecordsActor, forged)
	nodert.SystemOf(mallory).Root.Send(proto.NewPID(n0.Mesh().RemoteAddr(), meshtest.RecordsActor),
		&meshpb.Followed{FromRid: "mallory", FromGeneration: m.ID.Generation, ForwarderRid: n1.ID().RID, Frames: forged.Frames})
	own := &meshpb.Envelope{FromRid: "mallory", FromGeneration: m.ID.Generation,
		ToRid: n0.ID().RID, ToGeneration: n0.ID().Generation, Frames: replacedRecord(t, n0.ID())}
	meshtest.SendEnvelope(mallory, n0.Mesh().RemoteAddr(), meshtest.RecordsActor, own)
	// One stream, in order: once the last is taken, the first two were judged.
	testkit.Eventually(t, wait, "node-0 takes mallory's record under its own RID", func() bool { return inbound(c, "node-0", "mallory") == 1 })
	if got := refused(c, 0, mesh.DropIdentity); got != 2 {
		t.Fatalf("identity refusals: %d, want 2 (the forged record and the forged forward)", got)
	}
	if got := n0.Records().Counts().Drops[mesh.DropIdentity]; got != 2 {
		t.Fatalf("dropped{reason=identity}: %d, want 2", got)
	}
	for _, r := range c.Tap().Records() {
		if r.Direction == mesh.Inbound && r.To.RID == "node-0" && r.From.RID == "node-1" && r.Command == wire.CmdBoundSessionReplaced {
			t.Fatal("node-0 took the record forged as node-1's")
		}
	}
	checkServing(t, c)
}

// handshake dials addr with cfg and returns why the server refused the connection (nil
// when it did not).
func handshake(addr string, cfg *tls.Config) error {
	conn, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		return err
	}
	defer conn.Close()
	// TLS 1.3: the server judges the client's certificate after the client's handshake
	// returned; its refusal arrives on the first read.
	_ = conn.SetReadDeadline(time.Now().Add(wait))
	_, err = conn.Read(make([]byte, 1))
	return err
}

// logLines counts the lines of a text log that hold every one of parts.
func logLines(log string, parts ...string) int {
	n := 0
	for _, line := range strings.Split(log, "\n") {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			n++
		}
	}
	return n
}

// Refused handshakes are counted each time and logged once per reason and peer host
// per interval (docs/security.md, issue 29's bad input): repeated handshakes with a
// certificate of another CA are counted one by one and logged once, and so are
// repeated handshakes without a certificate, in a line of their own.
func TestMeshTLS_HandshakeRefusalsAreCountedEachAndLoggedOncePerInterval(t *testing.T) {
	const tries = 5
	p := newPKI(t)
	key, _ := newKey(t)
	var log testkit.LockedBuffer
	c := meshtest.Start(t, 1, meshtest.Options{Config: secure(t, p, key), Logger: slog.New(slog.NewTextHandler(&log, nil))})
	other, err := testkit.NewFleetPKI("another fleet")
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := other.Node("node-7")
	if err != nil {
		t.Fatal(err)
	}
	stranger, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(p.CACert)
	addr := c.Node(0).Mesh().RemoteAddr()
	for _, tc := range []struct {
		reason string
		cert   *tls.Certificate
	}{{"unknown_authority", &stranger}, {"no_certificate", nil}} {
		cfg := &tls.Config{RootCAs: roots, ServerName: "node-0", NextProtos: []string{"h2"}}
		if tc.cert != nil {
			cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return tc.cert, nil }
		}
		for i := 1; i <= tries; i++ {
			if err := handshake(addr, cfg); err == nil {
				t.Fatalf("%s: the node accepted the connection", tc.reason)
			}
			testkit.Eventually(t, wait, fmt.Sprintf("refusal %d counted as %s", i, tc.reason), func() bool {
				return refused(c, 0, "tls.in."+tc.reason) == int64(i)
			})
		}
	}
	for _, reason := range []string{"unknown_authority", "no_certificate"} {
		if got := refused(c, 0, "tls.in."+reason); got != tries {
			t.Errorf("tls.in.%s = %d, want %d", reason, got, tries)
		}
		if got := logLines(log.String(), `msg="mesh: TLS handshake refused"`, "reason="+reason); got != 1 {
			t.Errorf("%s logged %d times, want once: %s", reason, got, log.String())
		}
	}
}

// Messages whose sender RID the peer's certificate does not name are counted each
// (dropped, reason identity) and logged once per claimed RID per interval: mallory,
// with a valid fleet certificate of its own, forges records as node-8 and node-9.
func TestMeshTLS_ForgedRIDDropsAreCountedEachAndLoggedOncePerClaimedRID(t *testing.T) {
	const tries = 5
	p := newPKI(t)
	key, _ := newKey(t)
	var log testkit.LockedBuffer
	c := meshtest.Start(t, 1, meshtest.Options{Config: secure(t, p, key), Logger: slog.New(slog.NewTextHandler(&log, nil))})
	n0 := c.Node(0)
	mallory, m := joinMallory(t, p, key, n0)
	for _, claimed := range []string{"node-8", "node-9"} {
		for range tries {
			forged := &meshpb.Envelope{FromRid: claimed, FromGeneration: 1,
				ToRid: n0.ID().RID, ToGeneration: n0.ID().Generation, Frames: replacedRecord(t, n0.ID())}
			meshtest.SendEnvelope(mallory, n0.Mesh().RemoteAddr(), meshtest.RecordsActor, forged)
		}
	}
	own := &meshpb.Envelope{FromRid: "mallory", FromGeneration: m.ID.Generation,
		ToRid: n0.ID().RID, ToGeneration: n0.ID().Generation, Frames: replacedRecord(t, n0.ID())}
	meshtest.SendEnvelope(mallory, n0.Mesh().RemoteAddr(), meshtest.RecordsActor, own)
	// One stream, in order: once the last is taken, the forged ones were judged.
	testkit.Eventually(t, wait, "node-0 takes mallory's record under its own RID", func() bool { return inbound(c, "node-0", "mallory") == 1 })
	if got := refused(c, 0, mesh.DropIdentity); got != 2*tries {
		t.Fatalf("identity refusals: %d, want %d", got, 2*tries)
	}
	if got := n0.Records().Counts().Drops[mesh.DropIdentity]; got != 2*tries {
		t.Fatalf("dropped{reason=identity}: %d, want %d", got, 2*tries)
	}
	for _, claimed := range []string{"node-8", "node-9"} {
		if got := logLines(log.String(), `msg="mesh: record dropped"`, "reason=identity", "node=0", "from="+claimed+"#"); got != 1 {
			t.Errorf("forgeries as %s logged %d times, want once: %s", claimed, got, log.String())
		}
	}
}

// joinMallory starts mallory, a mesh node with a valid fleet certificate of its own,
// joined to n0; it returns mallory (killed with the test) and its member as n0 admits
// it.
func joinMallory(t *testing.T, p *testkit.FleetPKI, key []byte, n0 *meshnode.Node) (*mesh.Node, mesh.Member) {
	t.Helper()
	f := issue(t, p, "mallory")
	certs, err := meshtls.Load(meshtls.Files{Cert: f.Cert, Key: f.Key, CA: f.CA}, "mallory")
	if err != nil {
		t.Fatal(err)
	}
	mallory, err := mesh.Start(context.Background(), mesh.Config{RID: "mallory", TLS: certs, GossipKeys: [][]byte{key},
		Join: []string{n0.MeshAddr()}, Preset: mesh.PresetTest, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { meshtest.KillMesh(mallory) })
	var m mesh.Member
	testkit.Eventually(t, wait, "node-0 admits mallory (a valid fleet certificate)", func() bool {
		var ok bool
		m, ok = n0.Membership().Member("mallory")
		return ok
	})
	return mallory, m
}
