package services

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// A replica is a consumer's copy of one state or events member: one per facade member
// (so one per host, service, instance and member, however many listeners), bound to
// the provider of the moment (a slot of the same host, or a connection's subscription)
// and told by it, in order, what happens: hydrated from a snapshot, updated, replaced,
// stale (its provider cannot be reached), cold again (switched to another provider),
// closed. Listeners run on the replica's delivery goroutine, one call at a time.

// rdOp is what a source tells a replica.
type rdOp uint8

const (
	rdHydrate rdOp = iota + 1 // a complete snapshot (first, or a fresh one)
	rdUpdate                  // the next value
	rdReplace                 // a complete replacement (reload, move)
	rdEvent                   // an event
	rdStale                   // the provider cannot be reached: keep the value as stale display data
	rdCold                    // another provider from now on: readiness cleared
	rdClosed                  // the member is gone for good (its instance closed)
)

type replicaDelivery struct {
	op    rdOp
	seq   uint64
	raw   json.RawMessage
	val   any
	trace map[string]string
	err   *Error
}

// source is what a replica binds to.
type source interface {
	// watch delivers to fn, in order: for a state the current value first (rdHydrate)
	// when there is one, then what follows. stop ends it (deliveries racing stop may
	// still come; the replica drops them).
	watch(fn func(replicaDelivery)) (stop func())
}

// slotSource watches a slot of this process.
type slotSource struct{ s *slot }

func (ss slotSource) watch(fn func(replicaDelivery)) func() {
	stop, err := ss.s.watchFrom(func(seq uint64, raw json.RawMessage, val any) {
		if ss.s.kind != kindEvents {
			fn(replicaDelivery{op: rdHydrate, seq: seq, raw: raw, val: val})
		}
	}, func(d *delivery) bool {
		fn(fromSlot(d))
		return true
	}, nil)
	if err != nil {
		fn(replicaDelivery{op: rdClosed, err: err})
	}
	return stop
}

func fromSlot(d *delivery) replicaDelivery {
	rd := replicaDelivery{seq: d.seq, raw: d.raw, val: d.val, trace: d.trace, err: d.err}
	switch d.op {
	case opUpdate:
		rd.op = rdUpdate
	case opReplace:
		rd.op = rdReplace
	case opEvent:
		rd.op = rdEvent
	case opClosed:
		rd.op = rdClosed
	}
	return rd
}

// maxQueuedDeliveries bounds a replica's queue of listener calls. Past it a state's
// queued updates are folded into one call with the latest value; events are dropped (a
// listener sees the jump in Delivery.Seq). Both are counted in the consumer host's
// metrics (meshnode.services.deliveries.folded, .dropped).
const maxQueuedDeliveries = 1024

type listener struct {
	id   uint64
	kind string // events: the "type" On filters on ("" all)
	fn   func(ctx context.Context, v any)
	sub  context.Context // the subscription: the parent of its hydration deliveries
	gone atomic.Bool
}

type replica struct {
	host   *Host // nil for a provider's own listeners
	name   string
	kind   memberKind
	decode func(json.RawMessage, any) (any, error)

	mu        sync.Mutex
	gen       uint64 // bumps per bind: a stale source's deliveries are dropped
	stop      func()
	hyd       chan struct{} // closed once hydrated under the current binding
	closedCh  chan struct{} // closed once closed under the current binding
	value     any
	seq       uint64
	hydrated  bool
	stale     bool
	closed    *Error
	listeners []*listener
	nextID    uint64

	// the delivery queue (under mu)
	queue   []func()
	running bool
	folded  bool // a state's queue overflowed: deliver the latest value when it drains

	dropped atomic.Int64

	// onClosed, when set, is told (on the delivery goroutine) when the member closes
	// for good: its subscription refused or its instance or reference gone.
	onClosed func(*Error)
}

func newReplica(h *Host, name string, kind memberKind, decode func(json.RawMessage, any) (any, error)) *replica {
	return &replica{host: h, name: name, kind: kind, decode: decode}
}

// bind makes src the replica's provider (nil: none): a state becomes cold until src
// hydrates it.
func (r *replica) bind(src source) {
	r.mu.Lock()
	old := r.stop
	r.gen++
	g := r.gen
	r.stop = nil
	r.value, r.hydrated, r.stale, r.closed, r.seq = nil, false, false, nil, 0
	r.hyd, r.closedCh = make(chan struct{}), make(chan struct{})
	r.mu.Unlock()
	if old != nil {
		old()
	}
	if src == nil {
		return
	}
	stop := src.watch(func(d replicaDelivery) { r.on(g, d) })
	r.mu.Lock()
	if r.gen == g {
		r.stop = stop
		r.mu.Unlock()
		return
	}
	r.mu.Unlock()
	stop()
}

// current returns the replica's value.
func (r *replica) current() (any, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.value, r.hydrated
}

func (r *replica) status() StateStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	return StateStatus{Hydrated: r.hydrated, Stale: r.stale, Seq: r.seq}
}

// subscribe registers a listener (kind: an events' On filter).
func (r *replica) subscribe(kind string, fn func(ctx context.Context, v any)) func() {
	sub := context.Background()
	if r.host != nil && r.host.tracer != nil {
		var span trace.Span
		sub, span = r.host.tracer.Start(sub, "services.subscribe", trace.WithAttributes(attribute.String("rpc.member", r.name)))
		span.End()
	}
	r.mu.Lock()
	r.nextID++
	l := &listener{id: r.nextID, kind: kind, fn: fn, sub: sub}
	r.listeners = append(r.listeners, l)
	if r.kind == kindState && r.hydrated {
		v, seq := r.value, r.seq
		r.enqueueLocked(func() { r.call(l, DeliveryCurrent, seq, false, nil, v) })
	}
	r.mu.Unlock()
	return func() {
		l.gone.Store(true)
		r.mu.Lock()
		r.listeners = slices.DeleteFunc(r.listeners, func(x *listener) bool { return x == l })
		r.mu.Unlock()
	}
}

// on takes a delivery of the source bound under generation g.
func (r *replica) on(g uint64, d replicaDelivery) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if g != r.gen {
		return
	}
	switch d.op {
	case rdHydrate, rdReplace, rdUpdate:
		if d.op == rdUpdate && !r.hydrated {
			return // a source hydrates first; nothing to update
		}
		v, err := r.decode(d.raw, d.val)
		if err != nil {
			r.logf("services: a state value does not decode into the consumer's type; the replica keeps its value", "err", err)
			return
		}
		r.value, r.seq, r.hydrated, r.stale, r.closed = v, d.seq, true, false, nil
		select {
		case <-r.hyd:
		default:
			close(r.hyd)
		}
		kind := DeliveryUpdate
		if d.op != rdUpdate {
			kind = DeliveryHydration
		}
		for _, l := range r.listeners {
			r.enqueueLocked(func() { r.call(l, kind, d.seq, d.op == rdReplace, d.trace, v) })
		}
	case rdEvent:
		v, err := r.decode(d.raw, d.val)
		if err != nil {
			r.logf("services: an event does not decode into the consumer's type; dropped", "err", err)
			return
		}
		r.seq = d.seq
		typ := ""
		for _, l := range r.listeners {
			if l.kind != "" {
				if typ == "" {
					typ = eventType(d.raw)
				}
				if l.kind != typ {
					continue
				}
			}
			if !r.enqueueLocked(func() { r.call(l, DeliveryEvent, d.seq, false, d.trace, v) }) {
				r.dropped.Add(1)
				if r.host != nil {
					r.host.stats.count(r.host.stats.eventsDropped, 1)
				}
			}
		}
	case rdStale:
		r.stale = r.hydrated
	case rdCold:
		r.value, r.hydrated, r.stale, r.seq = nil, false, false, 0
	case rdClosed:
		// The member is gone (its instance or reference closed): a task still reading
		// it sees its last value, as stale display data.
		r.stale, r.closed = r.hydrated, d.err
		select {
		case <-r.closedCh:
		default:
			close(r.closedCh)
		}
		if fn := r.onClosed; fn != nil {
			err := d.err
			r.enqueueLocked(func() { fn(err) })
		}
	}
}

// waits returns channels closed once the replica is hydrated, or closed, under its
// current binding.
func (r *replica) waits() (hydrated, closed <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.hyd == nil {
		r.hyd, r.closedCh = make(chan struct{}), make(chan struct{})
	}
	return r.hyd, r.closedCh
}

// eventType reads an event's "type" field.
func eventType(raw json.RawMessage) string {
	var t struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(raw, &t)
	return t.Type
}

func (r *replica) logf(msg string, args ...any) {
	log := slog.Default()
	if r.host != nil {
		log = r.host.log
	}
	log.Warn(msg, append([]any{"member", r.name}, args...)...)
}

// enqueueLocked queues a listener call; it reports false when the queue is full (for a
// state, the latest value is delivered once it drains). r.mu is held.
func (r *replica) enqueueLocked(f func()) bool {
	if len(r.queue) >= maxQueuedDeliveries {
		if r.kind == kindState {
			r.folded = true
			if r.host != nil {
				r.host.stats.count(r.host.stats.folded, 1)
			}
		}
		return false
	}
	r.queue = append(r.queue, f)
	if !r.running {
		r.running = true
		if r.host != nil {
			r.host.deliveries.Add(1)
		}
		go r.drain()
	}
	return true
}

// drain runs queued listener calls until none is left (no goroutine stays idle).
func (r *replica) drain() {
	if r.host != nil {
		defer r.host.deliveries.Done()
	}
	for {
		r.mu.Lock()
		if len(r.queue) == 0 && r.folded && r.hydrated {
			r.folded = false
			v, seq := r.value, r.seq
			for _, l := range r.listeners {
				r.queue = append(r.queue, func() { r.call(l, DeliveryUpdate, seq, false, nil, v) })
			}
		}
		if len(r.queue) == 0 {
			r.running = false
			r.mu.Unlock()
			return
		}
		q := r.queue
		r.queue = nil
		r.mu.Unlock()
		for _, f := range q {
			f()
		}
	}
}

// call runs one listener call with the context of its kind of delivery.
func (r *replica) call(l *listener, kind DeliveryKind, seq uint64, replacement bool, tr map[string]string, v any) {
	if l.gone.Load() {
		return
	}
	var ctx context.Context
	switch kind {
	case DeliveryHydration:
		ctx = l.sub
	case DeliveryUpdate, DeliveryEvent:
		ctx = context.Background()
		if len(tr) > 0 {
			ctx = propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier(tr))
		}
	default:
		ctx = context.Background()
	}
	var span trace.Span
	if r.host != nil && r.host.tracer != nil {
		ctx, span = r.host.tracer.Start(ctx, "services.deliver", trace.WithAttributes(
			attribute.String("rpc.member", r.name), attribute.String("services.delivery", kind.String())))
		defer span.End()
	}
	ctx = context.WithValue(ctx, deliveryKey{}, Delivery{Kind: kind, Seq: seq, Replacement: replacement})
	defer func() {
		if p := recover(); p != nil {
			r.logf("services: a listener panicked", "panic", p)
		}
	}()
	l.fn(ctx, v)
}
