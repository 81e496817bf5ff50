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
	ctx := context.Background()
	h, err := NewHost(ctx, HostOptions{Name: "provider"}, Facet{ID: "p", Setup: func(env *Env) {
		Provide(env, lateDropToken, &lateDropState{Value: NewState(0)})
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = h.Close(ctx) }()
	e := h.Endpoint(ctx, Client{ID: "c"})
	a := subAddr{svc: "test.late-drop", member: "value"}
	sink := func(*delivery) bool { return true }
	if _, err := e.subscribe(a, sink); err != nil {
		t.Fatal(err)
	}
	e.mu.Lock()
	first := e.subs[a]
	e.mu.Unlock()
	if _, err := e.subscribe(a, sink); err != nil { // the client subscribes again
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
