package binding_test

import (
	"context"

	"encoding/json"
	"testing"
	"time"

	"github.com/meshnode/meshnode/actor"
	"github.com/meshnode/meshnode/binding"
	"github.com/meshnode/meshnode/examples/sampleapp"
	"github.com/meshnode/meshnode/session"

	"github.com/meshnode/meshnode/mesh/meshpb"
	"github.com/meshnode/meshnode/mesh/meshtest"
	"github.com/meshnode/meshnode/mesh/wire"
	"github.com/meshnode/meshnode/session/connector"
	swire "github.com/meshnode/meshnode/session/wire"
	"github.com/meshnode/meshnode/test/fleet"
)

type echoReply struct {
	Actor   string          `json:"actor"`
	Node    string          `json:"node"`
	Payload json.RawMessage `json:"payload"`
}

// Seed §10 "The path to the Actor": binding and relaying to an Actor on another node
// keeps the socket on the session owner node, and only 38/20/24/36 cross between nodes.
func TestSeed10_PathToActorOnlyBindingRecordsCross(t *testing.T) {
	f := fleet.Start(t, 2, fleet.Options{})
	id := f.IDOn(t, "room", 1, "room-")
	c := f.Connect(t, 0)
	said := pushes(c, "room.said")
	f.Tap().Reset()
	br := mustBind(t, c, id, "room")
	if br.Node != f.Node(1).ID().RID || br.BindingGeneration == 0 {
		t.Fatalf("bind reply %+v", br)
	}
	var out echoReply
	if err := request(t, c, "room.echo", map[string]int{"n": 1}, &out); err != nil {
		t.Fatal(err)
	}
	if out.Actor != id || out.Node != f.Node(1).ID().RID || string(out.Payload) != `{"n":1}` {
		t.Fatalf("room.echo %+v", out)
	}
	if err := c.Send(t.Context(), "room.say", map[string]string{"hi": "all"}); err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-said:
		if string(p) != `{"hi":"all"}` {
			t.Fatalf("room.said %s", p)
		}
	case <-time.After(wait):
		t.Fatal("no room.said push")
	}
	allowed := map[wire.Command]bool{wire.CmdBoundSessionBind: true, wire.CmdReply: true, wire.CmdActorSend: true, wire.CmdBoundSessionSend: true}
	seen := f.Tap().Commands()
	for cmd := range seen {
		if !allowed[cmd] {
			t.Errorf("record %s crossed the boundary", cmd)
		}
	}
	for cmd := range allowed {
		if seen[cmd] == 0 {
			t.Errorf("record %s never crossed", cmd)
		}
	}
}

// §7.18: two Actors bound on one session each relay independently; metadata "actor"
// picks the target.
func TestBinding_TwoActorsOnOneSessionRelayIndependently(t *testing.T) {
	f := fleet.Start(t, 3, fleet.Options{})
	a := f.IDOn(t, "room", 1, "a-")
	b := f.IDOn(t, "room", 2, "b-")
	c := f.Connect(t, 0)
	mustBind(t, c, a, "room")
	mustBind(t, c, b, "room")
	for _, id := range []string{a, b} {
		var out echoReply
		if err := request(t, c, "room.echo", map[string]string{"to": id}, &out, connector.WithMetadata("actor", id)); err != nil {
			t.Fatal(err)
		}
		if out.Actor != id {
			t.Fatalf("relay to %s answered by %s", id, out.Actor)
		}
	}
}

// §7.18: push/close without a binding is session-not-bound (InvalidOperation), and
// succeeds after binding; an unknown Actor kind is a clear error and the connection
// stays.
func TestBinding_UnboundIsInvalidOperationThenSucceedsAfterBind(t *testing.T) {
	f := fleet.Start(t, 2, fleet.Options{})
	c := f.Connect(t, 0)
	var out echoReply
	err := request(t, c, "room.echo", map[string]int{}, &out)
	if code := remoteCode(err); code != "invalid_operation" {
		t.Fatalf("room.echo unbound: %v", err)
	}
	if _, err := bind(t, c, "x", "nosuchkind"); remoteCode(err) != "not_found" {
		t.Fatalf("bind of an unknown kind: %v", err)
	}
	mustBind(t, c, f.IDOn(t, "room", 1, "r-"), "room")
	if err := request(t, c, "room.echo", map[string]int{}, &out); err != nil {
		t.Fatalf("after bind: %v", err)
	}
}

// §7.5: rebinding the current binding from the same session is an idempotent success:
// same generation, no replacement, no close.
func TestRebind_SameSessionIsIdempotent(t *testing.T) {
	f := fleet.Start(t, 2, fleet.Options{})
	id := f.IDOn(t, "probe", 1, "p-")
	c := f.Connect(t, 0)
	replaced := pushes(c, "room.replaced")
	first := mustBind(t, c, id, "probe")
	second := mustBind(t, c, id, "probe")
	if first.BindingGeneration != second.BindingGeneration {
		t.Fatalf("rebind changed generation %d -> %d", first.BindingGeneration, second.BindingGeneration)
	}
	var out echoReply
	if err := request(t, c, "room.echo", map[string]int{}, &out); err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-replaced:
		t.Fatalf("idempotent rebind replaced the session: %s", p)
	default:
	}
	if n := f.Ev.Count(id, "bound"); n != 1 {
		t.Fatalf("Actor saw %d binds", n)
	}
}

// §7.10 / §7.18 rebind: the new bind completes without waiting for the old session;
// pushes go only to the new session; the old session's relays are rejected; the old
// connection gets room.replaced and closes 100 ms after the callback, not earlier.
func TestRebind_ReplacesPreviousSessionAcrossNodes(t *testing.T) {
	f := fleet.Start(t, 3, fleet.Options{})
	checkReplacement(t, f, f.IDOn(t, "room", 1, "shared-"), 0, 2)
}

// Issue 25, item 3: the same on one node, where the replaced and the replacing session
// and the Actor all sit (the normal case of a single-node deployment): the 51 goes to
// this node's own session owner.
func TestRebind_ReplacesPreviousSessionOnOneNode(t *testing.T) {
	f := fleet.Start(t, 1, fleet.Options{})
	checkReplacement(t, f, "shared-0", 0, 0)
}

// checkReplacement binds the room id from a session on node oldNode, then from one on
// node newNode, and checks the replacement as the zlink rules have it.
func checkReplacement(t *testing.T, f *fleet.Fleet, id string, oldNode, newNode int) {
	t.Helper()
	old := f.Connect(t, oldNode)
	oldReplaced := pushes(old, "room.replaced")
	oldSaid := pushes(old, "room.said")
	mustBind(t, old, id, "room")

	f.Tap().Reset()
	nu := f.Connect(t, newNode)
	nuSaid := pushes(nu, "room.said")
	// The replacement callback runs after the new bind began, so the old connection
	// must close no earlier than 100 ms after this instant. (Timing from the moment the
	// test reads room.replaced would count how late the push reached the test as time
	// the server did not wait, and fail under load.)
	bindBegan := time.Now()
	mustBind(t, nu, id, "room")
	select {
	case p := <-oldReplaced:
		if string(p) != `{"actor":"`+id+`"}` {
			t.Fatalf("room.replaced %s", p)
		}
	case <-time.After(wait):
		t.Fatal("old session got no room.replaced")
	}
	if oldNode != newNode && f.Tap().Commands()[wire.CmdBoundSessionReplaced] == 0 {
		t.Error("no record 51 crossed to the old session owner")
	}
	// Pushes reach only the new session.
	if err := nu.Send(t.Context(), "room.say", map[string]int{"v": 1}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-nuSaid:
	case <-time.After(wait):
		t.Fatal("new session got no push")
	}
	// The old session is closing: its inbound application packets are rejected.
	var out echoReply
	if err := request(t, old, "room.echo", map[string]int{}, &out); err == nil {
		t.Fatal("old session still relays after replacement")
	}
	eventually(t, "old connection closed", func() bool { return old.State() != connector.StateConnected })
	if d := time.Since(bindBegan); d < 100*time.Millisecond {
		t.Fatalf("old connection closed %v after the new bind began, want >= 100 ms after the replacement callback", d)
	}
	if r := old.CloseReason(); r != swire.CloseServerDrain {
		t.Errorf("old session close reason %v", r)
	}
	select {
	case p := <-oldSaid:
		t.Fatalf("old session received a push after replacement: %s", p)
	default:
	}
}

// §7.12 / §7.18 disconnect: two Actors bound on one session each get their disconnect
// notice exactly once; the Actors are not destroyed.
func TestDisconnect_EachBoundActorNotifiedOnce(t *testing.T) {
	f := fleet.Start(t, 2, fleet.Options{})
	a := f.IDOn(t, "probe", 0, "pa-")
	b := f.IDOn(t, "probe", 1, "pb-")
	c := f.Connect(t, 0)
	mustBind(t, c, a, "probe")
	mustBind(t, c, b, "probe")
	_ = c.Close()
	for _, id := range []string{a, b} {
		eventually(t, id+" ended", func() bool { return f.Ev.Count(id, "ended") == 1 })
	}
	found := 0
	for i := 0; i < 2; i++ {
		for _, act := range f.Actors(i).Active() {
			if act.ID == a || act.ID == b {
				found++
			}
		}
	}
	if found != 2 {
		t.Fatalf("disconnect destroyed Actors: %d of 2 still active", found)
	}
	if f.Ev.Count(a, "ended") != 1 || f.Ev.Count(b, "ended") != 1 {
		t.Fatalf("ended counts %v %v", f.Ev.Of(a), f.Ev.Of(b))
	}
}

// §7.11: unbind tombstones the binding (the Actor is told once); a relay after unbind
// is session-not-bound; a reconnect needs a new bind.
func TestUnbindAndReconnectRequireNewBind(t *testing.T) {
	f := fleet.Start(t, 2, fleet.Options{})
	id := f.IDOn(t, "probe", 1, "u-")
	c := f.Connect(t, 0)
	mustBind(t, c, id, "probe")
	var empty map[string]any
	if err := request(t, c, "unbind", map[string]string{"actor": id}, &empty); err != nil {
		t.Fatal(err)
	}
	if n := f.Ev.Count(id, "ended"); n != 1 {
		t.Fatalf("ended %d times after unbind", n)
	}
	var out echoReply
	if err := request(t, c, "room.echo", map[string]int{}, &out); remoteCode(err) != "invalid_operation" {
		t.Fatalf("relay after unbind: %v", err)
	}
	c2 := f.Connect(t, 0)
	if err := request(t, c2, "room.echo", map[string]int{}, &out); remoteCode(err) != "invalid_operation" {
		t.Fatalf("new session relayed without a bind: %v", err)
	}
	_ = c.Close()
	if n := f.Ev.Count(id, "ended"); n != 1 {
		t.Fatalf("disconnect after unbind notified again: %d", n)
	}
}

// §7.18 relay/reply: a relayed request left pending fails on disconnect; the Actor's
// late reply never reaches a new session bound to the same Actor.
func TestRelay_LateReplyNeverReachesNewSession(t *testing.T) {
	f := fleet.Start(t, 2, fleet.Options{})
	id := f.IDOn(t, "probe", 1, "late-")
	c := f.Connect(t, 0)
	mustBind(t, c, id, "probe")
	done := make(chan error, 1)
	go func() {
		var out echoReply
		done <- request(t, c, "room.hold", map[string]int{}, &out)
	}()
	eventually(t, "hold relayed", func() bool { return f.Ev.Count(id, "relayed:room.hold") == 1 })
	_ = c.Close()
	if err := <-done; err == nil {
		t.Fatal("pending relayed request did not fail on close")
	}
	c2 := f.Connect(t, 0)
	mustBind(t, c2, id, "probe")
	var out echoReply
	if err := request(t, c2, "room.echo", map[string]int{}, &out); err != nil {
		t.Fatalf("new session: %v", err)
	}
}

// Binding and unbinding many sessions leaves no binding state behind on either role.
func TestManySessionsBindUnbindLeaveNoState(t *testing.T) {
	f := fleet.Start(t, 2, fleet.Options{})
	id := f.IDOn(t, "probe", 1, "many-")
	for i := 0; i < 200; i++ {
		c := f.Dial(t, 0)
		mustBind(t, c, id, "probe")
		if i%2 == 0 {
			var empty map[string]any
			if err := request(t, c, "unbind", map[string]string{"actor": id}, &empty); err != nil {
				t.Fatal(err)
			}
		}
		_ = c.Close()
	}
	eventually(t, "binding state drained", func() bool {
		st := f.Binder(0).Stats()
		return st.Sessions == 0 && st.Bindings == 0 && st.Pending == 0
	})
	// Every binding ended exactly once: by unbind, by disconnect, or by replacement
	// (the next session took the Actor over before the previous one disconnected).
	if n := f.Ev.Count(id, "bound"); n != 200 {
		t.Fatalf("%d binds seen by the Actor", n)
	}
	if n := f.Ev.Count(id, "ended"); n > 200 {
		t.Fatalf("%d ends for 200 bindings", n)
	}
}

// §7.18: a reply the Actor sends after its session was replaced never reaches the new
// session, even when the new session has the same session RID, binding generation and
// session sequence on another node (the first session of each node).
func TestRelay_LateReplyAfterReplacementNeverReachesNewSession(t *testing.T) {
	f := fleet.Start(t, 3, fleet.Options{})
	id := f.IDOn(t, "probe", 1, "lr-")
	old := f.Connect(t, 0)
	mustBind(t, old, id, "probe")
	oldDone := make(chan error, 1)
	go func() {
		var out map[string]int
		oldDone <- request(t, old, "room.hold", map[string]int{}, &out)
	}()
	eventually(t, "old request held", func() bool { return f.Ev.Count(id, "relayed:room.hold") == 1 })

	nu := f.Connect(t, 2)
	mustBind(t, nu, id, "probe")
	nuDone := make(chan map[string]int, 1)
	go func() {
		var out map[string]int
		if err := request(t, nu, "room.hold", map[string]int{}, &out); err != nil {
			t.Errorf("new session's request: %v", err)
		}
		nuDone <- out
	}()
	eventually(t, "new request held", func() bool { return f.Ev.Count(id, "relayed:room.hold") == 2 })
	fence, err := f.Actors(1).Lookup(context.Background(), "probe", id)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Actors(1).Send(context.Background(), fence, actor.Message{Name: "release"}); err != nil {
		t.Fatal(err)
	}
	select {
	case out := <-nuDone:
		if out["k"] != 1 {
			t.Fatalf("new session's request completed with %v: another session's reply", out)
		}
	case <-time.After(wait):
		t.Fatal("new session's request not answered")
	}
	if n := f.Ev.Count(id, "release-refused"); n != 1 {
		t.Fatalf("the old binding's reply was not refused (%d)", n)
	}
	if err := <-oldDone; err == nil {
		t.Fatal("old session's held request completed")
	}
}

// §7.10: the replaced session's close cleans its other bindings (their Actors are told)
// and never the replacement: the taken-over Actor stays bound to the new session.
func TestRebind_ReplacedSessionCloseCleansOnlyItsOtherBindings(t *testing.T) {
	f := fleet.Start(t, 3, fleet.Options{})
	a := f.IDOn(t, "probe", 1, "ca-")
	b := f.IDOn(t, "probe", 2, "cb-")
	old := f.Connect(t, 0)
	mustBind(t, old, a, "probe")
	mustBind(t, old, b, "probe")
	nu := f.Connect(t, 2)
	said := pushes(nu, "room.said")
	mustBind(t, nu, a, "probe")
	eventually(t, "old session closed", func() bool { return old.State() != connector.StateConnected })
	eventually(t, "b told its session ended", func() bool { return f.Ev.Count(b, "ended") == 1 })
	if n := f.Ev.Count(a, "ended"); n != 0 {
		t.Fatalf("the replaced Actor was told %d times that a binding ended", n)
	}
	if err := nu.Send(t.Context(), "room.say", map[string]int{"still": 1}, connector.WithMetadata("actor", a)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-said:
	case <-time.After(wait):
		t.Fatal("the replacement binding lost its pushes")
	}
}

// §7.10 3: the new bind completes without waiting for the previous session, even while
// that session's replaced callback is still running.
func TestRebind_NewBindDoesNotWaitForOldSession(t *testing.T) {
	release := make(chan struct{})
	f := fleet.Start(t, 2, fleet.Options{Session: func(b *binding.Binder) session.SessionType {
		sample := sampleapp.Mux(b, nil)
		return session.NewSessionType(func() *slowReplaced { return &slowReplaced{sample: sample, b: b, release: release} })
	}})
	defer close(release)
	id := f.IDOn(t, "probe", 1, "sl-")
	old := f.Connect(t, 0)
	mustBind(t, old, id, "probe")
	nu := f.Connect(t, 1)
	start := time.Now()
	mustBind(t, nu, id, "probe")
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("new bind took %v while the old session's callback blocked", d)
	}
	if old.State() != connector.StateConnected {
		t.Fatal("old session closed before its replaced callback returned")
	}
}

// slowReplaced binds like the sample app but its replaced callback blocks until
// release closes.
type slowReplaced struct {
	sample  *session.Mux
	b       *binding.Binder
	release chan struct{}
}

func (s *slowReplaced) OnPacket(ctx context.Context, pkt *session.Packet) error {
	if pkt.Name == "bind" {
		bs := s.b.Session(pkt.Peer)
		defer bs.OnReplaced(func(ctx context.Context, _ string) {
			select {
			case <-s.release:
			case <-ctx.Done():
			}
		})
	}
	return s.sample.ServePacket(ctx, pkt)
}

// §7.12: one Actor's failing disconnect notice does not stop the others.
func TestDisconnect_FailuresIsolated(t *testing.T) {
	f := fleet.Start(t, 2, fleet.Options{})
	bad := f.IDOn(t, "probe", 1, "panic-")
	good := f.IDOn(t, "probe", 1, "calm-")
	c := f.Connect(t, 0)
	mustBind(t, c, bad, "probe")
	mustBind(t, c, good, "probe")
	_ = c.Close()
	eventually(t, "both notified", func() bool { return f.Ev.Count(bad, "ended") == 1 && f.Ev.Count(good, "ended") == 1 })
	eventually(t, "session state gone", func() bool { return f.Binder(0).Stats().Sessions == 0 })
}

// §7.11: a late tombstone for a replaced binding identity never removes the newer
// binding: the new session keeps its pushes.
func TestTombstone_LateNeverRemovesNewerBinding(t *testing.T) {
	f := fleet.Start(t, 3, fleet.Options{})
	id := f.IDOn(t, "probe", 1, "lt-")
	old := f.Connect(t, 0)
	oldBind := mustBind(t, old, id, "probe")
	nu := f.Connect(t, 2)
	said := pushes(nu, "room.said")
	mustBind(t, nu, id, "probe")
	eventually(t, "old session closed", func() bool { return old.State() != connector.StateConnected })
	fence, err := f.Actors(1).Lookup(context.Background(), "probe", id)
	if err != nil {
		t.Fatal(err)
	}
	// The old session owner's tombstone for its retired binding, arriving late.
	frames, err := wire.Encode(&wire.Record{Body: &wire.BoundSessionBind{
		Correlation: 1 << 62, Actor: actor.FenceToWire(fence), SessionRID: "s1",
		Binding: wire.BindingTransition{State: wire.BindingTombstone, Generation: oldBind.BindingGeneration},
	}})
	if err != nil {
		t.Fatal(err)
	}
	from, to := f.Node(0).ID(), f.Node(1).ID()
	meshtest.SendEnvelope(f.Node(0).Mesh(), f.Node(1).Mesh().RemoteAddr(), actor.ActivationName(fence.Ref), &meshpb.Envelope{
		FromRid: from.RID, FromGeneration: from.Generation, ToRid: to.RID, ToGeneration: to.Generation, Frames: frames})
	if err := f.Actors(0).Send(context.Background(), fence, actor.Message{Name: "marker"}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "marker after the tombstone", func() bool { return f.Ev.Count(id, "marker") == 1 })
	if n := f.Ev.Count(id, "ended"); n != 0 {
		t.Fatalf("late tombstone ended the current binding (%d)", n)
	}
	if err := nu.Send(t.Context(), "room.say", map[string]int{"v": 2}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-said:
	case <-time.After(wait):
		t.Fatal("new binding lost its pushes after a late tombstone")
	}
}
