package binding_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/meshnode/meshnode/actor"
	"github.com/meshnode/meshnode/binding"
	"github.com/meshnode/meshnode/cmd/meshnode/sampleapp"
	"github.com/meshnode/meshnode/mesh"
	"github.com/meshnode/meshnode/mesh/meshtest"
	"github.com/meshnode/meshnode/session"
	"github.com/meshnode/meshnode/session/connector"
	"github.com/meshnode/meshnode/session/wire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const wait = 10 * time.Second

// events records what probe Actors saw, per ActorId.
type events struct {
	mu  sync.Mutex
	got map[string][]string
}

func (e *events) add(id, ev string) {
	e.mu.Lock()
	if e.got == nil {
		e.got = map[string][]string{}
	}
	e.got[id] = append(e.got[id], ev)
	e.mu.Unlock()
}

func (e *events) of(id string) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.got[id]...)
}

func (e *events) count(id, ev string) int {
	n := 0
	for _, x := range e.of(id) {
		if x == ev {
			n++
		}
	}
	return n
}

// probe is a test Actor kind: it records binding events and answers like a room.
type probe struct {
	b  *binding.Binder
	ev *events
}

func (p *probe) Receive(ctx *actor.Context) {
	id := ctx.Self().ID
	switch m := ctx.Message().(type) {
	case *binding.Bound:
		p.ev.add(id, "bound")
	case *binding.Ended:
		p.ev.add(id, "ended")
	case *binding.Relayed:
		p.ev.add(id, "relayed:"+m.Name)
		switch {
		case m.Name == "room.echo" && m.Request:
			_ = p.b.Reply(ctx, m, wire.CodecJSON, []byte(`{"actor":"`+id+`","node":"`+ctx.Self().Node.RID+`"}`))
		case m.Name == "room.say":
			_ = p.b.Push(ctx, "room.said", m.Codec, m.Payload)
		case m.Name == "room.hold" && m.Request:
			// Never answered: the client's request stays pending.
		}
	}
}

// fleet is an in-process mesh whose nodes each run an Actor host, a binder and a
// STREAM host serving the sample session.
type fleet struct {
	*meshtest.Cluster
	mu      sync.Mutex
	binders map[int]*binding.Binder
	hosts   map[int]*session.Host
	actors  map[int]*actor.Host
	ev      *events
}

func startFleet(t *testing.T, n int) *fleet {
	t.Helper()
	f := &fleet{binders: map[int]*binding.Binder{}, hosts: map[int]*session.Host{}, actors: map[int]*actor.Host{}, ev: &events{}}
	f.Cluster = meshtest.Start(t, n, meshtest.Options{OnStart: func(i int, node *mesh.Node) func() {
		ah, err := actor.NewHost(node, actor.HostOptions{})
		if err != nil {
			t.Fatal(err)
		}
		b := binding.New(node, ah, binding.Options{})
		if err := sampleapp.Register(ah, b); err != nil {
			t.Fatal(err)
		}
		if err := ah.Register(actor.Kind{Name: "probe", New: func() actor.Actor { return &probe{b: b, ev: f.ev} }}); err != nil {
			t.Fatal(err)
		}
		sh := session.NewHost(session.HostOptions{ActorSystem: node.ActorSystem()})
		sh.AddStreamNode("gw").Bind("tcp://127.0.0.1:0").Session(sampleapp.Type(b))
		if err := sh.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		f.mu.Lock()
		f.binders[i], f.hosts[i], f.actors[i] = b, sh, ah
		f.mu.Unlock()
		return func() {
			_ = sh.Close()
			ah.Close()
		}
	}})
	return f
}

func (f *fleet) binder(i int) *binding.Binder {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.binders[i]
}

func (f *fleet) actorHost(i int) *actor.Host {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.actors[i]
}

// connect opens a client to node i's STREAM endpoint.
func (f *fleet) connect(t *testing.T, i int) *connector.Connector {
	t.Helper()
	f.mu.Lock()
	ep := f.hosts[i].Node("gw").Endpoints()[0]
	f.mu.Unlock()
	c, err := connector.New(ep, connector.Options{
		Heartbeat: connector.HeartbeatOptions{Disabled: true},
		Reconnect: connector.ReconnectPolicy{Disabled: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := c.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// idOn returns an ActorId of kind that placement puts on node i.
func (f *fleet) idOn(t *testing.T, kind string, i int, prefix string) string {
	t.Helper()
	for k := 0; k < 1000; k++ {
		id := prefix + strconv.Itoa(k)
		fence, err := f.actorHost(0).Lookup(context.Background(), kind, id)
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

type bindReply struct {
	Actor             string `json:"actor"`
	Node              string `json:"node"`
	BindingGeneration uint64 `json:"bindingGeneration"`
}

func bind(t *testing.T, c *connector.Connector, id, kind string) (bindReply, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	var out bindReply
	err := c.Request(ctx, "bind", map[string]string{"actor": id, "kind": kind}, &out)
	return out, err
}

func mustBind(t *testing.T, c *connector.Connector, id, kind string) bindReply {
	t.Helper()
	r, err := bind(t, c, id, kind)
	if err != nil {
		t.Fatalf("bind %s: %v", id, err)
	}
	return r
}

func request(t *testing.T, c *connector.Connector, name string, v any, out any, opts ...connector.CallOption) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	return c.Request(ctx, name, v, out, opts...)
}

func remoteCode(err error) string {
	var re *connector.RemoteError
	if errors.As(err, &re) {
		return re.Code
	}
	return ""
}

// pushes collects the Send frames of one name a client receives.
func pushes(c *connector.Connector, name string) chan json.RawMessage {
	ch := make(chan json.RawMessage, 64)
	c.Handle(name, func(m connector.Message) { ch <- json.RawMessage(append([]byte(nil), m.Payload...)) })
	return ch
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
