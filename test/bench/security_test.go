package bench

import (
	"context"
	"crypto/rand"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/meshnode/meshnode"
	"github.com/meshnode/meshnode/actor"
	"github.com/meshnode/meshnode/internal/testkit"
	"github.com/meshnode/meshnode/mesh/meshtest"
	"github.com/meshnode/meshnode/session/connector"
	"github.com/meshnode/meshnode/session/wire"
	"github.com/meshnode/meshnode/test/fleet"
)

// What the mesh's protections cost (docs/security.md): the same cross-node work on a
// fleet with mutual TLS and encrypted gossip and on one without, in alternating blocks
// in one run (see alternate). Each reports the secured fleet's time over the plain
// one's (x-plain-time) and the time per operation of each.

// securedConfig gives node i the id node-i, a certificate of a fleet CA made for the
// benchmark, and a gossip key.
func securedConfig(b *testing.B) func(i int, cfg *meshnode.Config) {
	p, err := testkit.NewFleetPKI("bench fleet CA")
	if err != nil {
		b.Fatal(err)
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	return func(i int, cfg *meshnode.Config) {
		id := fmt.Sprintf("node-%d", i)
		f, err := p.IssueFiles(dir, id)
		if err != nil {
			b.Fatal(err)
		}
		cfg.NodeID = id
		cfg.MeshTLSCertFile, cfg.MeshTLSKeyFile, cfg.MeshTLSCAFile = f.Cert, f.Key, f.CA
		cfg.GossipKeys = [][]byte{key}
	}
}

// alternateTimes is alternate (the median of the blocks' time ratios, which a noisy
// machine's moods leave alone) also returning both sides' total times.
func alternateTimes(b *testing.B, block int, measured, baseline func(n int)) (m, base time.Duration, ratio float64) {
	ratios := make([]float64, 0, b.N/block+1)
	for done := 0; done < b.N; done += block {
		n := min(block, b.N-done)
		start := time.Now()
		measured(n)
		mid := time.Now()
		baseline(n)
		m += mid.Sub(start)
		base += time.Since(mid)
		ratios = append(ratios, float64(mid.Sub(start))/float64(time.Since(mid)))
	}
	slices.Sort(ratios)
	if len(ratios)%2 == 1 {
		return m, base, ratios[len(ratios)/2]
	}
	return m, base, (ratios[len(ratios)/2-1] + ratios[len(ratios)/2]) / 2
}

func reportTLS(b *testing.B, secured, plain time.Duration, ratio float64, unit string) {
	b.ReportMetric(ratio, "x-plain-time")
	b.ReportMetric(float64(secured.Nanoseconds())/float64(b.N), "ns/"+unit+"-tls")
	b.ReportMetric(float64(plain.Nanoseconds())/float64(b.N), "ns/"+unit+"-plain")
}

// BenchmarkActorSendCrossNodeTLSInterleaved: one-way Actor sends to an Actor on the
// other node (record 24), secured fleet against plain fleet: the cost of TLS per
// record.
func BenchmarkActorSendCrossNodeTLSInterleaved(b *testing.B) {
	cluster := func(secure bool) (func(n int), *countTo) {
		cnt := &countTo{}
		sec := securedConfig(b)
		c := meshtest.Start(b, 2, meshtest.Options{NoTap: true, Config: func(i int, cfg *meshnode.Config) {
			if secure {
				sec(i, cfg)
			}
			cfg.Kinds = []actor.Kind{{Name: "count", New: func() actor.Actor { return countingActor{cnt} }}}
			cfg.MaxMailbox, cfg.MaxMailboxBytes = max(b.N+1, actor.DefaultMaxMailbox), 1<<40
		}})
		ctx := context.Background()
		host := c.Node(0).Actors()
		to, err := host.LookupOn(ctx, "count", "target", c.Node(1).ID().RID)
		if err != nil {
			b.Fatal(err)
		}
		msg := &actor.Message{Name: "tick", ContentType: "application/octet-stream", Data: payload64}
		return func(n int) {
			cnt.arm(n)
			for range n {
				if err := host.Send(ctx, to, msg); err != nil {
					b.Fatal(err)
				}
			}
			testkit.Await(b, cnt.done, benchWait, "every Actor send to arrive")
		}, cnt
	}
	secured, _ := cluster(true)
	plain, _ := cluster(false)
	b.ReportAllocs()
	b.ResetTimer()
	s, p, r := alternateTimes(b, 20000, secured, plain)
	reportTLS(b, s, p, r, "record")
}

// boundFleet starts a two-node fleet (secured or not) and a client of node 0 bound to
// an Actor of kind on node 1.
func boundFleet(b *testing.B, secure bool, kind string) (*fleet.Fleet, *connector.Connector) {
	opts := fleet.Options{NoTap: true}
	if secure {
		opts.Mesh.Config = securedConfig(b)
	}
	f := fleet.Start(b, 2, opts)
	return f, boundClient(b, f, 1, kind)
}

// BenchmarkBoundRequestCrossNodeTLSInterleaved: a STREAM client's request relayed to
// its bound Actor on the other node and answered (24 out, 36 back), secured fleet
// against plain fleet: the cost of TLS per round trip.
func BenchmarkBoundRequestCrossNodeTLSInterleaved(b *testing.B) {
	payload := []byte(`{"msg":"hello mesh","n":12345678}`)
	ctx := context.Background()
	block := func(c *connector.Connector) func(n int) {
		return func(n int) {
			for range n {
				if _, err := c.RequestRaw(ctx, "room.echo", wire.CodecJSON, payload); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	_, sc := boundFleet(b, true, "room")
	_, pc := boundFleet(b, false, "room")
	b.ReportAllocs()
	b.ResetTimer()
	s, p, r := alternateTimes(b, 2000, block(sc), block(pc))
	reportTLS(b, s, p, r, "round-trip")
}

// BenchmarkBoundRelaySendCrossNodeTLSInterleaved: one-way relayed Sends to the bound
// Actor on the other node until it counted them, secured fleet against plain fleet.
func BenchmarkBoundRelaySendCrossNodeTLSInterleaved(b *testing.B) {
	ctx := context.Background()
	block := func(f *fleet.Fleet, c *connector.Connector) func(n int) {
		return func(n int) {
			reached := f.Ev.TicksReach(f.Ev.Ticks() + int64(n))
			for range n {
				if err := c.SendRaw(ctx, "room.tick", wire.CodecJSON, payload64[:2]); err != nil {
					b.Fatal(err)
				}
			}
			testkit.Await(b, reached, benchWait, "the Actor to receive every relayed Send")
		}
	}
	sf, sc := boundFleet(b, true, "probe")
	pf, pc := boundFleet(b, false, "probe")
	b.ReportAllocs()
	b.ResetTimer()
	s, p, r := alternateTimes(b, 20000, block(sf, sc), block(pf, pc))
	reportTLS(b, s, p, r, "relay")
}
