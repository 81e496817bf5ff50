package services

import (
	"context"
	"testing"
)

type lateDropState struct {
	Value State[int]
}

var lateDropToken = Define("test.late-drop", func(d *Describer, s *lateDropState) {
	DescribeState(d, "value", &s.Value)
})

// A drop of a subscription whose sink fell behind runs after the slot's lock is
// released; when the client subscribed again in between, the late drop is for the
// replaced subscription and must leave the new one alone: deleting it would leave its
// watcher in the slot for the life of the slot, fed to a sink nobody stops (found by a
// review).
func TestEndpoint_LateDropLeavesTheSubscriptionThatReplacedItsOwn(t *testing.T) {
	h, e := lateDropEndpoint(t)
	a := subAddr{svc: "test.late-drop", member: "value"}
	sink := func(*delivery) bool { return true }
	if _, err := e.subscribe(a, 1, sink); err != nil {
		t.Fatal(err)
	}
	e.mu.Lock()
	first := e.subs[a]
	e.mu.Unlock()
	if _, err := e.subscribe(a, 2, sink); err != nil { // the client subscribes again
		t.Fatal(err)
	}
	e.dropped(a, first) // the first one's drop, late
	sl, serr := h.slotFor(a)
	if serr != nil {
		t.Fatal(serr)
	}
	e.mu.Lock()
	kept := e.subs[a] != nil && e.subs[a] != first
	e.mu.Unlock()
	sl.mu.Lock()
	watchers := len(sl.watchers)
	sl.mu.Unlock()
	if !kept || watchers != 1 {
		t.Fatalf("after the late drop: the new subscription kept %v, %d watchers, want kept and 1", kept, watchers)
	}
	e.Close()
	sl.mu.Lock()
	watchers = len(sl.watchers)
	sl.mu.Unlock()
	if watchers != 0 {
		t.Fatalf("%d watchers left after the client's end", watchers)
	}
}

// The ids a client gives its subscriptions order a member's subscribes and
// unsubscribes at the provider however they were reordered on the way: a subscribe
// overtaken by a later one is refused (superseded), an unsubscribe ends only its own
// subscription or an older one; without ids (an older client's) the last one served
// stands, as before.
func TestEndpoint_SubscriptionIDsOrderAMembersSubscribes(t *testing.T) {
	h, e := lateDropEndpoint(t)
	defer e.Close()
	a := subAddr{svc: "test.late-drop", member: "value"}
	sink := func(*delivery) bool { return true }
	cur := func() uint64 {
		e.mu.Lock()
		defer e.mu.Unlock()
		if s := e.subs[a]; s != nil {
			return s.sid
		}
		return 0
	}
	held := func() int {
		e.mu.Lock()
		defer e.mu.Unlock()
		return len(e.subs)
	}
	if _, err := e.subscribe(a, 2, sink); err != nil {
		t.Fatal(err)
	}
	if _, err := e.subscribe(a, 1, sink); errorCode(err) != CodeCancelled {
		t.Fatalf("a subscribe overtaken by a later one: %v, want cancelled (superseded)", err)
	}
	e.unsubscribe(a, 1) // the overtaken one's unsubscribe, late
	if cur() != 2 {
		t.Fatalf("after a late unsubscribe of subscription 1: the member's subscription is %d, want 2", cur())
	}
	e.unsubscribe(a, 3) // unsubscribe 3 came before its subscribe: it ends 2 too
	if held() != 0 {
		t.Fatal("an unsubscribe left an older subscription")
	}
	if _, err := e.subscribe(a, 3, sink); err != nil {
		t.Fatal(err)
	}
	if _, err := e.subscribe(a, 0, sink); err != nil || cur() != 0 {
		t.Fatalf("a subscribe without an id: %v, subscription %d; want it to replace 3", err, cur())
	}
	e.unsubscribe(a, 0)
	if held() != 0 || SubscriptionsOf(h) != 0 {
		t.Fatalf("an unsubscribe without an id left %d subscriptions (%d counted)", held(), SubscriptionsOf(h))
	}
}

// lateDropEndpoint is a provider host of lateDropToken and a client's endpoint on it;
// the host closes with the test.
func lateDropEndpoint(t *testing.T) (*Host, *Endpoint) {
	ctx := context.Background()
	h, err := NewHost(ctx, HostOptions{Name: "provider"}, Facet{ID: "p", Setup: func(env *Env) {
		Provide(env, lateDropToken, &lateDropState{Value: NewState(0)})
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close(ctx) })
	return h, h.Endpoint(ctx, Client{ID: "c"})
}
