package fleet

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshnode/meshnode"
	"github.com/meshnode/meshnode/actor"
	"github.com/meshnode/meshnode/binding"
	"github.com/meshnode/meshnode/examples/sampleapp"
	"github.com/meshnode/meshnode/fault"
	"github.com/meshnode/meshnode/internal/testkit"
	"github.com/meshnode/meshnode/mesh/meshtest"
	"github.com/meshnode/meshnode/session"
	"github.com/meshnode/meshnode/session/connector"
	"github.com/meshnode/meshnode/session/wire"
)

// Wait bounds every wait of the helpers.
const Wait = 10 * time.Second

// Options tunes a fleet.
type Options struct {
	// NoTap turns the record tap off (benchmarks).
	NoTap bool
	// Session overrides the session type (default: the sample session).
	Session func(b *binding.Binder) session.SessionType
	// Binding configures every node's binder (zero value: the defaults).
	Binding binding.Options
	// Config adjusts every node's configuration after the fleet set its kinds, STREAM
	// endpoint and session (bounds, timeouts).
	Config func(cfg *meshnode.Config)
	// Mesh is handed to meshtest (timing, flow-control window).
	Mesh meshtest.Options
}

// Events records what probe Actors saw, per ActorId.
type Events struct {
	mu    sync.Mutex
	got   map[string][]string
	ticks atomic.Int64
	// tickTarget and tickDone: TicksReach's channel, closed by the tick that reaches
	// the target (whoever swaps tickDone out closes it, once).
	tickTarget atomic.Int64
	tickDone   atomic.Pointer[chan struct{}]
	gate       chan struct{} // room.sleep turns wait on it (Hold, Wake)
}

// Hold makes probe Actors block in their room.sleep turns until Wake.
func (e *Events) Hold() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.gate == nil {
		e.gate = make(chan struct{})
	}
}

// Wake lets every room.sleep turn return. The fleet wakes them when the test ends.
func (e *Events) Wake() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.gate != nil {
		close(e.gate)
		e.gate = nil
	}
}

var closedGate = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func (e *Events) sleepGate() <-chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.gate == nil {
		return closedGate
	}
	return e.gate
}

// Ticks returns how many room.tick relays probe Actors received (counted, not
// recorded, so benchmarks can send millions).
func (e *Events) Ticks() int64 { return e.ticks.Load() }

// TicksReach returns a channel closed once Ticks reaches n. Armed before the ticks
// it waits for are sent, it lets a benchmark block for the tail of its timed loop
// instead of polling (a poller takes CPU from the turns it waits for). One wait at a
// time: arming again replaces the previous one.
func (e *Events) TicksReach(n int64) <-chan struct{} {
	ch := make(chan struct{})
	e.tickTarget.Store(n) // first: a tick in between must not close ch for an old target
	e.tickDone.Store(&ch)
	if e.ticks.Load() >= n {
		e.reached()
	}
	return ch
}

func (e *Events) tick() {
	if e.ticks.Add(1) >= e.tickTarget.Load() && e.tickDone.Load() != nil {
		e.reached()
	}
}

func (e *Events) reached() {
	if p := e.tickDone.Swap(nil); p != nil {
		close(*p)
	}
}

// Add records ev for the Actor id.
func (e *Events) Add(id, ev string) {
	e.mu.Lock()
	if e.got == nil {
		e.got = map[string][]string{}
	}
	e.got[id] = append(e.got[id], ev)
	e.mu.Unlock()
}

// Of returns what the Actor id saw, in order.
func (e *Events) Of(id string) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.got[id]...)
}

// Count returns how often the Actor id saw ev.
func (e *Events) Count(id, ev string) int {
	n := 0
	for _, x := range e.Of(id) {
		if x == ev {
			n++
		}
	}
	return n
}

// probe is a test Actor kind (registered as "probe"): it records binding events and
// answers like a room.
type probe struct {
	ev   *Events
	held []*actor.Pending // room.hold requests, answered on a "release" message
}

func (p *probe) Receive(ctx *actor.Context) {
	id := ctx.Self().ID
	switch m := ctx.Message().(type) {
	case *actor.SessionBound:
		p.ev.Add(id, "bound")
	case *actor.SessionEnded:
		p.ev.Add(id, "ended")
		if strings.HasPrefix(id, "panic-") {
			panic("probe " + id + " fails its disconnect notice")
		}
	case *actor.Message:
		if m.Name == "release" {
			// Answer every held request, oldest first, with its index.
			for k, r := range p.held {
				if err := r.Reply([]byte(`{"k":` + strconv.Itoa(k) + `}`)); err != nil {
					p.ev.Add(id, "release-refused")
				} else {
					p.ev.Add(id, "released")
				}
			}
			p.held = nil
		}
		if m.Name == "marker" {
			p.ev.Add(id, "marker")
		}
		if m.Name == "try-push" {
			if err := ctx.Push("room.said", []byte(`{}`), actor.WithCodec(wire.CodecJSON)); err != nil {
				p.ev.Add(id, "push-error")
			} else {
				p.ev.Add(id, "pushed")
			}
		}
	case *actor.SessionPacket:
		if m.Name == "room.tick" {
			p.ev.tick()
			return
		}
		p.ev.Add(id, "relayed:"+m.Name)
		switch {
		case m.Name == "room.echo" && m.Request:
			_ = ctx.Reply([]byte(`{"actor":"` + id + `","node":"` + ctx.Self().Node.RID + `"}`))
		case m.Name == "room.say":
			_ = ctx.Push("room.said", m.Payload, actor.WithCodec(m.Codec))
		case m.Name == "room.sleep":
			// Blocks this Actor's turn until Events.Wake.
			<-p.ev.sleepGate()
			p.ev.Add(id, "woke")
			if m.Request {
				_ = ctx.Reply([]byte(`{}`))
			}
		case m.Name == "room.meta":
			// What the Actor sees of a relayed packet's metadata and kind.
			var keys []string
			for _, e := range m.Metadata {
				keys = append(keys, e.Key+"="+e.Value)
			}
			p.ev.Add(id, fmt.Sprintf("meta request=%v %s", m.Request, strings.Join(keys, ",")))
		case m.Name == "room.fail" && m.Request:
			// An error without a fault kind, whose text must not reach the client.
			_ = ctx.ReplyError(errors.New("open /var/lib/secret: permission denied"))
		case m.Name == "room.reject" && m.Request:
			_ = ctx.ReplyError(fault.Errorf(fault.Rejected, "the probe rejects this"))
		case m.Name == "room.hold" && m.Request:
			// Answered only on a "release" message.
			if r, err := ctx.Later(); err == nil {
				p.held = append(p.held, r)
			}
		}
	}
}

// Fleet is an in-process mesh whose nodes each run an Actor host (kinds room and
// probe), a binder and a STREAM host serving the sample session. Ev records what probe
// Actors saw.
type Fleet struct {
	*meshtest.Cluster
	Ev *Events
}

// Start starts n nodes with meshnode.Start; each hosts the sample kinds and "probe",
// and serves the sample session (or opts.Session) on tcp://127.0.0.1:0.
func Start(t testing.TB, n int, opts Options) *Fleet {
	t.Helper()
	f := &Fleet{Ev: &Events{}}
	mo := opts.Mesh
	mo.NoTap = opts.NoTap
	outer := mo.Config
	mo.Config = func(i int, cfg *meshnode.Config) {
		if outer != nil {
			outer(i, cfg)
		}
		cfg.Kinds = append(sampleapp.Kinds(), actor.Kind{Name: "probe", New: func() actor.Actor { return &probe{ev: f.Ev} }})
		cfg.Streams = []string{"tcp://127.0.0.1:0"}
		cfg.StreamName = "gw"
		cfg.Binding = opts.Binding
		cfg.Session = func(node *meshnode.Node) session.SessionType {
			if opts.Session != nil {
				return opts.Session(node.Binder())
			}
			return sampleapp.Type(node.Binder(), node.Topics())
		}
		if opts.Config != nil {
			opts.Config(cfg)
		}
	}
	f.Cluster = meshtest.Start(t, n, mo)
	t.Cleanup(f.Ev.Wake) // runs before the cluster stops: no Actor turn stays blocked
	return f
}

// Binder returns node i's binder.
func (f *Fleet) Binder(i int) *binding.Binder { return f.Node(i).Binder() }

// Actors returns node i's Actor host.
func (f *Fleet) Actors(i int) *actor.Host { return f.Node(i).Actors() }

// Connect opens a client to node i's STREAM endpoint; it closes with the test.
func (f *Fleet) Connect(t testing.TB, i int) *connector.Connector {
	t.Helper()
	c := f.Dial(t, i)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Dial opens a client to node i's STREAM endpoint; the caller closes it.
func (f *Fleet) Dial(t testing.TB, i int) *connector.Connector {
	t.Helper()
	return testkit.DialConnector(t, f.Node(i).Endpoints()[0], Wait)
}

// IDOn returns an ActorId of kind that placement puts on node i.
func (f *Fleet) IDOn(t testing.TB, kind string, i int, prefix string) string {
	t.Helper()
	for k := 0; k < 1000; k++ {
		id := prefix + strconv.Itoa(k)
		fence, err := f.Actors(0).Lookup(context.Background(), kind, id)
		if err != nil {
			t.Fatal(err)
		}
		if fence.Node == f.Node(i).ID() {
			return id
		}
	}
	t.Fatalf("no %s id placed on node %d", kind, i)
	return ""
}
