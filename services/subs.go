package services

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// The consumer side of subscriptions over a connection: one remote subscription per
// (scope, service, instance, member), shared by the replicas of every host using the
// connection. A subscription hydrates atomically: frames that arrive before its
// snapshot are buffered, those the snapshot covers are dropped, the rest applied in
// order; a gap in a state's sequence starts it again from a fresh snapshot. While the
// connection is down, or a session's route is being made again, its replicas keep their
// value as stale display data; it hydrates again when the connection or the route is
// back (a fresh snapshot replaces the stale value). A switch to another session, or to
// a worker that replaced the one attached to, clears readiness first.

// subscriber is a Connection that carries subscriptions (the package's own).
type subscriber interface {
	subscriptions() (*clientSubs, bool) // and whether it is the session scope
}

// remoteSource binds a replica to a connection's subscription.
type remoteSource struct {
	sub  subscriber
	addr subAddr
	kind memberKind
}

func (rs remoteSource) watch(fn func(replicaDelivery)) func() {
	cs, session := rs.sub.subscriptions()
	return cs.watch(subKey{session: session, addr: rs.addr}, rs.kind, fn)
}

// subTransport is how a connection asks its provider to subscribe and unsubscribe.
// sid is the subscription's id, which the unsubscribe that ends it names: the two go
// from different goroutines and may be reordered on the way (and an unsubscribe is
// followed at once by the next subscribe of the same member when the last replica of
// a member goes and another comes), so the provider ends only the subscription named,
// or an older one, never a later one.
type subTransport interface {
	subscribeReq(ctx context.Context, session bool, a subAddr, sid uint64) (json.RawMessage, error)
	unsubscribeReq(session bool, a subAddr, sid uint64)
}

// subscriptionIDs numbers every subscribe of the process: ids of one member grow on
// every connection, over both scopes, and past a connection's Close (a second
// StreamConnection on the same connector, whose STREAM session the server still holds
// the first one's subscriptions of, subscribes with later ids).
var subscriptionIDs atomic.Uint64

type subKey struct {
	session bool
	addr    subAddr
}

type subPhase uint8

const (
	subWaiting   subPhase = iota // not asked: the connection is down, the session not attached
	subHydrating                 // asked, the snapshot not in yet: frames are buffered
	subReady
	subClosed
)

// maxBuffered bounds the frames a hydrating subscription holds; past it, it starts
// again (counted: meshnode.services.hydrations.restarted).
const maxBuffered = 4096

// Retries of a subscription the provider could not serve for a passing reason
// (unavailable: a provider being reloaded, a worker being started).
const (
	resubscribeFirst = 50 * time.Millisecond
	resubscribeMax   = 2 * time.Second
)

type remoteSub struct {
	key   subKey
	kind  memberKind
	epoch uint64
	sid   uint64 // the id of the last subscribe asked (0: none yet)
	phase subPhase
	seq   uint64
	raw   json.RawMessage
	buf   []inbound
	sinks []*subSink
	retry *time.Timer
	wait  time.Duration
}

type subSink struct{ fn func(replicaDelivery) }

// clientSubs is one connection's subscriptions.
type clientSubs struct {
	t   subTransport
	log *slog.Logger

	mu     sync.Mutex
	subs   map[subKey]*remoteSub
	online bool             // the connection is up (server scope may subscribe)
	att    attachmentNotice // the session scope's attachment, as last told
	closed bool

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	gaps, stale, resubscribed atomic.Int64
	// stats are the metrics of the first host that uses the connection (nil: none yet)
	stats atomic.Pointer[callMetrics]
}

func newClientSubs(t subTransport, online bool) *clientSubs {
	ctx, cancel := context.WithCancel(context.Background())
	return &clientSubs{t: t, log: slog.Default(), subs: map[subKey]*remoteSub{}, online: online,
		att: attachmentNotice{State: AttachmentDetached}, ctx: ctx, cancel: cancel}
}

// close ends every subscription (the connection is gone for good) and waits for the
// requests in flight.
func (cs *clientSubs) close() {
	cs.mu.Lock()
	cs.closed = true
	for _, rs := range cs.subs {
		if rs.retry != nil {
			rs.retry.Stop()
		}
	}
	cs.mu.Unlock()
	cs.cancel()
	cs.wg.Wait()
}

// watch adds a sink to the subscription of key (making it on first use).
func (cs *clientSubs) watch(key subKey, kind memberKind, fn func(replicaDelivery)) func() {
	sk := &subSink{fn: fn}
	cs.mu.Lock()
	rs := cs.subs[key]
	if rs == nil {
		rs = &remoteSub{key: key, kind: kind}
		cs.subs[key] = rs
		cs.startLocked(rs)
	}
	rs.sinks = append(rs.sinks, sk)
	if rs.phase == subReady && rs.kind != kindEvents {
		fn(replicaDelivery{op: rdHydrate, seq: rs.seq, raw: rs.raw})
	}
	if rs.phase == subClosed {
		fn(replicaDelivery{op: rdClosed, err: &Error{Code: CodeUnavailable, Message: "the subscription is closed"}})
	}
	cs.mu.Unlock()
	return func() {
		cs.mu.Lock()
		defer cs.mu.Unlock()
		rs.sinks = slices.DeleteFunc(rs.sinks, func(x *subSink) bool { return x == sk })
		if len(rs.sinks) > 0 || cs.subs[key] != rs {
			return
		}
		delete(cs.subs, key)
		rs.epoch++ // a snapshot in flight is nobody's now
		if rs.retry != nil {
			rs.retry.Stop()
		}
		if rs.phase == subHydrating || rs.phase == subReady {
			cs.unsubscribeLocked(key, rs.sid)
		}
	}
}

func (cs *clientSubs) unsubscribeLocked(key subKey, sid uint64) {
	if cs.closed {
		return
	}
	cs.wg.Add(1)
	go func() {
		defer cs.wg.Done()
		cs.t.unsubscribeReq(key.session, key.addr, sid)
	}()
}

// ready reports whether key's scope may subscribe now. cs.mu is held.
func (cs *clientSubs) readyLocked(key subKey) bool {
	if cs.closed || !cs.online {
		return false
	}
	return !key.session || cs.att.State == AttachmentAttached
}

// startLocked asks for rs's snapshot, if its scope may subscribe. cs.mu is held.
func (cs *clientSubs) startLocked(rs *remoteSub) {
	if rs.retry != nil {
		rs.retry.Stop()
		rs.retry = nil
	}
	rs.epoch++
	rs.buf = nil
	if !cs.readyLocked(rs.key) {
		rs.phase = subWaiting
		return
	}
	rs.phase = subHydrating
	e, sid := rs.epoch, subscriptionIDs.Add(1)
	rs.sid = sid
	cs.wg.Add(1)
	go func() {
		defer cs.wg.Done()
		raw, err := cs.t.subscribeReq(cs.ctx, rs.key.session, rs.key.addr, sid)
		cs.snapshot(rs, e, sid, raw, err)
	}()
}

// tell hands d to rs's replicas. cs.mu is held.
func (rs *remoteSub) tell(d replicaDelivery) {
	for _, sk := range rs.sinks {
		sk.fn(d)
	}
}

// snapshotReply is NameSubscribe's answer.
type snapshotReply struct {
	Seq   uint64          `json:"seq"`
	Value json.RawMessage `json:"value,omitempty"`
}

func (cs *clientSubs) snapshot(rs *remoteSub, epoch, sid uint64, raw json.RawMessage, err error) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.subs[rs.key] != rs || rs.epoch != epoch {
		if err == nil && cs.subs[rs.key] == nil {
			cs.unsubscribeLocked(rs.key, sid) // given up meanwhile
		}
		return
	}
	var snap snapshotReply
	if err == nil {
		if uerr := json.Unmarshal(raw, &snap); uerr != nil || len(snap.Value) == 0 && rs.kind != kindEvents {
			err = &Error{Code: CodeInvalidResult, Message: "a subscription's snapshot does not decode"}
		}
	}
	if err != nil {
		cs.failedLocked(rs, err)
		return
	}
	rs.phase, rs.seq, rs.raw, rs.wait = subReady, snap.Seq, snap.Value, 0
	if rs.kind != kindEvents {
		rs.tell(replicaDelivery{op: rdHydrate, seq: snap.Seq, raw: snap.Value})
	}
	buf := rs.buf
	rs.buf = nil
	slices.SortStableFunc(buf, func(a, b inbound) int {
		switch {
		case a.seq < b.seq:
			return -1
		case a.seq > b.seq:
			return 1
		}
		return 0
	})
	for _, in := range buf {
		if rs.phase != subReady {
			break
		}
		cs.applyLocked(rs, in)
	}
}

// failedLocked handles a refused subscribe: a passing reason waits (the connection, the
// route, a retry), any other closes it. cs.mu is held.
func (cs *clientSubs) failedLocked(rs *remoteSub, err error) {
	code := errorCode(err)
	switch code {
	case CodeDisconnected, CodeCancelled, CodeNotAttached, CodeStaleGeneration:
		rs.phase = subWaiting
		rs.tell(replicaDelivery{op: rdStale})
		if code == CodeDisconnected && !cs.closed {
			// The connection may come back (its state tells us), or this was a
			// one-off: try again after a while either way.
			cs.retryLocked(rs)
		}
	case CodeUnavailable, CodeSessionUnavailable:
		rs.phase = subWaiting
		rs.tell(replicaDelivery{op: rdStale})
		cs.retryLocked(rs)
	default:
		rs.phase = subClosed
		we := wireError(err)
		rs.tell(replicaDelivery{op: rdClosed, err: we})
		level := slog.LevelWarn
		if we.Code == CodeStaleReference || we.Code == CodeStaleGeneration {
			level = slog.LevelDebug // its instance or reference ended: expected
		}
		cs.log.Log(context.Background(), level, "services: a subscription was refused", "member", rs.key.addr.String(), "code", we.Code, "message", we.Message)
	}
}

func (cs *clientSubs) retryLocked(rs *remoteSub) {
	if cs.closed {
		return
	}
	rs.wait = min(max(2*rs.wait, resubscribeFirst), resubscribeMax)
	e := rs.epoch
	rs.retry = time.AfterFunc(rs.wait, func() {
		cs.mu.Lock()
		defer cs.mu.Unlock()
		if cs.subs[rs.key] == rs && rs.epoch == e && rs.phase == subWaiting {
			cs.startLocked(rs)
		}
	})
}

// onInbound takes a pushed frame.
func (cs *clientSubs) onInbound(in inbound) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	rs := cs.subs[subKey{session: in.session, addr: in.addr}]
	if rs == nil {
		cs.stale.Add(1) // of a subscription ended meanwhile
		return
	}
	if in.session && (cs.att.State != AttachmentAttached || in.inc != cs.att.Incarnation) {
		cs.stale.Add(1) // of a route that is not the current one
		return
	}
	if in.op == opClosed && in.seq == 0 {
		// A subscription's own notice (it was dropped for flow control), outside the
		// member's sequence: for the subscription it names (an earlier one's is stale),
		// and after every frame queued before it, which came first.
		if in.sid != 0 && in.sid != rs.sid {
			cs.stale.Add(1)
			return
		}
		if rs.phase == subHydrating || rs.phase == subReady {
			cs.closedLocked(rs, in)
		}
		return
	}
	switch rs.phase {
	case subHydrating:
		if len(rs.buf) >= maxBuffered {
			if m := cs.stats.Load(); m != nil {
				m.count(m.restarted, 1)
			}
			cs.startLocked(rs)
			return
		}
		rs.buf = append(rs.buf, in)
	case subReady:
		cs.applyLocked(rs, in)
	}
}

// applyLocked applies the next frame of a ready subscription. cs.mu is held.
func (cs *clientSubs) applyLocked(rs *remoteSub, in inbound) {
	if in.seq <= rs.seq {
		return // covered by the snapshot, or a duplicate
	}
	if in.seq > rs.seq+1 {
		cs.gaps.Add(1)
		if rs.kind != kindEvents {
			// A state must not skip a value: start again from a fresh snapshot (the
			// replicas keep theirs meanwhile).
			cs.resubscribed.Add(1)
			cs.startLocked(rs)
			return
		}
		// Events lost are lost (never replayed); the listener sees the jump.
	}
	rs.seq = in.seq
	switch in.op {
	case opUpdate:
		rs.raw = in.raw
		rs.tell(replicaDelivery{op: rdUpdate, seq: in.seq, raw: in.raw, trace: in.trace})
	case opReplace:
		rs.raw = in.raw
		rs.tell(replicaDelivery{op: rdReplace, seq: in.seq, raw: in.raw, trace: in.trace})
	case opEvent:
		rs.tell(replicaDelivery{op: rdEvent, seq: in.seq, raw: in.raw, trace: in.trace})
	case opClosed:
		cs.closedLocked(rs, in)
	}
}

// closedLocked ends rs on a closed notice: dropped for flow control, the client has
// caught up with what was queued before the notice and subscribes again (a state from
// a fresh snapshot, events from now on); otherwise the member ended.
func (cs *clientSubs) closedLocked(rs *remoteSub, in inbound) {
	if in.err != nil && in.err.Code == CodeFlowControl {
		cs.resubscribed.Add(1)
		rs.tell(replicaDelivery{op: rdStale})
		cs.startLocked(rs)
		return
	}
	rs.phase = subClosed
	rs.tell(replicaDelivery{op: rdClosed, err: in.err})
}

// setOnline records the connection going down (replicas keep stale values) or coming
// back (the server scope subscribes again; the session scope waits for its route).
func (cs *clientSubs) setOnline(up bool) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.online == up {
		return
	}
	cs.online = up
	if !up {
		cs.att = attachmentNotice{State: AttachmentAttaching, Session: cs.att.Session, Incarnation: cs.att.Incarnation}
	}
	for _, rs := range cs.subs {
		if !up {
			if rs.phase != subClosed {
				rs.phase = subWaiting
				rs.epoch++
				rs.tell(replicaDelivery{op: rdStale})
			}
			continue
		}
		if !rs.key.session && rs.phase != subClosed {
			cs.startLocked(rs)
		}
	}
}

// setAttachment records the session scope's attachment as the server told it.
func (cs *clientSubs) setAttachment(n attachmentNotice) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	prev := cs.att
	cs.att = n
	for _, rs := range cs.subs {
		if !rs.key.session {
			continue
		}
		switch n.State {
		case AttachmentAttached:
			// The same worker (a route made again, a reconnect): a fresh snapshot
			// replaces the stale value. Another session, or a worker that replaced the
			// one attached to: readiness is cleared first.
			if prev.Session != n.Session || prev.Incarnation != n.Incarnation || prev.State == AttachmentDetached {
				rs.tell(replicaDelivery{op: rdCold})
				rs.seq = 0
			}
			cs.startLocked(rs)
		case AttachmentAttaching, AttachmentDegraded:
			if rs.phase != subClosed {
				rs.phase = subWaiting
				rs.epoch++
				rs.tell(replicaDelivery{op: rdStale})
			}
		case AttachmentDetached:
			rs.phase = subWaiting
			rs.epoch++
			rs.seq = 0
			rs.tell(replicaDelivery{op: rdCold})
		}
	}
}
