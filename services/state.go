package services

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// State is a replicated state member as its consumers see it: the latest value of a
// single writer (the provider), read synchronously once hydrated, and told to
// listeners in order. A consumer never writes it: it calls the provider's methods.
//
// Value returns the current value and true once the replica is hydrated; before (a
// cold replica: during setup, before its provider is bound, right after a switch to
// another provider) it returns false, and nothing about it is on the wire. Values are
// borrowed and immutable: neither the provider nor a reader may change one, and no copy
// is made.
//
// Subscribe registers fn: on a hydrated replica fn gets the current value at once, then
// every later value; on a cold one, fn is recorded and gets the value the replica
// hydrates with, then every later one. fn runs on the replica's delivery goroutine, one
// call at a time in order, never under a lock of the package: it may call methods,
// read other states, or unsubscribe. Its context says which delivery it is
// (DeliveryOf) and carries the trace of the write that produced the value, never the
// context of whoever subscribed.
type State[T any] interface {
	Value() (T, bool)
	Subscribe(fn func(ctx context.Context, v T)) (unsubscribe func())
	Status() StateStatus
}

// StateStatus describes a replica: whether it holds a value, whether that value is
// stale (kept as display data while its provider cannot be reached: a disconnect, a
// worker being replaced), and the provider's sequence of that value.
type StateStatus struct {
	Hydrated bool
	Stale    bool
	Seq      uint64
}

// Events is a remote events member as its consumers see it: a projection of events
// that happen at the provider, delivered in order to listeners in the consuming
// process only, never durable and never replayed (a listener sees only what was emitted
// after its subscription became active).
//
// Subscribe registers fn for every event, On for the events whose JSON "type" field is
// kind. Listeners run as State's do.
type Events[E any] interface {
	Subscribe(fn func(ctx context.Context, ev E)) (unsubscribe func())
	On(kind string, fn func(ctx context.Context, ev E)) (unsubscribe func())
}

// DeliveryKind says why a listener is called.
type DeliveryKind uint8

const (
	// DeliveryHydration: the value a replica hydrated with (a first snapshot, a fresh one
	// after a reconnect, a switch or a gap), under a fresh context whose parent is the
	// listener's subscription.
	DeliveryHydration DeliveryKind = iota + 1
	// DeliveryCurrent: the value a new listener of a hydrated replica gets at once,
	// under a fresh local context (the write that produced it may be long settled).
	DeliveryCurrent
	// DeliveryUpdate: a live update, under a context rebuilt from its write's trace.
	DeliveryUpdate
	// DeliveryEvent: an event, under a context rebuilt from its emitter's trace.
	DeliveryEvent
)

func (k DeliveryKind) String() string {
	switch k {
	case DeliveryHydration:
		return "hydration"
	case DeliveryCurrent:
		return "current"
	case DeliveryUpdate:
		return "update"
	case DeliveryEvent:
		return "event"
	}
	return fmt.Sprintf("delivery(%d)", uint8(k))
}

// Delivery describes one listener call: its kind, the provider's sequence of the
// value or event (a jump shows what a listener missed: an event subscription dropped
// for flow control, say), and whether it is a complete replacement (the provider was
// reloaded, or its worker moved).
type Delivery struct {
	Kind        DeliveryKind
	Seq         uint64
	Replacement bool
}

type deliveryKey struct{}

// DeliveryOf returns the delivery a listener's context is for.
func DeliveryOf(ctx context.Context) (Delivery, bool) {
	d, ok := ctx.Value(deliveryKey{}).(Delivery)
	return d, ok
}

// published is a provider's state or events member, as a service adopts it: its
// current value, and the slot its writes go to from now on (nil: none, it was retired
// by a reload).
type published interface {
	current() (json.RawMessage, any)
	adopt(s *slot)
}

// carrier returns the W3C trace context of ctx's span (nil when it has none).
func carrier(ctx context.Context) map[string]string {
	if ctx == nil || !trace.SpanContextFromContext(ctx).IsValid() {
		return nil
	}
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	return c
}

// MutableState is a provider's replicated state: always initialised, written by Set.
// It is also a State (the provider may read and watch its own value).
type MutableState[T any] struct {
	mu    sync.Mutex
	value T
	raw   json.RawMessage
	err   error // the initial value is not JSON
	slot  *slot // adopted by a service: its writes are published there
	own   *slot // the provider's own listeners
	self  *replica
}

// NewState returns a provider's state holding initial, which must be a JSON value
// (Provide refuses it otherwise). The state hands its values over as they are: the
// caller must not change a value after giving it.
func NewState[T any](initial T) *MutableState[T] {
	s := &MutableState[T]{value: initial}
	s.raw, s.err = encodeStrict(initial)
	s.own = newSlot(kindState, subAddr{}, s.raw, initial)
	return s
}

// Set makes v the state's value: every replica gets it, in order with the other writes,
// with ctx's trace as the update's source. v must be a JSON value (else
// invalid_arguments, and nothing changes). Every Set publishes, equal values included.
func (s *MutableState[T]) Set(ctx context.Context, v T) error {
	raw, err := encodeStrict(v)
	if err != nil {
		return &Error{Code: CodeInvalidArguments, Message: "a state value: " + err.Error()}
	}
	tr := carrier(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.value, s.raw, s.err = v, raw, nil
	if s.slot != nil {
		s.slot.publish(&delivery{op: opUpdate, raw: raw, val: v, trace: tr})
	}
	s.own.publish(&delivery{op: opUpdate, raw: raw, val: v, trace: tr})
	return nil
}

// Value returns the state's value (always there).
func (s *MutableState[T]) Value() (T, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.value, true
}

// Status reports the provider's own state: hydrated, never stale.
func (s *MutableState[T]) Status() StateStatus {
	seq, _, _, _ := s.own.snapshot()
	return StateStatus{Hydrated: true, Seq: seq}
}

// Subscribe registers a listener of the provider's own state (see State).
func (s *MutableState[T]) Subscribe(fn func(ctx context.Context, v T)) func() {
	s.mu.Lock()
	if s.self == nil {
		s.self = newReplica(nil, "state", kindState, decodeAs[T])
		s.self.bind(slotSource{s.own})
	}
	r := s.self
	s.mu.Unlock()
	return r.subscribe("", func(ctx context.Context, v any) { fn(ctx, v.(T)) })
}

// initErr returns why the state's value is not JSON (nil when it is). A provider may
// write the state from its own goroutines while it is being provided (a job started
// before the reference to it is made): under the lock.
func (s *MutableState[T]) initErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

func (s *MutableState[T]) current() (json.RawMessage, any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.raw, s.value
}

func (s *MutableState[T]) adopt(sl *slot) {
	s.mu.Lock()
	s.slot = sl
	s.mu.Unlock()
}

// restore installs a value carried by a move (the worker's state on its new node).
func (s *MutableState[T]) restore(raw json.RawMessage) error {
	var v T
	if err := decodeStrict(raw, &v); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.value, s.raw, s.err = v, raw, nil
	s.own.publish(&delivery{op: opReplace, raw: raw, val: v})
	return nil
}

// EventSource is a provider's remote events: Emit hands an event to every subscriber
// of the moment. It is also Events (the provider may listen to its own).
type EventSource[E any] struct {
	mu   sync.Mutex
	slot *slot
	own  *slot
	self *replica
}

// NewEvents returns a provider's event source.
func NewEvents[E any]() *EventSource[E] {
	return &EventSource[E]{own: newSlot(kindEvents, subAddr{}, nil, nil)}
}

// Emit hands ev to the subscribers active now, in order with the other events, with
// ctx's trace as its source; it never waits for one (a subscriber that cannot keep up
// is dropped, docs/services.md). ev must be a JSON value (else invalid_arguments).
func (s *EventSource[E]) Emit(ctx context.Context, ev E) error {
	raw, err := encodeStrict(ev)
	if err != nil {
		return &Error{Code: CodeInvalidArguments, Message: "an event: " + err.Error()}
	}
	tr := carrier(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.slot != nil {
		s.slot.publish(&delivery{op: opEvent, raw: raw, val: ev, trace: tr})
	}
	s.own.publish(&delivery{op: opEvent, raw: raw, val: ev, trace: tr})
	return nil
}

// Subscribe registers a listener of the provider's own events (see Events).
func (s *EventSource[E]) Subscribe(fn func(ctx context.Context, ev E)) func() {
	return s.on("", fn)
}

// On registers a listener of the provider's own events of one type (see Events).
func (s *EventSource[E]) On(kind string, fn func(ctx context.Context, ev E)) func() {
	return s.on(kind, fn)
}

func (s *EventSource[E]) on(kind string, fn func(ctx context.Context, ev E)) func() {
	s.mu.Lock()
	if s.self == nil {
		s.self = newReplica(nil, "events", kindEvents, decodeAs[E])
		s.self.bind(slotSource{s.own})
	}
	r := s.self
	s.mu.Unlock()
	return r.subscribe(kind, func(ctx context.Context, v any) { fn(ctx, v.(E)) })
}

func (s *EventSource[E]) current() (json.RawMessage, any) { return nil, nil }

func (s *EventSource[E]) adopt(sl *slot) {
	s.mu.Lock()
	s.slot = sl
	s.mu.Unlock()
}

// decodeAs returns a value as a T: the provider's own Go value when it is one (no
// copy: values are borrowed), else the JSON decoded.
func decodeAs[T any](raw json.RawMessage, val any) (any, error) {
	if v, ok := val.(T); ok {
		return v, nil
	}
	var v T
	if err := decodeStrict(raw, &v); err != nil {
		return nil, err
	}
	return v, nil
}

// stateFacade is a facade's state member: a replica of the provider's state.
type stateFacade[T any] struct{ r *replica }

func (s stateFacade[T]) Value() (T, bool) {
	v, ok := s.r.current()
	if !ok {
		var zero T
		return zero, false
	}
	return v.(T), true
}

func (s stateFacade[T]) Subscribe(fn func(ctx context.Context, v T)) func() {
	return s.r.subscribe("", func(ctx context.Context, v any) { fn(ctx, v.(T)) })
}

func (s stateFacade[T]) Status() StateStatus { return s.r.status() }

// eventsFacade is a facade's events member.
type eventsFacade[E any] struct{ r *replica }

func (e eventsFacade[E]) Subscribe(fn func(ctx context.Context, ev E)) func() {
	return e.r.subscribe("", func(ctx context.Context, v any) { fn(ctx, v.(E)) })
}

func (e eventsFacade[E]) On(kind string, fn func(ctx context.Context, ev E)) func() {
	return e.r.subscribe(kind, func(ctx context.Context, v any) { fn(ctx, v.(E)) })
}

// DescribeState registers the replicated state member name, held in *s: a provider
// sets it with NewState (Provide refuses a nil one), a consumer's facade gets a replica.
func DescribeState[T any](d *Describer, name string, s *State[T]) {
	if !d.begin(name, kindState) {
		return
	}
	switch d.mode {
	case describeTable:
		ms, ok := (*s).(*MutableState[T])
		if !ok || ms == nil {
			d.err = fmt.Errorf("state member %q: the provider sets it with services.NewState", name)
			return
		}
		if err := ms.initErr(); err != nil {
			d.err = fmt.Errorf("state member %q: the initial value is not JSON: %w", name, err)
			return
		}
		d.members[name] = member{kind: kindState, set: true, pub: ms}
	case describeFacade:
		r := newReplica(d.facade.host, d.facade.id+"."+name, kindState, decodeAs[T])
		*s = stateFacade[T]{r: r}
		d.members[name] = member{kind: kindState, replica: r}
	}
}

// DescribeEvents registers the remote events member name, held in *e: a provider sets
// it with NewEvents, a consumer's facade gets a replica.
func DescribeEvents[E any](d *Describer, name string, e *Events[E]) {
	if !d.begin(name, kindEvents) {
		return
	}
	switch d.mode {
	case describeTable:
		es, ok := (*e).(*EventSource[E])
		if !ok || es == nil {
			d.err = fmt.Errorf("events member %q: the provider sets it with services.NewEvents", name)
			return
		}
		d.members[name] = member{kind: kindEvents, set: true, pub: es}
	case describeFacade:
		r := newReplica(d.facade.host, d.facade.id+"."+name, kindEvents, decodeAs[E])
		*e = eventsFacade[E]{r: r}
		d.members[name] = member{kind: kindEvents, replica: r}
	}
}
