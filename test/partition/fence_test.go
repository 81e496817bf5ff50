package partition

import (
	"fmt"
	"io"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meshnode/meshnode/internal/testkit"
	"github.com/meshnode/meshnode/internal/testkit/pgtest"
	"github.com/meshnode/meshnode/test/proc"
)

// Issue 27, item 8: a minority activation's save is refused by the fence. Three
// processes in network namespaces share a PostgreSQL server in the root namespace,
// which each reaches over its management link (so the cut partitions the nodes from
// each other, not from the store). A room lives on node-1 with served 3. node-1 is cut
// off and paused (SIGSTOP: a process that stalls, as under a long GC pause or a frozen
// VM, is the case keep-majority alone cannot cover: it has not yet noticed that it
// lost its majority). The majority activates the room anew from the store and serves
// it (served 4, 5). node-1 is resumed and its session relays a room.echo to its old
// activation before it notices anything: the save is refused by the version fence
// (unavailable, a conflict), the stored record is untouched, the conflict is counted,
// and the majority's room goes on at served 6.
func TestPartition_MinorityActivationSaveRefusedByTheFence(t *testing.T) {
	requireNetAdmin(t)
	bin := proc.Binary(t)
	deadline := time.Now().Add(budget)
	eventually := func(what string, cond func() bool) {
		t.Helper()
		testkit.Eventually(t, time.Until(deadline), what, cond)
	}
	l := newLab(t, 3)
	var listen []string
	for k := 1; k <= 3; k++ {
		listen = append(listen, l.rootIP(k))
	}
	srv := pgtest.Start(t, pgtest.Options{Listen: listen})
	nodes := make([]*meshProc, 3)
	for i := range nodes {
		var join []string
		if i > 0 {
			join = []string{nodes[0].mesh()}
		}
		nodes[i] = startProc(t, bin, l.nodeNS[i], fmt.Sprintf("node-%d", i+1), l.nodeIP(i+1), join, time.Until(deadline),
			"--store", srv.URL(l.rootIP(i+1)))
	}
	minority, majority := nodes[0], nodes[1:]
	t.Cleanup(func() { _ = minority.cmd.Process.Signal(syscall.SIGCONT) }) // before its stop
	t.Cleanup(func() {
		if t.Failed() {
			for _, p := range nodes {
				t.Logf("log of %s:\n%s", p.id, p.log.Tail(4000))
			}
		}
	})
	allAlive := map[string]string{}
	for _, p := range nodes {
		allAlive[p.id] = "alive"
	}
	for _, p := range nodes {
		eventually(p.id+" sees the three members alive and has its majority", func() bool { return p.sees(allAlive) && p.quorum() == 1 })
	}

	// A room on the minority node, bound by a session on it, served 3 times.
	kept := client(t, minority)
	room := ""
	for k := 0; k < 60 && room == ""; k++ {
		id := fmt.Sprintf("fenced-%d", k)
		b, err := bind(kept, id)
		if err != nil {
			t.Fatalf("bind %s: %v", id, err)
		}
		if b.Node == minority.id {
			room = id
			break
		}
		_ = kept.Close() // one binding per session: the next room gets a new one
		kept = client(t, minority)
	}
	if room == "" {
		t.Fatal("no room placed on the minority node")
	}
	for i := int64(1); i <= 3; i++ {
		if e, err := echo(kept, room, map[string]int{"n": 1}); err != nil || e.Served != i {
			t.Fatalf("echo %d: %+v %v", i, e, err)
		}
	}

	// Cut and pause the minority; the majority declares it failed and serves the room.
	l.cut(cutIndex + 1)
	if err := minority.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	for _, p := range majority {
		want := map[string]string{minority.id: "dead", majority[0].id: "alive", majority[1].id: "alive"}
		eventually(p.id+" sees "+minority.id+" failed", func() bool { return p.sees(want) })
	}
	var served int64
	eventually(room+" served by the majority", func() bool {
		e, err := bindAndEcho(t, majority[0], room)
		served = e.Served
		return err == nil
	})
	if served != 4 {
		t.Fatalf("the majority's new activation of %s answered served %d, want 4 (loaded 3 from the store)", room, served)
	}
	if e, err := bindAndEcho(t, majority[1], room); err != nil || e.Served != 5 {
		t.Fatalf("second echo on the majority: %+v %v", e, err)
	}
	version := srv.SQL(t, "SELECT version FROM meshnode_actor_state WHERE kind = 'room' AND id = '"+room+"'")

	// Resume the minority: its session's relay reaches the old activation at once.
	if err := minority.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	e, err := echo(kept, room, map[string]int{"n": 1})
	if err == nil || remoteCode(err) != "unavailable" || !strings.Contains(err.Error(), "conflict") {
		t.Fatalf("room.echo to the minority's stale activation: %+v %v, want unavailable (a version conflict)", e, err)
	}
	if got := srv.SQL(t, "SELECT version FROM meshnode_actor_state WHERE kind = 'room' AND id = '"+room+"'"); got != version {
		t.Fatalf("the stale activation's save changed the record: version %s, was %s", got, version)
	}
	if n := metricValue(minority, "meshnode_store_conflicts_total"); n != 1 {
		t.Errorf("%s counts %v conflicts, want 1", minority.id, n)
	}
	if e, err := bindAndEcho(t, majority[1], room); err != nil || e.Served != 6 {
		t.Fatalf("the majority's room after the stale save: %+v %v, want served 6", e, err)
	}
}

// metricValue reads one counter from the process's /metrics (-1: unreadable).
func metricValue(p *meshProc, name string) float64 {
	resp, err := adminClient.Get("http://" + p.admin() + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return -1
	}
	return proc.Sum(string(b), name)
}
