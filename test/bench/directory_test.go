package bench

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshnode/meshnode"
	"github.com/meshnode/meshnode/actor"
	"github.com/meshnode/meshnode/mesh/meshtest"
)

// idleActor does nothing: the look-up benchmarks measure the directory, not an Actor.
type idleActor struct{}

func (idleActor) Receive(*actor.Context) {}

// dirActivateBatch bounds the activations the activate benchmark keeps at once: after
// each batch (untimed) they are deactivated, so memory stays flat whatever b.N is.
const dirActivateBatch = 512

// dirSeq makes every activated ActorId new, across runs of the sub-benchmark (a
// deactivated id's entry is released one-way: reusing it could meet the old entry).
var dirSeq atomic.Int64

// BenchmarkDirectoryLookup measures, from node 0 of three, what finding an Actor costs:
//   - cached: Host.Resolve of an Address resolved before (the route cache: what every
//     send to an Address pays; it must not get slower);
//   - holder-remote: Host.Lookup of an active Actor whose directory entry another node
//     holds (one hop to that node and back);
//   - activate: Host.Lookup of a new ActorId each time (the directory places it on its
//     holder: this node for about a third of the ids, another node for the rest).
func BenchmarkDirectoryLookup(b *testing.B) {
	c := meshtest.Start(b, 3, meshtest.Options{NoTap: true, Config: func(_ int, cfg *meshnode.Config) {
		cfg.Kinds = []actor.Kind{{Name: "bench-idle", New: func() actor.Actor { return idleActor{} }}}
	}})
	hosts := []*actor.Host{c.Node(0).Actors(), c.Node(1).Actors(), c.Node(2).Actors()}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// An Actor activated by a plain Lookup lives on its directory holder: the first id
	// that lands on node 1 is one node 1 holds.
	remote := ""
	for k := 0; remote == "" && k < 64; k++ {
		id := "dir-" + strconv.Itoa(k)
		f, err := hosts[0].Lookup(ctx, "bench-idle", id)
		if err != nil {
			b.Fatal(err)
		}
		if f.Node == c.Node(1).ID() {
			remote = id
		}
	}
	if remote == "" {
		b.Fatal("none of 64 ids landed on node 1")
	}
	if _, held := hosts[1].DirectoryEntries()[remote]; !held {
		b.Fatalf("node 1 hosts %s but does not hold its directory entry", remote)
	}

	b.Run("cached", func(b *testing.B) {
		addr := actor.Address{Kind: "bench-idle", ID: remote}
		if _, err := hosts[0].Resolve(ctx, addr); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, err := hosts[0].Resolve(ctx, addr); err != nil {
				b.Fatal(err)
			}
		}
	})

	b.Run("holder-remote", func(b *testing.B) {
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, err := hosts[0].Lookup(ctx, "bench-idle", remote); err != nil {
				b.Fatal(err)
			}
		}
	})

	b.Run("activate", func(b *testing.B) {
		entries := func() int {
			n := 0
			for _, h := range hosts {
				n += len(h.DirectoryEntries())
			}
			return n
		}
		before := entries()
		ids := make([]string, dirActivateBatch)
		fences := make([]actor.RouteFence, 0, dirActivateBatch)
		// deactivate stops this batch's activations where they live.
		deactivate := func() {
			for _, f := range fences {
				for _, h := range hosts {
					if h.Node().ID() == f.Node {
						h.Deactivate(f.ID)
					}
				}
			}
			fences = fences[:0]
		}
		b.ReportAllocs()
		b.ResetTimer()
		for done := 0; done < b.N; {
			b.StopTimer()
			deactivate()
			n := min(dirActivateBatch, b.N-done)
			for i := range n {
				ids[i] = "act-" + strconv.FormatInt(dirSeq.Add(1), 10)
			}
			b.StartTimer()
			for _, id := range ids[:n] {
				f, err := hosts[0].Lookup(ctx, "bench-idle", id)
				if err != nil {
					b.Fatal(err)
				}
				fences = append(fences, f)
			}
			done += n
		}
		b.StopTimer()
		deactivate()
		// The holders are told of a release one-way: give them a moment, then check
		// that no entry outlived its activation.
		deadline := time.Now().Add(benchWait)
		for entries() != before && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		if n := entries(); n != before {
			b.Errorf("directory entries after deactivating every activation: %d, %d before", n, before)
		}
	})
}
