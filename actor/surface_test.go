package actor_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshnode/meshnode"
	"github.com/meshnode/meshnode/actor"
	"github.com/meshnode/meshnode/fault"
	"github.com/meshnode/meshnode/mesh/meshpb"
	"github.com/meshnode/meshnode/mesh/meshtest"
	"github.com/meshnode/meshnode/session/wire"
)

// The Actor surface: typed messages, request/response, the activation's context, the
// panic policy.

type Ping struct {
	N    int
	Text string
}

type Pong struct {
	N    int
	From string
}

type Note struct{ Text string }

// Fail asks the replier to answer with an error of a kind.
type Fail struct{ Kind uint8 }

// Hold asks the replier to answer later, on Release.
type Hold struct{ N int }
type Release struct{}

// Boom makes the Actor panic.
type Boom struct{}

// Wait makes the Actor's turn wait for its context's end.
type Wait struct{}

var messages = []actor.MessageType{
	actor.MessageOf[Ping]("test.ping"),
	actor.MessageOf[Pong]("test.pong", wire.CodecJSON),
	actor.MessageOf[Note]("test.note"),
	actor.MessageOf[Fail]("test.fail"),
	actor.MessageOf[Hold]("test.hold"),
	actor.MessageOf[Release]("test.release"),
	actor.MessageOf[Boom]("test.boom"),
	actor.MessageOf[Wait]("test.wait"),
	actor.MessageOf[meshpb.LookupRequest]("test.proto", wire.CodecProtobuf),
}

// seen collects what surface Actors received.
type seen struct {
	mu      sync.Mutex
	notes   []string
	senders []*actor.Ref
	proto   []string
	raw     []string
	waited  chan error
	// held gets the N of each Hold the replier has taken (its request is then in flight
	// at the Actor); waiting is signalled when a Wait turn has started.
	held    chan int
	waiting chan struct{}
}

// signal sends v on ch without ever blocking an Actor's turn (the channels are
// buffered beyond what a test sends).
func signal[T any](ch chan T, v T) {
	select {
	case ch <- v:
	default:
	}
}

// awaitHeld waits until the replier has taken Hold{N: n}: the request is at the Actor.
func (s *seen) awaitHeld(t *testing.T, n int) {
	t.Helper()
	deadline := time.After(wait)
	for {
		select {
		case got := <-s.held:
			if got == n {
				return
			}
		case <-deadline:
			t.Fatalf("Hold{N: %d} never reached the replier", n)
		}
	}
}

func (s *seen) add(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f()
}

// replier answers Ping with Pong, records Notes, fails on Fail, holds on Hold.
type replier struct {
	s    *seen
	held []*actor.Pending
}

func (r *replier) Receive(ctx *actor.Context) {
	switch m := ctx.Message().(type) {
	case *Ping:
		_ = ctx.Reply(Pong{N: m.N + 1, From: ctx.Self().ID})
	case *Note:
		r.s.add(func() { r.s.notes = append(r.s.notes, m.Text); r.s.senders = append(r.s.senders, ctx.Sender()) })
	case *Fail:
		_ = ctx.ReplyError(fault.Errorf(fault.Kind(m.Kind), "asked to fail"))
	case *Hold:
		p, err := ctx.Later()
		if err == nil {
			r.held = append(r.held, p)
		}
		signal(r.s.held, m.N)
	case *Release:
		for i, p := range r.held {
			_ = p.Reply(&Pong{N: i})
		}
		r.held = nil
	case *Boom:
		panic("boom")
	case *Wait:
		signal(r.s.waiting, struct{}{})
		<-ctx.Done()
		r.s.waited <- ctx.Err()
	case *meshpb.LookupRequest:
		r.s.add(func() { r.s.proto = append(r.s.proto, m.ActorId) })
	case *actor.Message:
		r.s.add(func() { r.s.raw = append(r.s.raw, m.Name) })
	}
}

// asker forwards a Ping it gets as a Note to another Actor, and requests on behalf of
// the test (from inside an Actor).
type asker struct{}

func (a *asker) Receive(ctx *actor.Context) {
	if m, ok := ctx.Message().(*Ping); ok {
		to := actor.Address{Kind: "replier", ID: m.Text}
		if m.N < 0 {
			_ = ctx.Send(to, Note{Text: "from an Actor"})
			_ = ctx.Reply(nil)
			return
		}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		v, err := ctx.Request(rctx, to, &Ping{N: m.N})
		if err != nil {
			_ = ctx.ReplyError(err)
			return
		}
		_ = ctx.Reply(v)
	}
}

type surface struct {
	*meshtest.Cluster
	s *seen
}

func (c *surface) host(i int) *actor.Host { return c.Node(i).Actors() }

// startSurface starts n nodes hosting the replier and asker kinds; adjust sets bounds.
func startSurface(t *testing.T, n int, adjust func(cfg *meshnode.Config)) *surface {
	c := &surface{s: &seen{waited: make(chan error, 4), held: make(chan int, 16), waiting: make(chan struct{}, 4)}}
	c.Cluster = meshtest.Start(t, n, meshtest.Options{Config: func(i int, cfg *meshnode.Config) {
		cfg.Messages = messages
		cfg.Kinds = []actor.Kind{
			{Name: "replier", New: func() actor.Actor { return &replier{s: c.s} }},
			{Name: "asker", New: func() actor.Actor { return &asker{} }},
		}
		if adjust != nil {
			adjust(cfg)
		}
	}})
	return c
}

// idOn returns an ActorId of kind that placement puts on node i.
func (c *surface) idOn(t *testing.T, kind string, i int) string {
	t.Helper()
	for k := 0; k < 1000; k++ {
		id := fmt.Sprintf("%s-%d", kind, k)
		f, err := c.host(0).Lookup(context.Background(), kind, id)
		if err != nil {
			t.Fatal(err)
		}
		if f.Node == c.Node(i).ID() {
			return id
		}
	}
	t.Fatalf("no %s placed on node %d", kind, i)
	return ""
}

func reqCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	t.Cleanup(cancel)
	return ctx
}

// Actors exchange typed values: across nodes (encoded with the type's codec, decoded
// into the registered type) and on one node (handed over); either way the receiver
// gets a *T, and a reply comes back as a value.
func TestSurface_TypedRequestResponseAcrossNodesAndLocally(t *testing.T) {
	c := startSurface(t, 2, nil)
	for _, where := range []int{0, 1} {
		id := c.idOn(t, "replier", where)
		v, err := c.host(0).Request(reqCtx(t), actor.Address{Kind: "replier", ID: id}, Ping{N: 41})
		if err != nil {
			t.Fatalf("request to node %d: %v", where, err)
		}
		pong, ok := v.(*Pong)
		if !ok || pong.N != 42 || pong.From != id {
			t.Fatalf("reply from node %d: %#v", where, v)
		}
	}
}

// One-way sends carry the sender's ref; a protobuf message type crosses nodes; a name
// the receiver has not registered arrives as a raw *Message; a type the sender has not
// registered cannot be sent.
func TestSurface_SendsCodecsAndUnregisteredTypes(t *testing.T) {
	c := startSurface(t, 2, nil)
	target := c.idOn(t, "replier", 1)
	askerID := c.idOn(t, "asker", 0)
	ctx := reqCtx(t)
	if _, err := c.host(0).Request(ctx, actor.Address{Kind: "asker", ID: askerID}, Ping{N: -1, Text: target}); err != nil {
		t.Fatal(err)
	}
	to := actor.Address{Kind: "replier", ID: target}
	if err := c.host(0).Send(ctx, to, &meshpb.LookupRequest{ActorId: "over-protobuf"}); err != nil {
		t.Fatal(err)
	}
	if err := c.host(0).Send(ctx, to, actor.Message{Name: "nobody.registered", ContentType: "application/octet-stream", Data: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	type unregistered struct{ X int }
	if err := c.host(0).Send(ctx, to, unregistered{}); !errors.Is(err, fault.NotConfigured) {
		t.Fatalf("send of an unregistered type: %v, want fault.NotConfigured", err)
	}
	if err := c.WaitUntil(wait, func() bool {
		c.s.mu.Lock()
		defer c.s.mu.Unlock()
		return len(c.s.notes) == 1 && len(c.s.proto) == 1 && len(c.s.raw) == 1
	}); err != nil {
		t.Fatalf("notes %v, proto %v, raw %v", c.s.notes, c.s.proto, c.s.raw)
	}
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	if c.s.senders[0] == nil || c.s.senders[0].ID != askerID {
		t.Errorf("Sender() = %v, want the asker %s", c.s.senders[0], askerID)
	}
	if c.s.proto[0] != "over-protobuf" || c.s.raw[0] != "nobody.registered" {
		t.Errorf("proto %v raw %v", c.s.proto, c.s.raw)
	}
}

// A request gets an answer or a typed error, never a hang: the replier's own error
// kind; DeadlineExceeded within the caller's deadline; NotFound for an unknown kind;
// Unavailable at once when the target's node fails.
func TestSurface_RequestErrorsAreTypedAndNeverHang(t *testing.T) {
	c := startSurface(t, 3, nil)
	remote := actor.Address{Kind: "replier", ID: c.idOn(t, "replier", 1)}
	if _, err := c.host(0).Request(reqCtx(t), remote, Fail{Kind: uint8(fault.Rejected)}); !errors.Is(err, fault.Rejected) {
		t.Fatalf("replier's error: %v, want fault.Rejected", err)
	}
	// Held and never answered: the caller's deadline.
	before := c.host(0).Stats()
	short, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := c.host(0).Request(short, remote, Hold{}); !errors.Is(err, fault.DeadlineExceeded) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("unanswered request: %v, want fault.DeadlineExceeded", err)
	} else if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("returned after %v, deadline 200ms", d)
	}
	if s := c.host(0).Stats(); s.RequestsTimedOut-before.RequestsTimedOut != 1 || s.RequestsNodeFailed != before.RequestsNodeFailed {
		t.Fatalf("after one request ran out of time: %d timed out, %d failed with their node; want 1 and 0",
			s.RequestsTimedOut-before.RequestsTimedOut, s.RequestsNodeFailed-before.RequestsNodeFailed)
	}
	if _, err := c.host(0).Request(reqCtx(t), actor.Address{Kind: "no-such-kind", ID: "x"}, Ping{}); !errors.Is(err, fault.NotFound) {
		t.Fatalf("unknown kind: %v, want fault.NotFound", err)
	}
	// The target's node dies while the request waits.
	// It is killed only once the Actor holds the request: a kill before the request
	// reached it would fail the request Unavailable too, without the in-flight path.
	doomed := actor.Address{Kind: "replier", ID: c.idOn(t, "replier", 2)}
	errc := make(chan error, 1)
	go func() {
		_, err := c.host(0).Request(reqCtx(t), doomed, Hold{N: 1})
		errc <- err
	}()
	c.s.awaitHeld(t, 1)
	c.Kill(2)
	select {
	case err := <-errc:
		if !errors.Is(err, fault.Unavailable) {
			t.Fatalf("request to a node that died: %v, want fault.Unavailable", err)
		}
	case <-time.After(wait):
		t.Fatal("a request to a dead node still waits")
	}
	if s := c.host(0).Stats(); s.RequestsNodeFailed-before.RequestsNodeFailed != 1 || s.RequestsTimedOut-before.RequestsTimedOut != 1 {
		t.Fatalf("after a request's target node died: %d failed with their node, %d timed out; want 1 and 1 (the earlier one)",
			s.RequestsNodeFailed-before.RequestsNodeFailed, s.RequestsTimedOut-before.RequestsTimedOut)
	}
}

// A request answered later (Context.Later) completes when the Actor replies in another
// turn; request/response also works from inside an Actor.
func TestSurface_LaterAndRequestsFromAnActor(t *testing.T) {
	c := startSurface(t, 2, nil)
	target := actor.Address{Kind: "replier", ID: c.idOn(t, "replier", 1)}
	done := make(chan any, 1)
	go func() {
		v, err := c.host(0).Request(reqCtx(t), target, Hold{})
		if err != nil {
			done <- err
			return
		}
		done <- v
	}()
	c.s.awaitHeld(t, 0) // a Release before the Hold is taken answers nothing
	if err := c.host(0).Send(reqCtx(t), target, Release{}); err != nil {
		t.Fatal(err)
	}
	select {
	case v := <-done:
		if p, ok := v.(*Pong); !ok || p.N != 0 {
			t.Fatalf("later reply: %#v", v)
		}
	case <-time.After(wait):
		t.Fatal("held request never answered")
	}
	v, err := c.host(0).Request(reqCtx(t), actor.Address{Kind: "asker", ID: c.idOn(t, "asker", 0)}, Ping{N: 9, Text: target.ID})
	if p, ok := v.(*Pong); err != nil || !ok || p.N != 10 {
		t.Fatalf("request through an Actor: %#v %v", v, err)
	}
}

// The activation's context is cancelled when it stops: a turn that waits on it returns.
func TestSurface_TurnContextCancelledWhenTheActivationStops(t *testing.T) {
	c := startSurface(t, 1, nil)
	id := "waiter"
	if err := c.host(0).Send(reqCtx(t), actor.Address{Kind: "replier", ID: id}, Wait{}); err != nil {
		t.Fatal(err)
	}
	select { // the Wait turn has started: its context is what is cancelled
	case <-c.s.waiting:
	case <-time.After(wait):
		t.Fatal("the Wait turn never started")
	}
	c.host(0).Deactivate(id)
	select {
	case err := <-c.s.waited:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("turn context ended with %v", err)
		}
	case <-time.After(wait):
		t.Fatal("the turn's context was not cancelled when the activation stopped")
	}
}

// The panic policy: a panic answers the request it was handling with internal_failure
// and is counted; MaxPanics panics within PanicWindow stop the activation; the next
// message activates it anew.
func TestSurface_PanicPolicy(t *testing.T) {
	c := startSurface(t, 1, func(cfg *meshnode.Config) { cfg.MaxPanics, cfg.PanicWindow = 2, time.Minute })
	to := actor.Address{Kind: "replier", ID: "fragile"}
	first, err := c.host(0).Lookup(reqCtx(t), "replier", "fragile")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.host(0).Request(reqCtx(t), to, Boom{}); !errors.Is(err, fault.InternalFailure) {
		t.Fatalf("request that panicked: %v, want fault.InternalFailure", err)
	}
	if v, err := c.host(0).Request(reqCtx(t), to, Ping{N: 1}); err != nil || v.(*Pong).N != 2 {
		t.Fatalf("after one panic the Actor still serves: %v %v", v, err)
	}
	if _, err := c.host(0).Request(reqCtx(t), to, Boom{}); !errors.Is(err, fault.InternalFailure) {
		t.Fatalf("second panic: %v", err)
	}
	if err := c.WaitUntil(wait, func() bool { return c.host(0).Stats().PanicStops == 1 }); err != nil {
		t.Fatalf("stats %+v: the activation was not stopped", c.host(0).Stats())
	}
	if n := c.host(0).Stats().Panics; n != 2 {
		t.Errorf("Panics = %d", n)
	}
	if v, err := c.host(0).Request(reqCtx(t), to, Ping{N: 5}); err != nil || v.(*Pong).N != 6 {
		t.Fatalf("the next message does not reach a new activation: %v %v", v, err)
	}
	again, _ := c.host(0).Lookup(reqCtx(t), "replier", "fragile")
	if again.ObjectGeneration == first.ObjectGeneration {
		t.Error("the activation after the panic stop has the old ObjectGeneration")
	}
}

// Construction validates: message types and kinds give errors that name the field.
func TestSurface_ConstructionValidates(t *testing.T) {
	type T struct{ A int }
	type U struct{ A int }
	for _, tc := range []struct {
		name  string
		types []actor.MessageType
		want  string
		kind  fault.Kind
	}{
		{"DuplicateName", []actor.MessageType{actor.MessageOf[T]("x"), actor.MessageOf[U]("x")}, "Messages[1]", fault.AlreadyExists},
		{"DuplicateType", []actor.MessageType{actor.MessageOf[T]("x"), actor.MessageOf[T]("y")}, "Messages[1]", fault.AlreadyExists},
		{"MissingCodec", []actor.MessageType{actor.MessageOf[T]("x", wire.Codec(9))}, "Messages[0]", fault.NotConfigured},
		{"ProtobufForAStruct", []actor.MessageType{actor.MessageOf[T]("x", wire.CodecProtobuf)}, "Messages[0]", fault.InvalidOperation},
		{"RawForAStruct", []actor.MessageType{actor.MessageOf[T]("x", wire.CodecRaw)}, "Messages[0]", fault.InvalidOperation},
		{"ReservedName", []actor.MessageType{actor.MessageOf[T]("$zlink.x")}, "Messages[0]", fault.InvalidOperation},
		{"PointerType", []actor.MessageType{actor.MessageOf[*T]("x")}, "Messages[0]", fault.InvalidOperation},
		{"EmptyName", []actor.MessageType{actor.MessageOf[T]("")}, "Messages[0]", fault.InvalidOperation},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := meshnode.TestConfig()
			cfg.Messages = tc.types
			cfg.Logger = slog.New(slog.DiscardHandler)
			n, got := meshnode.Start(context.Background(), cfg)
			if got == nil {
				_ = n.Close()
			}
			if got == nil || !strings.Contains(got.Error(), "Config: actor: "+tc.want) || !errors.Is(got, tc.kind) {
				t.Fatalf("Start: %v; want an error of kind %v naming Config %s", got, tc.kind, tc.want)
			}
		})
	}
	c := startSurface(t, 1, nil)
	if err := c.host(0).Register(actor.Kind{Name: "replier", New: func() actor.Actor { return &replier{} }}); !errors.Is(err, fault.AlreadyExists) {
		t.Errorf("a kind registered twice: %v", err)
	}
	if err := c.host(0).Register(actor.Kind{Name: "no-factory"}); err == nil || !strings.Contains(err.Error(), "Kind.New") {
		t.Errorf("a kind without a factory: %v", err)
	}
}
