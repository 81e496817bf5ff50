package cluster

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/test/proc"
)

// readyz returns a node's /readyz status and body (0 when it does not answer).
func readyz(n *proc.Node) (int, string) {
	resp, err := http.Get("http://" + n.Admin + "/readyz")
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// A node started with --join is not ready until a seed has answered: /readyz is 503
// with the reason while its seed is not there, it says nothing of being ready; once
// the seed starts the node joins, logs when, and only then is ready.
func TestNodeIsReadyOnlyOnceItJoinedASeed(t *testing.T) {
	seedMesh := fmt.Sprintf("127.0.0.1:%d", proc.FreePort(t))
	b := proc.Launch(t, proc.Config{ID: "node-b", Join: []string{seedMesh}})
	b.WaitAdmin(t)
	code, body := readyz(b)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "joining the mesh through "+seedMesh) {
		t.Fatalf("/readyz before any seed answered: %d %q, want 503 naming the seed", code, body)
	}
	proc.Eventually(t, "node-b says it is joining", func() bool {
		return strings.Contains(b.Stdout(), "meshnode: joining the mesh through "+seedMesh)
	})
	if b.Ready() {
		t.Fatalf("before joining, the node printed:\n%s", b.Stdout())
	}
	// The mesh has no member but node-b: it has joined nobody.
	if ms := b.Members(); len(ms) != 1 {
		t.Fatalf("members before the seed: %+v", ms)
	}
	a := proc.Start(t, proc.Config{ID: "node-a", Mesh: seedMesh})
	b.WaitReady(t)
	out := b.Stdout()
	joined := strings.Index(out, "meshnode: joined the mesh through "+seedMesh+" after ")
	ready := strings.Index(out, "meshnode: ready")
	if joined < 0 || ready < joined || !strings.Contains(out[joined:ready], "2 members alive") {
		t.Fatalf("node-b's start-up output does not say it joined before it was ready:\n%s", out)
	}
	if code, body := readyz(b); code != http.StatusOK || body != "ready\n" {
		t.Fatalf("/readyz once joined: %d %q", code, body)
	}
	if a.Alive() != 2 || b.Alive() != 2 {
		t.Fatalf("alive: node-a sees %d, node-b %d", a.Alive(), b.Alive())
	}
	// Without --join a node is ready at once.
	if code, _ := readyz(a); code != http.StatusOK {
		t.Errorf("node-a (no --join) /readyz %d", code)
	}
}

// A second process started with the id of a live member fails its start with an
// error naming the id and the live member, whether its seed answers at once or only
// after a retry; the fleet keeps the live member, under the same generation, and a
// node joining afterwards sees the same fleet.
func TestDuplicateNodeIDFailsTheStartAndLeavesTheFleetAlone(t *testing.T) {
	fleet := startFleet(t, 2, "test")
	before, _ := find(fleet[1].Members(), "node-0")

	check := func(dup *proc.Node) {
		t.Helper()
		if code := dup.ExitCode(t); code == 0 {
			t.Fatalf("the duplicate exited 0:\n%s", dup.Stderr())
		}
		msg := dup.Stderr()
		for _, want := range []string{`"node-0"`, "live member at " + fleet[0].Mesh, fmt.Sprint(before.Generation)} {
			if !strings.Contains(msg, want) {
				t.Errorf("the duplicate's error does not name %s:\n%s", want, msg)
			}
		}
		if dup.Ready() {
			t.Errorf("the duplicate said it was ready:\n%s", dup.Stdout())
		}
	}
	// Its seed answers at once: meshnode.Start fails.
	check(proc.Launch(t, proc.Config{ID: "node-0", Join: []string{fleet[1].Mesh}}))
	// Its seed answers only later, when the join is retried: the wait for readiness
	// fails. The seed is an address nobody listens on yet, taken by a new member of
	// the fleet once the duplicate runs.
	seed := fmt.Sprintf("127.0.0.1:%d", proc.FreePort(t))
	late := proc.Launch(t, proc.Config{ID: "node-0", Join: []string{seed}})
	late.WaitAdmin(t)
	proc.Start(t, proc.Config{ID: "node-2", Mesh: seed, Join: []string{fleet[0].Mesh}})
	check(late)

	// A node joining now reaches everyone: the fleet's view has had time to change.
	d := proc.Start(t, proc.Config{ID: "node-3", Join: []string{fleet[1].Mesh}})
	for _, n := range append(fleet, d) {
		proc.Eventually(t, n.ID+" sees four members alive", func() bool { return n.Alive() == 4 })
		m, ok := find(n.Members(), "node-0")
		if !ok || m.Generation != before.Generation || m.Address != fleet[0].Mesh || m.State != "alive" {
			t.Errorf("%s sees node-0 as %+v, want generation %d alive at %s", n.ID, m, before.Generation, fleet[0].Mesh)
		}
	}
	if text, err := fleet[1].Metrics(); err != nil || proc.Sum(text, "meshnode_mesh_members", "state=dead")+proc.Sum(text, "meshnode_mesh_members", "state=left") != 0 {
		t.Errorf("node-1 counts departed members after the duplicates: %v", err)
	}
}
