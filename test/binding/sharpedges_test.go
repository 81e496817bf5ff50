package binding_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshnode/meshnode"
	"github.com/meshnode/meshnode/actor"
	"github.com/meshnode/meshnode/fault"
	"github.com/meshnode/meshnode/mesh"
	"github.com/meshnode/meshnode/session/connector"
	swire "github.com/meshnode/meshnode/session/wire"
	"github.com/meshnode/meshnode/test/fleet"
)

// Issue 25, item 1: an Actor bound from a session on node 2 moves 1 → 2 → 1. Node 2
// cached the Actor's first location; a later bind from node 2 must not be refused as
// stale (conflict / actorLocationStale) but correct the route at once and succeed.
// Three nodes, so that the directory holder of the id is not always one of the two.

// moveAwayAndBack moves the Actor id from node 1 to node 2 and back.
func moveAwayAndBack(t *testing.T, f *fleet.Fleet, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	for _, to := range []int{2, 1} {
		if _, err := f.Actors(to).Relocate(ctx, id, f.Node(to).ID().RID); err != nil {
			t.Fatalf("relocate %s to node %d: %v", id, to, err)
		}
	}
}

func TestIssue25_BindAfterMoveAwayAndBack_SessionOpenDuringMoves(t *testing.T) {
	f := fleet.Start(t, 3, fleet.Options{})
	id := f.IDOn(t, "room", 1, "room-")
	c := f.Connect(t, 2)
	mustBind(t, c, id, "room")
	echo(t, c)
	moveAwayAndBack(t, f, id)
	if got := echo(t, c); got.Node != f.Node(1).ID().RID || got.Served != 2 {
		t.Fatalf("echo of the session kept through the moves %+v", got)
	}
	// A second session on node 2 binds the Actor (replacing the first).
	c2 := f.Connect(t, 2)
	mustBind(t, c2, id, "room")
	if got := echo(t, c2); got.Node != f.Node(1).ID().RID || got.Served != 3 {
		t.Fatalf("echo after the new bind %+v, want served 3 on node 1", got)
	}
}

func TestIssue25_BindAfterMoveAwayAndBack_NoSessionDuringMoves(t *testing.T) {
	f := fleet.Start(t, 3, fleet.Options{})
	id := f.IDOn(t, "room", 1, "room-")
	c := f.Dial(t, 2)
	mustBind(t, c, id, "room")
	echo(t, c)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the closed session's binding state is gone", func() bool { return f.Binder(2).Stats().Sessions == 0 })
	moveAwayAndBack(t, f, id)
	c2 := f.Connect(t, 2)
	mustBind(t, c2, id, "room")
	if got := echo(t, c2); got.Node != f.Node(1).ID().RID || got.Served != 2 {
		t.Fatalf("echo after binding again %+v, want served 2 on node 1", got)
	}
}

// moving reports whether a move of id away from node i is under way.
func moving(f *fleet.Fleet, i int, id string) bool {
	for _, a := range f.Actors(i).Active() {
		if a.ID == id {
			return a.Moving
		}
	}
	return false
}

// holdTurn holds the turns of the fleet's Actors (f.Ev.Hold) and has c's bound Actor
// id enter one: it stays in it until f.Ev.Wake.
func holdTurn(t *testing.T, f *fleet.Fleet, c *connector.Connector, id string) {
	t.Helper()
	f.Ev.Hold()
	if err := c.Send(context.Background(), "room.sleep", map[string]int{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the probe's turn is held", func() bool { return f.Ev.Count(id, "relayed:room.sleep") == 1 })
}

// moveBehindHeldTurn holds the turn of c's bound Actor id, on node 1, and asks for its
// move to node 0, which queues behind the turn: the move's outcome comes on the channel
// once the turn is woken (f.Ev.Wake).
func moveBehindHeldTurn(t *testing.T, f *fleet.Fleet, c *connector.Connector, id string) <-chan error {
	t.Helper()
	holdTurn(t, f, c, id)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	t.Cleanup(cancel)
	moved := make(chan error, 1)
	go func() {
		_, err := f.Actors(1).Relocate(ctx, id, f.Node(0).ID().RID)
		moved <- err
	}()
	eventually(t, "the move is queued behind the held turn", func() bool { return moving(f, 1, id) })
	return moved
}

// Issue 25, item 1 (related): a relocation that starts while the Actor's bound session
// is closing does not wait out the seal timeout for a session that is gone: the session
// owner answers the seal at once (nothing to hold), and the session's tombstone, queued
// behind the move, follows the Actor and ends the binding on the target. The Actor's
// turn is held so that the move is queued before the tombstone: the seal reaches the
// session owner after the session is gone.
func TestIssue25_SealTowardAClosedSessionCompletesAtOnce(t *testing.T) {
	f := fleet.Start(t, 3, fleet.Options{})
	id := f.IDOn(t, "probe", 1, "gone-")
	c := f.Dial(t, 2)
	mustBind(t, c, id, "probe")
	moved := moveBehindHeldTurn(t, f, c, id)
	_ = c.Close()
	eventually(t, "the session is gone from its node", func() bool { return f.Binder(2).Stats().Sessions == 0 })
	start := time.Now()
	f.Ev.Wake()
	if err := <-moved; err != nil {
		t.Fatalf("move toward a closed session: %v (after %v)", err, time.Since(start))
	}
	eventually(t, "the tombstone ended the binding on the target", func() bool { return f.Ev.Count(id, "ended") == 1 })
	if n := f.Ev.Count(id, "bound"); n != 1 {
		t.Fatalf("bound %d times", n)
	}
}

// typeNote is a registered message the types Actor is sent by value.
type typeNote struct{ Post bool }

// posted is what the types Actor posts to itself by value (Context.Poster).
type posted struct{}

// typesSeen records the Go type of every message the "types" Actors receive.
type typesSeen struct {
	mu  sync.Mutex
	got []string
}

// of lists what the Actor id received.
func (s *typesSeen) of(id string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, g := range s.got {
		if typ, ok := strings.CutPrefix(g, id+" "); ok {
			out = append(out, typ)
		}
	}
	return out
}

type typesActor struct{ seen *typesSeen }

func (a *typesActor) Receive(ctx *actor.Context) {
	a.seen.mu.Lock()
	a.seen.got = append(a.seen.got, fmt.Sprintf("%s %T", ctx.Self().ID, ctx.Message()))
	a.seen.mu.Unlock()
	if m, ok := ctx.Message().(*typeNote); ok && m.Post {
		ctx.Poster()(posted{})
	}
}

// Issue 25, item 8: every message an Actor receives is a pointer, whatever its origin
// (the framework's own messages, a registered type sent by value from this node or
// another, a value posted to itself, a relayed packet), so one form of type switch
// matches them all.
func TestIssue25_EveryMessageArrivesAsAPointer(t *testing.T) {
	seen := &typesSeen{}
	f := fleet.Start(t, 2, fleet.Options{Config: func(cfg *meshnode.Config) {
		cfg.Messages = append(cfg.Messages, actor.MessageOf[typeNote]("test.typenote"))
		cfg.Kinds = append(cfg.Kinds, actor.Kind{Name: "types", New: func() actor.Actor { return &typesActor{seen: seen} }})
	}})
	id := f.IDOn(t, "types", 1, "types-")
	to := actor.Address{Kind: "types", ID: id}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := f.Actors(0).Send(ctx, to, typeNote{}); err != nil { // from another node
		t.Fatal(err)
	}
	if err := f.Actors(1).Send(ctx, to, typeNote{Post: true}); err != nil { // from its own node
		t.Fatal(err)
	}
	c := f.Dial(t, 0)
	mustBind(t, c, id, "types")
	if err := c.Send(ctx, "room.x", map[string]int{}); err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
	eventually(t, "the binding ended", func() bool { return slices.Contains(seen.of(id), "*actor.SessionEnded") })
	if _, err := f.Actors(1).Relocate(ctx, id, f.Node(0).ID().RID); err != nil {
		t.Fatal(err)
	}
	want := []string{"*actor.Started", "*binding_test.typeNote", "*binding_test.typeNote", "*binding_test.posted",
		"*actor.SessionBound", "*actor.SessionPacket", "*actor.SessionEnded", "*actor.Stopping", "*actor.Started"}
	eventually(t, "every message seen", func() bool { return len(seen.of(id)) >= len(want) })
	got := seen.of(id)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("the types Actor received %v, want %v", got, want)
	}
}

// badRoom answers relayed Requests with replies that cannot be delivered, and reports
// what Reply returned.
type badRoom struct{ replied chan error }

func (b *badRoom) Receive(ctx *actor.Context) {
	p, ok := ctx.Message().(*actor.SessionPacket)
	if !ok || !p.Request {
		return
	}
	switch p.Name {
	case "room.unencodable":
		b.replied <- ctx.Reply(map[string]any{"f": func() {}}) // JSON cannot encode a func
	case "room.huge":
		b.replied <- ctx.Reply(make([]byte, mesh.MaxRecordPayload+1))
	}
}

// Issue 25, item 2, the session-relay path: a reply to a relayed Request that cannot be
// encoded or delivered fails the client's request at once with a typed error (not at
// its relay timeout), and Reply returns it, on the Actor's node as on another.
func TestIssue25_RelayedReplyThatCannotBeDeliveredFailsAtOnce(t *testing.T) {
	replied := make(chan error, 1)
	f := fleet.Start(t, 2, fleet.Options{Config: func(cfg *meshnode.Config) {
		cfg.Kinds = append(cfg.Kinds, actor.Kind{Name: "badroom", New: func() actor.Actor { return &badRoom{replied: replied} }})
	}})
	for _, where := range []int{0, 1} {
		id := f.IDOn(t, "badroom", where, "bad-")
		c := f.Connect(t, 0)
		mustBind(t, c, id, "badroom")
		for _, tc := range []struct {
			name string
			want fault.Kind
		}{{"room.unencodable", fault.InvalidOperation}, {"room.huge", fault.CapacityExceeded}} {
			start := time.Now()
			err := request(t, c, tc.name, map[string]int{}, nil)
			took := time.Since(start)
			if code := remoteCode(err); code != tc.want.Code() {
				t.Errorf("%s on node %d: client got %v, want code %s", tc.name, where, err, tc.want.Code())
			}
			if took > time.Second {
				t.Errorf("%s on node %d: the client waited %v", tc.name, where, took)
			}
			if rerr := <-replied; !errors.Is(rerr, tc.want) {
				t.Errorf("%s on node %d: Reply returned %v, want %v", tc.name, where, rerr, tc.want)
			}
		}
	}
}

// dialWith connects a connector with opts to node i; it closes with the test.
func dialWith(t *testing.T, f *fleet.Fleet, i int, opts connector.Options) *connector.Connector {
	t.Helper()
	c, err := connector.New(f.Node(i).Endpoints()[0], opts)
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

// Issue 25, item 6: a client whose binding another session took over can tell it from
// a server drain (both close with ServerDrain): OnDrop is told the drop after the
// sample's room.replaced push, CloseError.Replaced says which, and with
// NotAfterReplaced the connector stays Disconnected instead of reconnecting into an
// unbound session. A drained server's drop is not a replacement.
func TestIssue25_ConnectorTellsReplacementFromDrain(t *testing.T) {
	f := fleet.Start(t, 2, fleet.Options{})
	id := f.IDOn(t, "room", 1, "room-")
	events := make(chan string, 4)
	opts := connector.Options{
		Heartbeat: connector.HeartbeatOptions{Disabled: true},
		Reconnect: connector.ReconnectPolicy{NotAfterReplaced: true, InitialDelay: 10 * time.Millisecond},
		OnDrop:    func(ce *connector.CloseError) { events <- fmt.Sprintf("drop replaced=%v", ce.Replaced()) },
	}
	old := dialWith(t, f, 0, opts)
	old.Handle("room.replaced", func(connector.Message) { events <- "room.replaced" })
	mustBind(t, old, id, "room")
	nu := f.Connect(t, 1)
	mustBind(t, nu, id, "room")
	for _, want := range []string{"room.replaced", "drop replaced=true"} {
		select {
		case got := <-events:
			if got != want {
				t.Fatalf("the replaced client saw %q, want %q", got, want)
			}
		case <-time.After(wait):
			t.Fatalf("the replaced client never saw %q", want)
		}
	}
	if st := old.State(); st != connector.StateDisconnected {
		t.Fatalf("the replaced client is %v, want Disconnected (no reconnect)", st)
	}
	if d := old.LastDrop(); d == nil || d.Reason != swire.CloseServerDrain || !d.Replaced() {
		t.Fatalf("LastDrop %v", d)
	}

	// A drain is ServerDrain too, but not a replacement: the connector reconnects.
	reconnecting := make(chan struct{}, 1)
	opts.OnStateChange = func(s connector.State) {
		if s == connector.StateReconnecting {
			reconnecting <- struct{}{}
		}
	}
	drained := dialWith(t, f, 0, opts)
	mustBind(t, drained, f.IDOn(t, "room", 0, "other-"), "room")
	if err := f.Node(0).Stream().Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-events:
		if got != "drop replaced=false" {
			t.Fatalf("the drained client saw %q", got)
		}
	case <-time.After(wait):
		t.Fatal("the drained client was not told its drop")
	}
	if d := drained.LastDrop(); d == nil || d.Reason != swire.CloseServerDrain || d.Replaced() {
		t.Fatalf("LastDrop after a drain %v", d)
	}
	select {
	case <-reconnecting:
	case <-time.After(wait):
		t.Fatal("the drained client did not try to reconnect")
	}
}
