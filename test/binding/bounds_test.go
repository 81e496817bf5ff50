package binding_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/meshnode/meshnode"

	"github.com/meshnode/meshnode/actor"
	"github.com/meshnode/meshnode/binding"
	"github.com/meshnode/meshnode/fault"
	"github.com/meshnode/meshnode/mesh/meshtest"
	"github.com/meshnode/meshnode/test/fleet"
)

// Backpressure across the relay, idle Actor collection, and node failure: one client
// must never hurt the others, and nothing waits forever.

// A session's relayed Requests awaiting replies are bounded: at MaxRelayedRequests the
// session stops pulling packets, and once replies come back every Request is answered.
func TestBounds_RelayedRequestsStopPulling(t *testing.T) {
	const max, pending = 8, 2
	f := fleet.Start(t, 2, fleet.Options{
		Binding: binding.Options{MaxRelayedRequests: max},
		Config:  func(cfg *meshnode.Config) { cfg.Socket.MaxPendingPackets = pending },
	})
	id := f.IDOn(t, "probe", 1, "held-")
	c := f.Connect(t, 0)
	mustBind(t, c, id, "probe")
	const n = 60
	results := make(chan error, n)
	for range n {
		go func() {
			var out map[string]int
			results <- request(t, c, "room.hold", map[string]int{}, &out)
		}()
	}
	eventually(t, "the bound reached", func() bool { return f.Binder(0).Stats().RelayedRequests >= max })
	// Held there: at most the bound plus the packets already pulled when it was hit.
	deadline := time.Now().Add(300 * time.Millisecond)
	for time.Now().Before(deadline) {
		if got := f.Binder(0).Stats().RelayedRequests; got > max+pending+1 {
			t.Fatalf("%d relayed requests waiting, bound %d", got, max)
		}
		time.Sleep(10 * time.Millisecond)
	}
	fence, err := f.Actors(0).Lookup(context.Background(), "probe", id)
	if err != nil {
		t.Fatal(err)
	}
	// The Actor answers what it holds on each release; the session then pulls more.
	answered := 0
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	timeout := time.After(wait)
	for answered < n {
		select {
		case err := <-results:
			if err != nil {
				t.Fatalf("request %d: %v", answered, err)
			}
			answered++
		case <-tick.C:
			if err := f.Actors(0).Send(context.Background(), fence, actor.Message{Name: "release"}); err != nil {
				t.Fatal(err)
			}
		case <-timeout:
			t.Fatalf("%d of %d requests answered", answered, n)
		}
	}
}

// A client that relays Sends faster than its Actor takes them is slowed down at the
// session's relay window instead of overflowing the Actor's mailbox: nothing is
// refused, nothing lost.
func TestBounds_RelayWindowSlowsTheClientInsteadOfDropping(t *testing.T) {
	const window, mailbox, sends = 32, 64, 2000
	f := fleet.Start(t, 2, fleet.Options{
		Binding: binding.Options{RelayWindow: window},
		Config:  func(cfg *meshnode.Config) { cfg.MaxMailbox = mailbox },
	})
	id := f.IDOn(t, "probe", 1, "slow-")
	c := f.Connect(t, 0)
	mustBind(t, c, id, "probe")
	f.Ev.Hold()
	ctx, cancel := context.WithTimeout(context.Background(), 3*wait)
	defer cancel()
	if err := c.Send(ctx, "room.sleep", map[string]int{}); err != nil {
		t.Fatal(err)
	}
	sent := make(chan error, 1)
	go func() {
		for i := range sends {
			if err := c.Send(ctx, "room.tick", map[string]int{"i": i}); err != nil {
				sent <- err
				return
			}
		}
		sent <- nil
	}()
	// The Actor sleeps; the session stops at its window, the mailbox never fills.
	eventually(t, "session at its relay window", func() bool { return f.Binder(0).Stats().Relayed >= window })
	time.Sleep(100 * time.Millisecond) // a window in which more relays would show
	if st := f.Binder(0).Stats(); st.Relayed > window+16 {
		t.Fatalf("%d relays unconsumed, window %d", st.Relayed, window)
	}
	f.Ev.Wake()
	eventually(t, "every tick consumed", func() bool { return f.Ev.Ticks() == sends })
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	if r := f.Actors(1).Stats().MailboxRejected; r != 0 {
		t.Errorf("the Actor's mailbox refused %d messages", r)
	}
}

// A relayed Request without a reply fails with deadline_exceeded after RelayTimeout;
// its late reply is dropped.
func TestBounds_RelayTimeout(t *testing.T) {
	const timeout = 300 * time.Millisecond
	f := fleet.Start(t, 2, fleet.Options{Binding: binding.Options{RelayTimeout: timeout}})
	id := f.IDOn(t, "probe", 1, "late-")
	c := f.Connect(t, 0)
	mustBind(t, c, id, "probe")
	start := time.Now()
	var out map[string]int
	err := request(t, c, "room.hold", map[string]int{}, &out)
	if remoteCode(err) != fault.DeadlineExceeded.Code() {
		t.Fatalf("held request: %v, want deadline_exceeded", err)
	}
	if d := time.Since(start); d < timeout || d > timeout+3*time.Second {
		t.Errorf("failed after %v, relay timeout %v", d, timeout)
	}
	if n := f.Binder(0).Stats().RelayTimeouts; n != 1 {
		t.Errorf("RelayTimeouts = %d", n)
	}
	_, _, _, lateBefore := f.Binder(0).Drops()
	fence, _ := f.Actors(0).Lookup(context.Background(), "probe", id)
	if err := f.Actors(0).Send(context.Background(), fence, actor.Message{Name: "release"}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the late reply dropped", func() bool {
		_, _, _, late := f.Binder(0).Drops()
		return late == lateBefore+1
	})
}

// When membership declares a node failed, every relayed Request and pending bind that
// waits on it fails with unavailable at once, long before the relay timeout.
func TestNodeFailure_FailsWaitingWorkAtOnce(t *testing.T) {
	f := fleet.Start(t, 3, fleet.Options{Binding: binding.Options{RelayTimeout: time.Minute}})
	held := f.IDOn(t, "probe", 2, "held-")
	sleeper := f.IDOn(t, "probe", 2, "sleeper-")
	c := f.Connect(t, 0)
	mustBind(t, c, held, "probe")
	const n = 10
	results := make(chan error, n)
	for range n {
		go func() {
			var out map[string]int
			results <- request(t, c, "room.hold", map[string]int{}, &out)
		}()
	}
	eventually(t, "requests relayed", func() bool { return f.Ev.Count(held, "relayed:room.hold") == n })

	// A bind that waits behind a sleeping turn of its Actor.
	s := f.Connect(t, 0)
	mustBind(t, s, sleeper, "probe")
	f.Ev.Hold()
	if err := s.Send(context.Background(), "room.sleep", map[string]int{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "sleeper asleep", func() bool { return f.Ev.Count(sleeper, "relayed:room.sleep") == 1 })
	other := f.Connect(t, 0)
	bindErr := make(chan error, 1)
	go func() { _, err := bind(t, other, sleeper, "probe"); bindErr <- err }()
	eventually(t, "bind pending", func() bool { return f.Binder(0).Stats().Pending == 1 })

	start := time.Now()
	meshtest.Kill(f.Node(2)) // abrupt: its Actors never answer
	for i := range n {
		select {
		case err := <-results:
			if remoteCode(err) != fault.Unavailable.Code() {
				t.Fatalf("request %d: %v, want unavailable", i, err)
			}
		case <-time.After(wait):
			t.Fatalf("%d of %d requests still waiting %v after the node was killed", n-i, n, time.Since(start))
		}
	}
	select {
	case err := <-bindErr:
		if remoteCode(err) != fault.Unavailable.Code() {
			t.Fatalf("pending bind: %v, want unavailable", err)
		}
	case <-time.After(wait):
		t.Fatal("the pending bind still waits")
	}
	t.Logf("waiting work failed %v after the kill", time.Since(start))
	if st := f.Binder(0).Stats(); st.PeerFailures < n+1 || st.RelayedRequests != 0 || st.Pending != 0 {
		t.Errorf("stats after the failure: %+v", st)
	}
}

// --max-bindings-per-session: a bind past the bound is refused with capacity_exceeded.
func TestBounds_MaxBindingsPerSession(t *testing.T) {
	f := fleet.Start(t, 1, fleet.Options{Binding: binding.Options{MaxBindingsPerSession: 3}})
	c := f.Connect(t, 0)
	for i := range 3 {
		mustBind(t, c, fmt.Sprintf("r%d", i), "probe")
	}
	if _, err := bind(t, c, "r3", "probe"); remoteCode(err) != fault.CapacityExceeded.Code() {
		t.Fatalf("fourth bind: %v, want capacity_exceeded", err)
	}
	if err := request(t, c, "unbind", map[string]string{"actor": "r0"}, nil); err != nil {
		t.Fatal(err)
	}
	mustBind(t, c, "r3", "probe")
	// Another session has its own bound.
	mustBind(t, f.Connect(t, 0), "r4", "probe")
}

// An activation with no binding and no message for the idle timeout is deactivated
// through the normal stop path; a bound one is kept however long it is silent; a
// collected Actor comes back, as a new activation, on the next bind.
func TestIdleCollection_UnboundSilentActorsAreDeactivated(t *testing.T) {
	const idle = 200 * time.Millisecond
	f := fleet.Start(t, 1, fleet.Options{Config: func(cfg *meshnode.Config) { cfg.ActorIdleTimeout = idle }})
	c := f.Connect(t, 0)
	first := mustBind(t, c, "kept", "probe")
	mustBind(t, c, "dropped", "probe")
	if err := request(t, c, "unbind", map[string]string{"actor": "dropped"}, nil); err != nil {
		t.Fatal(err)
	}
	active := func(id string) bool {
		for _, a := range f.Actors(0).Active() {
			if a.ID == id {
				return true
			}
		}
		return false
	}
	eventually(t, "unbound Actor collected", func() bool { return !active("dropped") })
	if !active("kept") {
		t.Fatal("a bound Actor was collected")
	}
	if f.Actors(0).Stats().Collected != 1 {
		t.Errorf("Collected = %d", f.Actors(0).Stats().Collected)
	}
	// Silent but bound for many idle periods: kept.
	time.Sleep(5 * idle)
	if !active("kept") {
		t.Fatal("a bound Actor was collected while silent")
	}
	if n := f.Ev.Count("kept", "ended"); n != 0 {
		t.Fatalf("the bound Actor saw its binding end")
	}
	// Unbound, it goes too; bound again, it is a new activation.
	if err := request(t, c, "unbind", map[string]string{"actor": "kept"}, nil); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the formerly bound Actor collected", func() bool { return !active("kept") })
	again := mustBind(t, c, "kept", "probe")
	if again.BindingGeneration == first.BindingGeneration {
		t.Errorf("rebinding reused binding generation %d", again.BindingGeneration)
	}
}

// A bind waits at most its context (DefaultBindTimeout when it has no deadline): one
// whose Actor side does not answer in time fails deadline_exceeded, is counted, and
// leaves nothing pending.
func TestBounds_BindTimeout(t *testing.T) {
	f := fleet.Start(t, 2, fleet.Options{})
	sleeper := f.IDOn(t, "probe", 1, "sleeper-")
	c := f.Connect(t, 0)
	mustBind(t, c, sleeper, "probe")
	holdTurn(t, f, c, sleeper)
	t.Cleanup(f.Ev.Wake)
	other := f.Connect(t, 0)
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), binding.DefaultBindTimeout+wait)
	defer cancel()
	err := other.Request(ctx, "bind", map[string]string{"actor": sleeper, "kind": "probe"}, nil)
	if remoteCode(err) != fault.DeadlineExceeded.Code() {
		t.Fatalf("a bind behind a turn that never ends: %v, want deadline_exceeded", err)
	}
	if d := time.Since(start); d < binding.DefaultBindTimeout || d > binding.DefaultBindTimeout+3*time.Second {
		t.Errorf("failed after %v, bind timeout %v", d, binding.DefaultBindTimeout)
	}
	if st := f.Binder(0).Stats(); st.BindTimeouts != 1 || st.Pending != 0 {
		t.Errorf("after the timeout: %+v, want 1 bind timeout and nothing pending", st)
	}
}
