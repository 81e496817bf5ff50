package binding_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/meshnode/meshnode/actor"
	"github.com/meshnode/meshnode/binding"
	"github.com/meshnode/meshnode/examples/sampleapp"
	"github.com/meshnode/meshnode/fault"
	"github.com/meshnode/meshnode/session"
	"github.com/meshnode/meshnode/session/wire"
	"github.com/meshnode/meshnode/test/fleet"
)

// apiSession is the sample session plus test packets that drive the binding API
// directly.
type apiSession struct {
	sample *session.Mux
	b      *binding.Binder
}

func (s *apiSession) OnPacket(ctx context.Context, pkt *session.Packet) error {
	var arg struct {
		Actor string `json:"actor"`
		Kind  string `json:"kind"`
	}
	switch pkt.Name {
	case "test.bindwrong", "test.bindstale", "test.notify", "test.notifyclose":
		if err := pkt.Decode(&arg); err != nil {
			return pkt.ReplyError(fault.InvalidOperation.Code(), err.Error())
		}
	default:
		return s.sample.ServePacket(ctx, pkt)
	}
	bs := s.b.Session(pkt.Peer)
	switch pkt.Name {
	case "test.bindwrong":
		fence, err := s.b.Actors().Lookup(ctx, arg.Kind, arg.Actor)
		if err != nil {
			return pkt.ReplyError(fault.NotFound.Code(), err.Error())
		}
		fence.ObjectGeneration++
		_, err = bs.Bind(ctx, fence)
		if errors.Is(err, fault.InvalidOperation) {
			return pkt.ReplyError(fault.InvalidOperation.Code(), err.Error())
		}
		return pkt.ReplyError(fault.InternalFailure.Code(), "unexpected: "+errString(err))
	case "test.bindstale":
		fence, err := s.b.Actors().Lookup(ctx, arg.Kind, arg.Actor)
		if err != nil {
			return pkt.ReplyError(fault.NotFound.Code(), err.Error())
		}
		fence.AuthorityOwnerGeneration--
		_, err = bs.Bind(ctx, fence)
		if errors.Is(err, fault.Unavailable) {
			return pkt.ReplyError(fault.Unavailable.Code(), err.Error())
		}
		return pkt.ReplyError(fault.InternalFailure.Code(), "unexpected: "+errString(err))
	case "test.notify":
		if err := bs.NotifyDisconnected(ctx, arg.Actor); err != nil {
			return pkt.ReplyError(fault.InvalidOperation.Code(), err.Error())
		}
		return pkt.Reply(wire.CodecJSON, []byte(`{}`))
	case "test.notifyclose":
		// NotifyDisconnected racing the physical close of the same session.
		go func() { _ = bs.NotifyDisconnected(context.Background(), arg.Actor) }()
		return pkt.Peer.Close(wire.CloseServerDrain, "test")
	}
	return nil
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

func startAPI(t *testing.T, n int) *fleet.Fleet {
	return fleet.Start(t, n, fleet.Options{Session: func(b *binding.Binder) session.SessionType {
		sample := sampleapp.Mux(b, nil)
		return session.NewSessionType(func() *apiSession { return &apiSession{sample: sample, b: b} })
	}})
}

// §7.18: a bind that names another ObjectGeneration than the Actor's is InvalidOperation.
func TestBind_OtherObjectGenerationIsInvalidOperation(t *testing.T) {
	f := startAPI(t, 2)
	id := f.IDOn(t, "probe", 1, "g-")
	c := f.Connect(t, 0)
	var out map[string]any
	err := request(t, c, "test.bindwrong", map[string]string{"actor": id, "kind": "probe"}, &out)
	if remoteCode(err) != "invalid_operation" {
		t.Fatalf("bind with another ObjectGeneration: %v", err)
	}
	if n := f.Ev.Count(id, "bound"); n != 0 {
		t.Fatalf("the Actor registered %d bindings", n)
	}
}

// §7.12: NotifyDisconnected racing the physical disconnect notifies the Actor at most
// once; a plain NotifyDisconnected keeps the connection.
func TestDisconnect_NotifyDisconnectedRaceAtMostOnce(t *testing.T) {
	f := startAPI(t, 2)
	a := f.IDOn(t, "probe", 1, "na-")
	b := f.IDOn(t, "probe", 1, "nb-")
	c := f.Connect(t, 0)
	mustBind(t, c, a, "probe")
	mustBind(t, c, b, "probe")
	var out map[string]any
	if err := request(t, c, "test.notify", map[string]string{"actor": a}, &out); err != nil {
		t.Fatal(err)
	}
	if n := f.Ev.Count(a, "ended"); n != 1 {
		t.Fatalf("notify: ended %d times", n)
	}
	if err := request(t, c, "echo", map[string]int{"still": 1}, &out); err != nil {
		t.Fatalf("connection not kept after NotifyDisconnected: %v", err)
	}
	_ = request(t, c, "test.notifyclose", map[string]string{"actor": b}, &out)
	eventually(t, "b ended", func() bool { return f.Ev.Count(b, "ended") >= 1 })
	// Once the session is gone every tombstone has been sent; a marker sent after them
	// from the same node reaches the Actor after them, so a second notice would be in
	// by the time the marker is.
	eventually(t, "session state gone", func() bool { return f.Binder(0).Stats().Sessions == 0 })
	fence, err := f.Actors(0).Lookup(context.Background(), "probe", b)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Actors(0).Send(context.Background(), fence, actor.Message{Name: "marker"}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "marker", func() bool { return f.Ev.Count(b, "marker") == 1 })
	if n := f.Ev.Count(b, "ended"); n != 1 {
		t.Fatalf("race: ended %d times", n)
	}
	if n := f.Ev.Count(a, "ended"); n != 1 {
		t.Fatalf("disconnect re-notified an already notified Actor: %d", n)
	}
}

// §7.7: an Actor push without a binding is session-not-bound; after a bind it works.
func TestPush_ActorWithoutBindingIsNotBound(t *testing.T) {
	f := startAPI(t, 2)
	id := f.IDOn(t, "probe", 1, "pu-")
	fence, err := f.Actors(0).Lookup(context.Background(), "probe", id)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Actors(0).Send(context.Background(), fence, actor.Message{Name: "try-push"}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "push attempted", func() bool { return f.Ev.Count(id, "push-error") == 1 })
	c := f.Connect(t, 0)
	said := pushes(c, "room.said")
	mustBind(t, c, id, "probe")
	if err := f.Actors(0).Send(context.Background(), fence, actor.Message{Name: "try-push"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-said:
	case <-time.After(wait):
		t.Fatal("push after bind not delivered")
	}
}

// §7.18: a relayed request that timed out on the client is never resent: the Actor
// saw it once.
func TestRelay_NoResendAfterTimeout(t *testing.T) {
	f := startAPI(t, 2)
	id := f.IDOn(t, "probe", 1, "to-")
	c := f.Connect(t, 0)
	mustBind(t, c, id, "probe")
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	var out map[string]any
	err := c.Request(ctx, "room.hold", map[string]int{}, &out)
	cancel()
	if err == nil {
		t.Fatal("held request completed")
	}
	if err := request(t, c, "room.echo", map[string]int{}, &out); err != nil {
		t.Fatal(err)
	}
	if n := f.Ev.Count(id, "relayed:room.hold"); n != 1 {
		t.Fatalf("held request relayed %d times", n)
	}
}

// A bound Actor that stops ends its binding: the session is told, drops it, and can
// bind the next activation.
func TestBinding_EndsWhenTheActorStops(t *testing.T) {
	f := startAPI(t, 2)
	id := f.IDOn(t, "probe", 1, "gone-")
	c := f.Connect(t, 0)
	mustBind(t, c, id, "probe")
	f.Actors(1).Deactivate(id)
	eventually(t, "deactivated", func() bool {
		for _, a := range f.Actors(1).Active() {
			if a.ID == id {
				return false
			}
		}
		return true
	})
	// The stopping Actor told the session its binding ended: the session is no longer
	// bound (a relay fails unavailable, saying the binding ended with the Actor: the
	// session did not ask for it, and binding again helps) and can bind the Actor's
	// next activation.
	eventually(t, "binding dropped", func() bool { return f.Binder(0).Stats().Bindings == 0 })
	var out map[string]any
	err := request(t, c, "room.echo", map[string]int{}, &out)
	if want := "binding: the session's binding of " + id + " ended: the Actor stopped; bind it again"; remoteCode(err) != "unavailable" || remoteMessage(err) != want {
		t.Fatalf("relay after the bound Actor stopped: %v, want unavailable %q", err, want)
	}
	mustBind(t, c, id, "probe")
	if err := request(t, c, "room.echo", map[string]int{}, &out); err != nil {
		t.Fatalf("after rebinding the new activation: %v", err)
	}
}

// §7.16: a bind with a stale authority fence is Unavailable, with no fallback to another
// target and no binding registered.
func TestBind_StaleAuthorityFenceIsUnavailable(t *testing.T) {
	f := startAPI(t, 2)
	id := f.IDOn(t, "probe", 1, "st-")
	c := f.Connect(t, 0)
	var out map[string]any
	err := request(t, c, "test.bindstale", map[string]string{"actor": id, "kind": "probe"}, &out)
	if remoteCode(err) != "unavailable" {
		t.Fatalf("bind with a stale authority fence: %v", err)
	}
	if n := f.Ev.Count(id, "bound"); n != 0 {
		t.Fatalf("the Actor registered %d bindings", n)
	}
	if st := f.Binder(0).Stats(); st.Bindings != 0 || st.Pending != 0 {
		t.Fatalf("binding state after a refused bind: %+v", st)
	}
}
