package services

import (
	"encoding/json"
	"sync"

	"github.com/meshnode/meshnode/session"
	"github.com/meshnode/meshnode/session/wire"
)

// A slot is where a provided state or event member of a service (or of one keyed
// instance, or a keyed service's instance directory) is published: its watchers (the
// local replicas of the same host, each remote subscription of an endpoint, a session
// worker's publisher) get its deliveries in order. A slot outlives the
// implementation: a provider's reload installs the replacement's value into the same
// slot (a complete replacement, readiness cleared), so subscriptions stay where they
// are. Its sequence counts every delivery since the service started (carried across a
// worker's moves): a watcher that sees a gap has missed one.

// deliveryOp says what a delivery is.
type deliveryOp uint8

const (
	opUpdate  deliveryOp = iota + 1 // a new value of a state
	opReplace                       // a complete replacement of a state (reload, a move)
	opEvent                         // an event
	opClosed                        // the slot closed (instance closed, service gone): no more
)

// delivery is one publication of a slot, shared by its watchers (read-only).
type delivery struct {
	op    deliveryOp
	seq   uint64
	raw   json.RawMessage   // the value as JSON
	val   any               // the same value as the provider's Go value (borrowed)
	trace map[string]string // the W3C trace context of the Set or Emit (nil: none)
	err   *Error            // opClosed: why
	// sid, on a flow-control notice of one subscription (not the slot's publication),
	// is the id its client gave it: the client ignores a notice of an earlier one.
	sid uint64

	// The STREAM frame of a server-scope subscription, encoded once for every
	// subscriber of the slot (the metadata is the same for all of them).
	frameOnce sync.Once
	frame     session.Frame
	frameErr  error
}

// watcher takes a delivery without blocking; false means it could not (it is behind):
// the slot drops it, and whoever registered it closes that subscription (the behind
// callback of watch).
type watcher func(d *delivery) bool

// slot is one published member.
type slot struct {
	kind memberKind
	addr subAddr

	mu       sync.Mutex
	seq      uint64
	raw      json.RawMessage // state and directory: the current value
	val      any
	closed   *Error
	watchers map[*watcherReg]struct{}
}

type watcherReg struct {
	w    watcher
	drop func() // called (outside the slot's lock) when w fell behind
}

func newSlot(kind memberKind, addr subAddr, raw json.RawMessage, val any) *slot {
	return &slot{kind: kind, addr: addr, raw: raw, val: val, watchers: map[*watcherReg]struct{}{}}
}

// watchFrom registers w: initial (when set) gets the slot's current sequence and value
// under the slot's lock, atomically with the registration, so that w gets every later
// delivery and none before. A closed slot registers nothing and returns its error.
// behind runs, once and outside the lock, if w fails to take a delivery; w is removed
// then.
func (s *slot) watchFrom(initial func(seq uint64, raw json.RawMessage, val any), w watcher, behind func()) (stop func(), err *Error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed != nil {
		return func() {}, s.closed
	}
	if initial != nil {
		initial(s.seq, s.raw, s.val)
	}
	r := &watcherReg{w: w, drop: behind}
	s.watchers[r] = struct{}{}
	return func() {
		s.mu.Lock()
		delete(s.watchers, r)
		s.mu.Unlock()
	}, nil
}

// snapshot returns the current value and sequence.
func (s *slot) snapshot() (uint64, json.RawMessage, any, *Error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seq, s.raw, s.val, s.closed
}

// publish hands d (its seq set here) to every watcher, in order with every other
// publication of the slot. For a state (update, replace) it is the new value.
func (s *slot) publish(d *delivery) {
	s.mu.Lock()
	if s.closed != nil {
		s.mu.Unlock()
		return
	}
	s.seq++
	d.seq = s.seq
	switch d.op {
	case opUpdate, opReplace:
		s.raw, s.val = d.raw, d.val
	case opClosed:
		s.closed = d.err
	}
	var behind []*watcherReg
	for r := range s.watchers {
		if !r.w(d) {
			delete(s.watchers, r)
			behind = append(behind, r)
		}
	}
	if d.op == opClosed {
		clear(s.watchers)
	}
	s.mu.Unlock()
	for _, r := range behind {
		if r.drop != nil {
			r.drop()
		}
	}
}

// close publishes the slot's end: its watchers are told why and dropped.
func (s *slot) close(why *Error) { s.publish(&delivery{op: opClosed, err: why}) }

// streamFrame returns d as a server-scope STREAM Send for a slot at addr, encoded once.
func (d *delivery) streamFrame(addr subAddr) (session.Frame, error) {
	if addr.ref != "" {
		// A reference's member: each holder has its own handle.
		f := d.toFrame(addr, "", 0)
		return session.EncodeSend(f.name, wire.CodecJSON, f.payload, f.md)
	}
	d.frameOnce.Do(func() {
		f := d.toFrame(addr, "", 0)
		d.frame, d.frameErr = session.EncodeSend(f.name, wire.CodecJSON, f.payload, f.md)
	})
	return d.frame, d.frameErr
}
