package mesh

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// waitFor polls cond every 10 ms until it holds, failing the test when ctx ends first.
func waitFor(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("%s: not within the test's deadline", what)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func quiet(cfg Config) Config {
	cfg.Preset, cfg.Logger = PresetTest, slog.New(slog.DiscardHandler)
	return cfg
}

func startNode(t *testing.T, ctx context.Context, cfg Config) *Node {
	t.Helper()
	n, err := Start(ctx, quiet(cfg))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Leave(context.Background()) })
	return n
}

// versionsOf returns what n's view holds of the member rid announcing, and whether n
// sees it alive.
func versionsOf(n *Node, rid string) (Versions, bool) {
	m, ok := n.Membership().Member(rid)
	return m.Versions, ok && m.State == StateAlive
}

// A rolling upgrade from a build before node metadata version 3: while a member that
// does not read version 3 is live, every node writes version 2 (which it reads), so
// the old member and the new ones see each other; once it has gone, the new nodes
// write version 3 again and announce their versions.
func TestMeta_Version3OnlyOnceEveryLiveMemberReadsIt(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a := startNode(t, ctx, Config{RID: "new-a", AdminAddr: "127.0.0.1:1", Build: "v1.4.0", Revision: "aaaa"})
	// Alone, a writes version 3.
	if b := a.members.NodeMeta(maxMetaSize); b[0] != metaVersion3 {
		t.Fatalf("a alone writes version %d, want 3", b[0])
	}
	old, err := Start(ctx, quiet(Config{RID: "old", AdminAddr: "127.0.0.1:2", Join: []string{a.MeshAddr()}, legacyMeta: true}))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = old.Leave(context.Background()) }()
	// a sees a member that does not read version 3 and goes back to version 2; the old
	// member then sees a, and a sees it.
	waitFor(t, ctx, "the old member and a see each other", func() bool {
		return old.Membership().IsLive(a.ID()) && a.Membership().IsLive(old.ID())
	})
	if b := a.members.NodeMeta(maxMetaSize); b[0] != metaVersion2 {
		t.Fatalf("with an old member live a writes version %d, want 2", b[0])
	}
	if v, _ := versionsOf(old, "new-a"); !v.IsZero() {
		t.Errorf("the old member read versions %+v from version 2", v)
	}
	// A new node joining meanwhile stays at version 2 too, and everyone sees it.
	b := startNode(t, ctx, Config{RID: "new-b", Build: "v1.5.0", Join: []string{a.MeshAddr()}})
	waitFor(t, ctx, "the old member sees new-b", func() bool { return old.Membership().IsLive(b.ID()) })
	if meta := b.members.NodeMeta(maxMetaSize); meta[0] != metaVersion1 {
		t.Errorf("new-b, without an admin address, writes version %d with an old member live, want 1", meta[0])
	}
	// The old member leaves: both new nodes write version 3 and see each other's
	// versions.
	if err := old.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "each new node sees the other's versions", func() bool {
		va, okA := versionsOf(b, "new-a")
		vb, okB := versionsOf(a, "new-b")
		return okA && okB && va.Build == "v1.4.0" && vb.Build == "v1.5.0"
	})
	va, _ := versionsOf(b, "new-a")
	want := Versions{Build: "v1.4.0", Revision: "aaaa", Stream: 1, Service: 1, Meta: 3, Snapshot: 1}
	if va != want {
		t.Errorf("new-b reads new-a's versions as %+v, want %+v", va, want)
	}
	if m, _ := b.Membership().Member("new-a"); m.AdminAddr != "127.0.0.1:1" {
		t.Errorf("the admin address in version 3: %q", m.AdminAddr)
	}
}

// A node started with the RID of a live member fails its start, naming the id and the
// live member; the fleet's view does not change (no departure, no new lifecycle of
// that RID), and the live member keeps running.
func TestStart_DuplicateRIDIsRefusedAndTheFleetIsUndisturbed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a := startNode(t, ctx, Config{RID: "node-a", AdminAddr: "127.0.0.1:9"})
	c := startNode(t, ctx, Config{RID: "node-c", Join: []string{a.MeshAddr()}})
	var mu sync.Mutex
	var events []MemberEvent
	unsub := c.Membership().Subscribe(func(ev MemberEvent) {
		if ev.Member.ID.RID == "node-a" {
			mu.Lock()
			events = append(events, ev)
			mu.Unlock()
		}
	})
	defer unsub()
	for _, seed := range []*Node{c, a} {
		_, err := Start(ctx, quiet(Config{RID: "node-a", Join: []string{seed.MeshAddr()}}))
		if err == nil {
			t.Fatalf("a second node-a joining through %s started", seed.ID().RID)
		}
		for _, want := range []string{`"node-a"`, a.MeshAddr(), "127.0.0.1:9"} {
			if !contains(err.Error(), want) {
				t.Errorf("the error %q does not name %s", err, want)
			}
		}
		if !errorIs(err, ErrDuplicateRID) {
			t.Errorf("the error %v is not ErrDuplicateRID", err)
		}
	}
	// A node that joins afterwards reaches every member: gossip has flowed since.
	d := startNode(t, ctx, Config{RID: "node-d", Join: []string{c.MeshAddr()}})
	waitFor(t, ctx, "node-a sees node-d", func() bool { return a.Membership().IsLive(d.ID()) })
	for _, n := range []*Node{a, c, d} {
		m, ok := n.Membership().Member("node-a")
		if !ok || m.ID != a.ID() || m.State != StateAlive || m.MeshAddr != a.MeshAddr() {
			t.Errorf("%s sees node-a as %+v, want generation %d alive at %s", n.ID().RID, m, a.ID().Generation, a.MeshAddr())
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(events) != 0 {
		t.Errorf("node-c saw events of node-a: %+v", events)
	}
}

// A node whose seed comes up only later, with a live member of its RID, is refused
// when its retried join reaches it: WaitJoined says so, and closing it sends no leave
// that would name the live member.
func TestWaitJoined_DuplicateRIDFoundByARetriedJoin(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	port := freeMeshPort(t)
	late, err := Start(ctx, quiet(Config{RID: "node-a", Join: []string{"127.0.0.1:" + port}}))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = late.Leave(context.Background()) }()
	a := startNode(t, ctx, Config{RID: "node-a", MeshPort: atoi(t, port)})
	if _, err := late.Membership().WaitJoined(ctx); !errorIs(err, ErrDuplicateRID) {
		t.Fatalf("WaitJoined: %v, want ErrDuplicateRID", err)
	}
	if err := late.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	c := startNode(t, ctx, Config{RID: "node-c", Join: []string{a.MeshAddr()}})
	waitFor(t, ctx, "node-c sees node-a", func() bool { return c.Membership().IsLive(a.ID()) })
	if m, _ := a.Membership().Member("node-a"); m.ID != a.ID() || m.State != StateAlive {
		t.Errorf("node-a sees itself as %+v", m)
	}
	// A node without seeds is in the mesh at once.
	if at, err := a.Membership().WaitJoined(ctx); err != nil || at.IsZero() {
		t.Errorf("WaitJoined without seeds: %v %v", at, err)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

func errorIs(err, target error) bool { return errors.Is(err, target) }

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// freeMeshPort returns a port free for TCP and UDP on 127.0.0.1 now.
func freeMeshPort(t *testing.T) string {
	t.Helper()
	for range 100 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		pc, err := net.ListenPacket("udp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		_ = ln.Close()
		if err == nil {
			_ = pc.Close()
			return strconv.Itoa(port)
		}
	}
	t.Fatal("no free port")
	return ""
}

// A member that stops answering is suspect in Known (since the probe that got no
// ack) on a node whose failure detector suspected it, then dead (since later), and
// meshnode.mesh.members counts it in each state.
func TestKnown_ASilentMemberIsSuspectThenDead(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a := startNode(t, ctx, Config{RID: "a"})
	b := startNode(t, ctx, Config{RID: "b", Join: []string{a.MeshAddr()}})
	c, err := Start(ctx, quiet(Config{RID: "c", Join: []string{a.MeshAddr()}}))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "a and b see c", func() bool { return a.Membership().IsLive(c.ID()) && b.Membership().IsLive(c.ID()) })
	killed := time.Now()
	c.kill()
	var suspectSince time.Time
	waitFor(t, ctx, "a and b see c dead", func() bool {
		dead := 0
		for _, n := range []*Node{a, b} {
			for _, m := range n.Membership().Known() {
				switch {
				case m.ID.RID == "c" && m.State == StateSuspect && suspectSince.IsZero():
					suspectSince = m.Since
				case m.ID.RID == "c" && m.State == StateDead:
					dead++
				}
			}
		}
		return dead == 2
	})
	if suspectSince.Before(killed) {
		t.Fatalf("neither a nor b showed c suspect after the kill (since %v, killed at %v)", suspectSince, killed)
	}
	for _, n := range []*Node{a, b} {
		if m, _ := n.Membership().Member("c"); m.Since.Before(suspectSince) {
			t.Errorf("%s: c dead since %v, before it was suspect (%v)", n.ID().RID, m.Since, suspectSince)
		}
	}
}
