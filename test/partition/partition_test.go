// Package partition tests keep-majority (docs/relocation.md) on real processes and a
// real network partition: three meshnode processes in network namespaces of the
// test's own, joined through a bridge; one node's link is cut and healed. It needs
// root and the ip command (iproute2), and fails, not skips, without them.
package partition

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/meshnode/meshnode/internal/testkit"
	"github.com/meshnode/meshnode/session/connector"
	"github.com/meshnode/meshnode/test/proc"
)

func TestMain(m *testing.M) {
	code := m.Run()
	proc.Cleanup()
	if code == 0 {
		// Every goroutine the test started (process readers, the placement watcher,
		// clients) must have stopped with it.
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

const (
	// budget bounds the test after the binary is built: every wait takes what is left
	// of it, so a condition that never comes fails the test in time.
	budget = 60 * time.Second
	// roomsWanted rooms are placed, at least minPerNode on each node.
	roomsWanted = 12
	minPerNode  = 2
	// cutIndex is the node cut off, the lowest RID: keep-majority's tie-break (an even
	// split keeps the side holding the lowest RID) favours it, so it is the node most
	// likely to wrongly believe it still has a majority.
	cutIndex = 0
	// minorityGrace is how long the minority may take to stop its activations once it
	// sees the others failed.
	minorityGrace = 10 * time.Second
	// healWait bounds the merge after the link is back.
	healWait = 20 * time.Second
)

// A node cut off from the other two stops its activations and answers unavailable;
// the two others activate its rooms anew and serve every room; after the heal every
// room has exactly one activation, served from every node. No room ever has two
// activations.
func TestPartition_MinorityStopsMajorityServesOneActivationAfterHeal(t *testing.T) {
	requireNetAdmin(t)
	bin := proc.Binary(t)
	deadline := time.Now().Add(budget)
	eventually := func(what string, cond func() bool) {
		t.Helper()
		testkit.Eventually(t, time.Until(deadline), what, cond)
	}

	l := newLab(t, 3)
	nodes := make([]*meshProc, 3)
	for i := range nodes {
		var join []string
		if i > 0 {
			join = []string{nodes[0].mesh()}
		}
		nodes[i] = startProc(t, bin, l.nodeNS[i], fmt.Sprintf("node-%d", i+1), l.nodeIP(i+1), join, time.Until(deadline))
	}
	// Stops the three at once, before each one's own cleanup runs (then a no-op): a
	// node's drain may wait on peers it cannot reach.
	t.Cleanup(func() {
		var wg sync.WaitGroup
		for _, p := range nodes {
			wg.Go(p.stop)
		}
		wg.Wait()
	})
	t.Cleanup(func() {
		if t.Failed() {
			for _, p := range nodes {
				t.Logf("log of %s:\n%s", p.id, p.log.Tail(6000))
			}
		}
	})
	minority := nodes[cutIndex]
	var majority []*meshProc
	for i, p := range nodes {
		if i != cutIndex {
			majority = append(majority, p)
		}
	}
	allAlive := map[string]string{}
	for _, p := range nodes {
		allAlive[p.id] = "alive"
	}

	// The three form one mesh, each with its majority.
	for _, p := range nodes {
		eventually(p.id+" sees the three members alive and has its majority", func() bool {
			return p.sees(allAlive) && p.quorum() == 1
		})
	}

	// From here to the end, no room may ever have two activations: a watcher reads
	// every node's activations continuously (the test reaches the minority over its
	// management link during the partition too) and reports when the test ends, also
	// when it ends early.
	watchPlacement(t, nodes)

	// Rooms on every node, each answering.
	rooms, home := placeRooms(t, nodes, deadline)
	t.Logf("rooms placed: %v", home)
	expectPlacement(t, "before the partition", rooms, placement(t, nodes), func(id string) []string { return []string{home[id]} })
	var minorityRooms, majorityRooms []string
	for _, id := range rooms {
		if home[id] == minority.id {
			minorityRooms = append(minorityRooms, id)
		} else {
			majorityRooms = append(majorityRooms, id)
		}
	}
	// Two sessions on the minority kept across the cut, one bound to a room of the
	// minority (its Actor stops when the majority is lost) and one to a room of the
	// majority (now out of reach): their relays must fail. They are refused as not bound
	// (invalid_operation) rather than unavailable, since the binding went with the
	// Actor's activation or with its node; the check is only that the minority itself
	// answers the refusal.
	keptLocal, keptRemote := client(t, minority), client(t, minority)
	if _, err := bind(keptLocal, minorityRooms[0]); err != nil {
		t.Fatalf("bind %s on %s: %v", minorityRooms[0], minority.id, err)
	}
	if _, err := bind(keptRemote, majorityRooms[0]); err != nil {
		t.Fatalf("bind %s on %s: %v", majorityRooms[0], minority.id, err)
	}

	// Cut the minority off; both sides' failure detectors declare the other side
	// failed (the majority's quickly, each confirming the other's suspicion; the
	// minority's only at the end of an unconfirmed suspicion).
	t.Logf("cutting %s off (its rooms: %v)", minority.id, minorityRooms)
	cutAt := time.Now()
	l.cut(cutIndex + 1)
	for _, p := range majority {
		want := map[string]string{minority.id: "dead"}
		for _, q := range majority {
			want[q.id] = "alive"
		}
		eventually(p.id+" sees "+minority.id+" failed", func() bool { return p.sees(want) })
	}
	t.Logf("the majority saw %s failed after %v", minority.id, since(cutAt))
	wantOnMinority := map[string]string{minority.id: "alive"}
	for _, q := range majority {
		wantOnMinority[q.id] = "dead"
	}
	eventually(minority.id+" sees the two others failed", func() bool { return minority.sees(wantOnMinority) })
	t.Logf("%s saw the others failed after %v", minority.id, since(cutAt))

	// The minority has no majority: quorum 0, no activation, every lookup and bind
	// refused as unavailable. It loses its majority on the failure event itself; the
	// grace only covers stopping the activations. A failure here is reported and the
	// test goes on, so that it also shows what the majority then does.
	if !testkit.Within(min(minorityGrace, time.Until(deadline)), func() bool {
		ids, ok := minority.rooms()
		return ok && len(ids) == 0 && minority.quorum() == 0
	}) {
		ids, _ := minority.rooms()
		t.Errorf("%s, cut off from the two others and seeing them failed for %v, still reports quorum %v and hosts %v: "+
			"it did not give up its Actors (keep-majority)", minority.id, minorityGrace, minority.quorum(), ids)
	}
	for _, p := range majority {
		if q := p.quorum(); q != 1 {
			t.Errorf("%s reports quorum %v during the partition, want 1", p.id, q)
		}
	}
	var bad []string
	for _, id := range rooms {
		if status, code, err := minority.lookup(id); err != nil || status != 503 || code != "unavailable" {
			bad = append(bad, fmt.Sprintf("%s: %d %q %v", id, status, code, err))
		}
	}
	reportAll(t, "GET /v1/actors/{id} on "+minority.id+" during the partition, want 503 unavailable", bad)
	bad = nil
	refused := client(t, minority)
	for _, id := range rooms {
		if b, err := bind(refused, id); remoteCode(err) != "unavailable" {
			bad = append(bad, fmt.Sprintf("%s: %+v %v", id, b, err))
		}
	}
	reportAll(t, "bind on "+minority.id+" during the partition, want the error unavailable", bad)
	for _, kept := range []struct {
		c    *connector.Connector
		room string
	}{{keptLocal, minorityRooms[0]}, {keptRemote, majorityRooms[0]}} {
		e, err := echo(kept.c, kept.room, map[string]int{"n": 1})
		if remoteCode(err) == "" {
			t.Errorf("room.echo %s from a session on %s bound before the cut: %+v %v, want an error answered by %s",
				kept.room, minority.id, e, err, minority.id)
		} else {
			t.Logf("room.echo %s (on %s before the cut) from a session on %s: %v", kept.room, home[kept.room], minority.id, err)
		}
	}
	_, _ = keptLocal.Close(), keptRemote.Close()

	// The majority serves every room: its own where they were, the minority's
	// activated anew on one of its nodes.
	for i, id := range rooms {
		e, err := bindAndEcho(t, majority[i%len(majority)], id)
		if err != nil {
			t.Fatalf("during the partition: %v", err)
		}
		if home[id] != minority.id && e.Node != home[id] {
			t.Errorf("during the partition %s moved from %s to %s: only the minority's rooms are activated anew", id, home[id], e.Node)
		}
	}
	during := placement(t, nodes)
	expectPlacement(t, "during the partition", rooms, during, func(id string) []string {
		if home[id] != minority.id {
			return []string{home[id]}
		}
		return []string{majority[0].id, majority[1].id}
	})

	// Heal: the sides find each other again and the minority has its majority back.
	l.heal(cutIndex + 1)
	healAt := time.Now()
	if !testkit.Within(min(healWait, time.Until(deadline)), func() bool {
		for _, p := range nodes {
			if !p.sees(allAlive) || p.quorum() != 1 {
				return false
			}
		}
		return true
	}) {
		var views []string
		for _, p := range nodes {
			views = append(views, fmt.Sprintf("%s sees %v, quorum %v", p.id, p.members(), p.quorum()))
		}
		t.Fatalf("%v after the link came back, the mesh has not merged again: %s", healWait, strings.Join(views, "; "))
	}
	t.Logf("merged again %v after the heal", since(healAt))
	// Every room answers through a session on every node, and stays where the
	// majority put it: a join moves directory entries, not Actors.
	for _, id := range rooms {
		for _, p := range nodes {
			e, err := bindAndEcho(t, p, id)
			if err != nil {
				t.Fatalf("after the heal: %v", err)
			}
			if len(during[id]) == 1 && e.Node != during[id][0] {
				t.Errorf("after the heal %s bound from %s answered from %s, want %s where the majority activated it", id, p.id, e.Node, during[id][0])
			}
		}
	}
	expectPlacement(t, "after the heal", rooms, placement(t, nodes), func(id string) []string { return during[id] })
	t.Logf("cut to heal %v, test %v", healAt.Sub(cutAt).Round(time.Millisecond), since(deadline.Add(-budget)))
}

func since(t time.Time) time.Duration { return time.Since(t).Round(time.Millisecond) }

// reportAll fails the test once for a check that failed for several rooms.
func reportAll(t *testing.T, what string, bad []string) {
	t.Helper()
	if len(bad) > 0 {
		t.Errorf("%s: %d failed: %s", what, len(bad), strings.Join(bad, "; "))
	}
}

// expectPlacement checks that each room has exactly one activation, on one of the
// nodes allowed(id) names.
func expectPlacement(t *testing.T, when string, rooms []string, where map[string][]string, allowed func(id string) []string) {
	t.Helper()
	var bad []string
	for _, id := range rooms {
		if on := where[id]; len(on) != 1 || !slices.Contains(allowed(id), on[0]) {
			bad = append(bad, fmt.Sprintf("%s on %v (want one of %v)", id, on, allowed(id)))
		}
	}
	reportAll(t, when+", every room has one activation", bad)
}

// placeRooms binds rooms from sessions on each node in turn until roomsWanted are
// placed with at least minPerNode on every node, and relays a room.echo to each. It
// returns the rooms and the node each lives on.
func placeRooms(t *testing.T, nodes []*meshProc, deadline time.Time) ([]string, map[string]string) {
	t.Helper()
	home := map[string]string{}
	perNode := map[string]int{}
	enough := func() bool {
		if len(home) < roomsWanted {
			return false
		}
		for _, p := range nodes {
			if perNode[p.id] < minPerNode {
				return false
			}
		}
		return true
	}
	var rooms []string
	for k := 0; !enough(); k++ {
		if k == 100 || time.Now().After(deadline) {
			t.Fatalf("after %d rooms, not %d on every node: %v", k, minPerNode, perNode)
		}
		id := fmt.Sprintf("room-%d", k)
		e, err := bindAndEcho(t, nodes[k%len(nodes)], id)
		if err != nil {
			t.Fatal(err)
		}
		if e.Served != 1 {
			t.Fatalf("%s served %d requests, want 1 (a fresh room)", id, e.Served)
		}
		rooms = append(rooms, id)
		home[id] = e.Node
		perNode[e.Node]++
	}
	return rooms, home
}

// watchPlacement reads every node's activations continuously until the test ends,
// and then fails it if a room was ever seen active on two nodes at once (reporting
// when each such room was first seen so). A node that does not answer is left out of
// that round.
func watchPlacement(t *testing.T, nodes []*meshProc) {
	ctx, cancel := context.WithCancel(context.Background())
	first := map[string]string{} // room -> when and where it was first seen twice
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			where := map[string][]string{}
			for _, p := range nodes {
				ids, _ := p.rooms()
				for _, id := range ids {
					where[id] = append(where[id], p.id)
				}
			}
			for id, on := range where {
				if _, seen := first[id]; len(on) > 1 && !seen {
					first[id] = fmt.Sprintf("%s on %v at %s", id, on, time.Now().Format("15:04:05.000"))
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done // first is the watcher's until it is done
		if len(first) > 0 {
			seen := slices.Sorted(maps.Values(first))
			t.Errorf("%d rooms had two activations at once: %s", len(seen), strings.Join(seen, "; "))
		}
	})
}
