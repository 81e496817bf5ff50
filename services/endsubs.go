package services

import (
	"encoding/json"
	"fmt"
	"sync/atomic"
)

// The serving side of subscriptions: each client connection (an Endpoint) subscribes
// to a host's published members by their address; every delivery of the member's slot
// reaches the client's sink (its STREAM session, its loopback connection) without the
// provider waiting. A client whose sink cannot take a delivery (its socket is behind)
// has that subscription dropped with a flow_control notice; the provider and the other
// subscribers go on. A session worker's endpoints do not each watch: they share the
// worker's publisher, which watches each member once for all of them.

// MaxSubscriptionsPerClient bounds the subscriptions of one client connection (state,
// events and instance directories); past it a subscribe fails with CodeUnavailable.
const MaxSubscriptionsPerClient = 1024

// subscriptionsPerClient is the bound in force (tests lower it).
var subscriptionsPerClient = MaxSubscriptionsPerClient

// slotFor returns the slot a subscription of a names, or why there is none.
func (h *Host) slotFor(a subAddr) (*slot, *Error) {
	h.mu.Lock()
	svc := h.services[a.svc]
	running := h.phase == phaseRunning
	h.mu.Unlock()
	switch {
	case !running:
		return nil, &Error{Code: CodeUnavailable, Message: "the host is not serving"}
	case svc == nil || !svc.rpc:
		return nil, &Error{Code: CodeUnknownService, Message: fmt.Sprintf("no service %q", a.svc)}
	}
	return svc.slotFor(a)
}

// slotFor returns the slot of a in this service.
func (s *service) slotFor(a subAddr) (*slot, *Error) {
	if s.mode == Singleton {
		if a.key != "" || a.member == MemberInstances {
			return nil, &Error{Code: CodeInvalidArguments, Message: fmt.Sprintf("service %q is not keyed", s.id)}
		}
		if sl := s.slot(a.member); sl != nil {
			return sl, nil
		}
		return nil, s.noMember(a.member)
	}
	if a.member == MemberInstances && a.key == "" {
		return s.directory(), nil
	}
	if a.key == "" {
		return nil, &Error{Code: CodeInvalidArguments, Message: fmt.Sprintf("service %q is keyed: name the instance (key and generation)", s.id)}
	}
	inst, err := s.instanceAt(a.key, a.gen)
	if err != nil {
		return nil, err
	}
	if sl := inst.slots[a.member]; sl != nil {
		return sl, nil
	}
	return nil, s.noMember(a.member)
}

func (s *service) noMember(name string) *Error {
	return &Error{Code: CodeUnknownMember, Message: fmt.Sprintf("service %q has no state or events member %q", s.id, name)}
}

// subscribe subscribes the client to a; sink gets every later delivery. It returns
// the snapshot the subscription starts from (JSON snapshotReply). sid is the id the
// client gave this subscription (0: none, an older client's): ids of one member grow,
// so a subscribe that comes after a later one of the same member (the two were
// reordered on the way) is refused as superseded rather than replace it.
func (e *Endpoint) subscribe(a subAddr, sid uint64, sink func(*delivery) bool) (json.RawMessage, error) {
	var (
		sl   *slot
		serr *Error
	)
	if a.ref != "" {
		var o *refObject
		if o, serr = e.ref(a.ref); serr == nil {
			if sl = o.slots[a.member]; sl == nil {
				serr = &Error{Code: CodeUnknownMember, Message: fmt.Sprintf("the reference has no state or events member %q", a.member)}
			}
		}
	} else {
		sl, serr = e.h.slotFor(a)
	}
	if serr != nil {
		return nil, serr
	}
	e.mu.Lock()
	switch {
	case e.closed:
		e.mu.Unlock()
		return nil, &Error{Code: CodeDisconnected, Message: "the connection is closed"}
	case e.subs[a] == nil && len(e.subs) >= subscriptionsPerClient:
		e.mu.Unlock()
		return nil, &Error{Code: CodeUnavailable, Message: fmt.Sprintf("subscription to %s: this connection holds %d subscriptions (the bound)", a, subscriptionsPerClient)}
	}
	prev := e.subs[a]
	if prev.newerThan(sid) {
		e.mu.Unlock()
		return nil, superseded(a)
	}
	delete(e.subs, a)
	e.mu.Unlock()
	if prev != nil {
		prev.stop() // a subscribe again starts from a fresh snapshot
		e.h.stats.subscriptions.Add(-1)
	}
	// ent is this subscription: a drop that comes late (its sink fell behind, the
	// drop ran after a subscribe again replaced it) ends only the subscription it was
	// for, never the one that replaced it.
	ent := &endSub{sid: sid}
	var (
		snap snapshotReply
		stop func()
		err  *Error
	)
	if e.shared != nil {
		snap, stop, err = e.shared.add(sl, a)
	} else {
		if h := refuseHook.Load(); h != nil {
			deliver, refuse := sink, *h
			sink = func(d *delivery) bool { return !refuse(a) && deliver(d) }
		}
		stop, err = sl.watchFrom(func(seq uint64, raw json.RawMessage, _ any) {
			snap = snapshotReply{Seq: seq, Value: raw}
		}, sink, func() { e.dropped(a, ent) })
	}
	if err != nil {
		return nil, err
	}
	if sl.kind == kindEvents {
		snap.Value = nil
	}
	e.mu.Lock()
	switch {
	case e.closed:
		e.mu.Unlock()
		stop()
		return nil, &Error{Code: CodeDisconnected, Message: "the connection is closed"}
	case e.subs[a] == nil && len(e.subs) >= subscriptionsPerClient:
		// Another subscribe of the client's took the last place meanwhile.
		e.mu.Unlock()
		stop()
		return nil, &Error{Code: CodeUnavailable, Message: fmt.Sprintf("subscription to %s: this connection holds %d subscriptions (the bound)", a, subscriptionsPerClient)}
	case e.subs[a].newerThan(sid):
		// A later subscribe of the same member was served meanwhile.
		e.mu.Unlock()
		stop()
		return nil, superseded(a)
	}
	old := e.subs[a] // a subscribe of the same member at once: the later one stands
	ent.stop = stop
	e.subs[a] = ent
	e.mu.Unlock()
	if old != nil {
		old.stop()
	} else {
		e.h.stats.subscriptions.Add(1)
	}
	raw, _ := json.Marshal(snap)
	return raw, nil
}

// unsubscribe ends the client's subscription to a (nothing when it has none). With a
// sid (not 0) it ends only a subscription of that id or an older one: an unsubscribe
// that comes after a later subscribe of the same member (the two were reordered on the
// way) leaves the later subscription alone.
func (e *Endpoint) unsubscribe(a subAddr, sid uint64) {
	e.mu.Lock()
	cur := e.subs[a]
	if cur.newerThan(sid) {
		cur = nil
	} else {
		delete(e.subs, a)
	}
	e.mu.Unlock()
	if cur != nil {
		cur.stop()
		e.h.stats.subscriptions.Add(-1)
	}
	if h := unsubscribeHook.Load(); h != nil {
		(*h)(a)
	}
}

// refuseHook, when a test sets it before a server-scope subscribe, is asked before
// each delivery to that subscription: true refuses it, as a subscriber that fell
// behind (its socket's queue full) would.
var refuseHook atomic.Pointer[func(subAddr) bool]

// unsubscribeHook, when a test sets it, is told of each unsubscribe an endpoint has
// handled (whether it ended a subscription or not).
var unsubscribeHook atomic.Pointer[func(subAddr)]

// endSub is one subscription of an endpoint's client: the id the client gave it (0:
// none) and how it ends.
type endSub struct {
	sid  uint64
	stop func()
}

// newerThan reports whether s (nil: none) is a later subscription than the client's
// subscription or unsubscribe sid: both have ids and s's is greater.
func (s *endSub) newerThan(sid uint64) bool {
	return s != nil && sid != 0 && s.sid > sid
}

// superseded is the answer to a subscribe that a later one of the same member overtook.
func superseded(a subAddr) *Error {
	return &Error{Code: CodeCancelled, Message: fmt.Sprintf("subscription to %s: superseded by a later subscribe of the same member", a)}
}

// dropped ends a subscription whose sink fell behind, and tells the client.
func (e *Endpoint) dropped(a subAddr, ent *endSub) {
	e.mu.Lock()
	cur := e.subs[a]
	had := cur != nil && cur == ent
	if had {
		delete(e.subs, a)
	}
	e.mu.Unlock()
	if !had {
		return
	}
	e.h.stats.subscriptions.Add(-1)
	e.h.stats.dropped(a, e.client.ID)
	if e.notify != nil {
		d := &delivery{op: opClosed, err: &Error{Code: CodeFlowControl, Message: "the subscriber fell behind and was dropped; subscribe again"}, sid: ent.sid}
		_ = e.notify(d.toFrame(a, "", 0))
	}
}

// closeSubs ends every subscription of the client (its connection closed).
func (e *Endpoint) closeSubs() {
	e.mu.Lock()
	subs := e.subs
	e.subs = map[subAddr]*endSub{}
	e.mu.Unlock()
	for _, s := range subs {
		s.stop()
		e.h.stats.subscriptions.Add(-1)
	}
}
