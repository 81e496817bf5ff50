package actor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshnode/meshnode/fault"
	"github.com/meshnode/meshnode/mesh"
	"github.com/meshnode/meshnode/mesh/wire"
	"github.com/meshnode/meshnode/session/codec"
)

// Addressing, one-way sends and request/response between Actors.
//
// On the wire an Actor message is record 24 addressed to the activation; a request is a
// 24 whose operation id names the requester's correlation, and its answer is a record
// 20 (reply) with that correlation, carrying the reply value in its payload envelope
// (or, for an error the replier chose, the JSON error payload under the reserved name
// $zlink.error). Infrastructure failures (no such activation, a full mailbox) are
// terminal results of the 20. Between Actors of one node nothing is encoded.

// DefaultRequestTimeout bounds a request whose context has no deadline.
const DefaultRequestTimeout = 30 * time.Second

// Target is where a message goes: an Address (kind and ActorId, resolved through the
// directory, activating the Actor on demand) or a RouteFence (an activation already
// resolved).
type Target interface {
	resolve(ctx context.Context, h *Host) (RouteFence, error)
}

// Address names an Actor by kind and ActorId, wherever it lives.
type Address struct {
	Kind string
	ID   string
}

func (a Address) String() string { return a.Kind + "/" + a.ID }

func (a Address) resolve(ctx context.Context, h *Host) (RouteFence, error) {
	h.routeMu.Lock()
	f, ok := h.routes[a]
	h.routeMu.Unlock()
	if ok {
		return f, nil
	}
	var stale *RouteFence
	h.routeMu.Lock()
	if sf, ok := h.staleRoutes[a]; ok {
		stale = &sf
		delete(h.staleRoutes, a)
	}
	h.routeMu.Unlock()
	var err error
	if stale != nil && h.rdir != nil {
		f, err = h.rdir.lookup(ctx, a.Kind, a.ID, "", stale)
	} else {
		f, err = h.Lookup(ctx, a.Kind, a.ID)
	}
	if err != nil {
		return RouteFence{}, err
	}
	h.routeMu.Lock()
	if len(h.routes) >= maxCachedRoutes {
		h.routes = map[Address]RouteFence{}
	}
	h.routes[a] = f
	h.routeMu.Unlock()
	return f, nil
}

func (f RouteFence) resolve(context.Context, *Host) (RouteFence, error) { return f, nil }

// Resolve returns the route fence of the Actor a: from the route cache when an earlier
// look-up resolved it (the cache is cleared on every membership change), else by a
// directory look-up, activating the Actor if needed. A caller that finds the fence
// stale (the activation is gone) calls Forget and resolves again.
func (h *Host) Resolve(ctx context.Context, a Address) (RouteFence, error) { return a.resolve(ctx, h) }

// Forget drops the cached route of a.
func (h *Host) Forget(a Address) { h.forgetRoute(a) }

// ForgetStale drops the cached route of a, which named no activation at f: the next
// resolve asks the directory to check f and replace it if it is stale.
func (h *Host) ForgetStale(a Address, f RouteFence) { h.forgetFailed(a, f) }

// forgetFailed drops a cached route whose fence f named no activation, and remembers f
// for the next look-up of to.
func (h *Host) forgetFailed(to Target, f RouteFence) {
	a, ok := to.(Address)
	if !ok {
		return
	}
	h.routeMu.Lock()
	delete(h.routes, a)
	if len(h.staleRoutes) >= maxCachedRoutes {
		clear(h.staleRoutes)
	}
	h.staleRoutes[a] = f
	h.routeMu.Unlock()
}

// maxCachedRoutes bounds the route cache; it is simply cleared when full.
const maxCachedRoutes = 1 << 16

// forgetRoute drops a cached route that failed (the Actor moved, stopped, its node
// left): the next send looks it up again.
func (h *Host) forgetRoute(to Target) {
	if a, ok := to.(Address); ok {
		h.routeMu.Lock()
		delete(h.routes, a)
		h.routeMu.Unlock()
	}
}

// routeFailed reports whether err means the cached route is no longer good.
func routeFailed(err error) bool {
	k, ok := fault.Of(err)
	return ok && (k == fault.NotFound || k == fault.Unavailable)
}

// Send sends msg to the Actor to, one-way (from outside any Actor).
func (h *Host) Send(ctx context.Context, to Target, msg any) error {
	return h.send(ctx, to, msg, nil)
}

func (h *Host) send(ctx context.Context, to Target, msg any, from *Ref) error {
	for attempt := 0; ; attempt++ {
		f, err := to.resolve(ctx, h)
		if err != nil {
			return err
		}
		err = h.deliverTo(ctx, f, msg, from, nil)
		if err == nil || !routeFailed(err) {
			return err
		}
		h.forgetFailed(to, f)
		if !retriable(to, attempt) {
			return err
		}
	}
}

// retriable reports whether a message that was not delivered (the route failed before
// anything reached an Actor) may go once more: to an Address, looked up again (the
// Actor was collected, moved, or its node left), once.
func retriable(to Target, attempt int) bool {
	_, isAddr := to.(Address)
	return isAddr && attempt == 0
}

// Request sends msg to the Actor to and waits for its reply (from outside any Actor);
// see Context.Request.
func (h *Host) Request(ctx context.Context, to Target, msg any) (any, error) {
	return h.request(ctx, to, msg, nil)
}

func (h *Host) request(ctx context.Context, to Target, msg any, from *Ref) (any, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultRequestTimeout)
		defer cancel()
	}
	for attempt := 0; ; attempt++ {
		v, f, undelivered, err := h.requestOnce(ctx, to, msg, from)
		if err == nil || !undelivered {
			return v, err
		}
		h.forgetFailed(to, f)
		if !retriable(to, attempt) {
			return v, err
		}
	}
}

// RequestFunc sends msg to the Actor to, like Request, and calls done with the reply
// value or the error exactly once, without a goroutine waiting for it: from the
// goroutine that completes the request (the node's record receiver for a reply from
// another node, the target's turn for a local one, a timer when ctx ends first). done
// must not block. A request that reached no Actor (a stale route) is sent once more to
// an Address, as Request does. For callers that serve many requests at once (a
// server routing its clients' calls to Actors).
func (h *Host) RequestFunc(ctx context.Context, to Target, msg any, done func(v any, err error)) {
	cancel := context.CancelFunc(func() {})
	if _, ok := ctx.Deadline(); !ok {
		ctx, cancel = context.WithTimeout(ctx, DefaultRequestTimeout)
	}
	h.requestFunc(ctx, to, msg, 0, func(v any, err error) {
		cancel()
		done(v, err)
	})
}

func (h *Host) requestFunc(ctx context.Context, to Target, msg any, attempt int, done func(v any, err error)) {
	f, err := to.resolve(ctx, h)
	if err != nil {
		done(nil, err)
		return
	}
	call := &pendingCall{node: f.Node}
	corr := h.calls.add(call)
	var stop atomic.Pointer[func() bool]
	call.fn = func(v any, err error) {
		h.calls.remove(corr)
		if s := stop.Swap(nil); s != nil {
			(*s)()
		}
		if errors.Is(err, errNotDelivered) && retriable(to, attempt) {
			h.forgetFailed(to, f)
			// Not on the completing goroutine (a record receiver): the look-up may wait.
			go h.requestFunc(ctx, to, msg, attempt+1, done)
			return
		}
		done(v, err)
	}
	s := context.AfterFunc(ctx, func() {
		if call.complete(nil, fault.Errorf(fault.DeadlineExceeded, "actor: request to %s: %w", f.Ref, ctx.Err())) {
			h.reqTimedOut.Add(1)
		}
	})
	stop.Store(&s)
	if call.finished.Load() {
		if s := stop.Swap(nil); s != nil {
			(*s)() // completed before the timer was set
		}
	}
	if err := h.deliverTo(ctx, f, msg, nil, &requestInfo{corr: corr, local: call}); err != nil {
		if routeFailed(err) && retriable(to, attempt) && call.finished.CompareAndSwap(false, true) {
			// Nothing reached an Actor: look it up again and send once more.
			h.calls.remove(corr)
			if s := stop.Swap(nil); s != nil {
				(*s)()
			}
			h.forgetFailed(to, f)
			h.requestFunc(ctx, to, msg, attempt+1, done)
			return
		}
		call.complete(nil, err)
	}
}

// requestOnce sends one request; undelivered reports a failure before any Actor took
// the request (the route was stale or gone), which makes it safe to send again.
func (h *Host) requestOnce(ctx context.Context, to Target, msg any, from *Ref) (v any, f RouteFence, undelivered bool, err error) {
	f, err = to.resolve(ctx, h)
	if err != nil {
		return nil, f, false, err
	}
	call := &pendingCall{done: make(chan callResult, 1), node: f.Node}
	corr := h.calls.add(call)
	defer h.calls.remove(corr)
	if err := h.deliverTo(ctx, f, msg, from, &requestInfo{corr: corr, local: call}); err != nil {
		return nil, f, routeFailed(err), err
	}
	select {
	case r := <-call.done:
		return r.value, f, errors.Is(r.err, errNotDelivered), r.err
	case <-ctx.Done():
		h.reqTimedOut.Add(1)
		return nil, f, false, fault.Errorf(fault.DeadlineExceeded, "actor: request to %s: %w", f.Ref, ctx.Err())
	}
}

// errNotDelivered marks the answer of a node whose activation was gone before the
// request reached it.
var errNotDelivered = fault.New(fault.NotFound, "actor: no such Actor at the route")

// requestInfo marks a delivery as a request: its correlation, and for a local request
// the call to complete in-process.
type requestInfo struct {
	corr  uint64
	local *pendingCall
}

// delivery is what a local send puts in an activation's mailbox.
type delivery struct {
	msg     any
	from    *Ref
	request *requestInfo
}

// deliverTo sends msg to the activation f: in-process when it is on this node,
// otherwise as record 24 addressed to it.
func (h *Host) deliverTo(ctx context.Context, f RouteFence, msg any, from *Ref, req *requestInfo) error {
	if f.Node == h.node.ID() {
		a, ok := h.local(f.ID)
		if !ok {
			if fw, ok := h.followRoute(activationName(f.Ref)); ok && fenceMatches(fw.source, f) {
				// Message Follow: the Actor moved away from here.
				return h.followLocal(fw, f, msg, from, req)
			}
			return fmt.Errorf("%w: %s", ErrNotFound, f.Ref)
		}
		if !a.addressedTo(f) {
			return fmt.Errorf("%w: %s, current %s", ErrStale, f, a.fence)
		}
		if !a.admits(h, 0) {
			h.mailboxRejected.Add(1)
			return fmt.Errorf("%w: %s", ErrMailboxFull, f.Ref)
		}
		if _, raw := msg.(*Message); !raw {
			if _, raw := msg.(Message); !raw && msg != nil {
				if _, ok := h.messages.typeOf(msg); !ok {
					return fault.Errorf(fault.NotConfigured, "actor: no message type registered for %T (register it with actor.MessageOf in meshnode.Config.Messages)", msg)
				}
				msg = normalize(msg)
			}
		}
		if m, ok := msg.(Message); ok {
			msg = &m
		}
		h.system.Root.Send(a.pid, &delivery{msg: msg, from: from, request: req})
		return nil
	}
	if !h.node.Membership().IsLive(f.Node) {
		return fault.Errorf(fault.Unavailable, "actor: %s is not a live member", f.Node)
	}
	var m *Message
	var err error
	if v, ok := msg.(Message); ok {
		m = &v // the record copies its fields: a message passed by value stays on the stack
	} else if m, err = h.encode(msg); err != nil {
		return err
	}
	rec, scratch, err := actorSendRecord(f, m, from, req)
	if err != nil {
		return err
	}
	// Addressed straight to the activation: no hop through the node's record receiver.
	addr, err := h.remoteAddr(f)
	if err == nil {
		err = h.node.Records().SendToActor(ctx, addr, rec, sendWait(ctx))
	}
	scratch.release()
	if err != nil {
		return fmt.Errorf("actor: send to %s: %w", f.Ref, err)
	}
	return nil
}

// sendWait bounds how long an Actor message waits for room toward its node: as long as
// ctx lasts when it has a deadline, mesh.DefaultSendWait otherwise (an Actor's
// context lives as long as the Actor).
func sendWait(ctx context.Context) time.Duration {
	if _, ok := ctx.Deadline(); ok {
		return 0
	}
	return mesh.DefaultSendWait
}

// Requests in flight from this node.

// requestBit marks the correlations of Actor requests, so that record 20 answers to them
// are told apart from the binding layer's (HandleReplies).
const requestBit = 1 << 60

type callResult struct {
	value any
	err   error
}

type pendingCall struct {
	done chan callResult // cap 1: the first result wins
	node mesh.NodeID     // where the target lives: its failure fails the call
	// fn, when set instead of done, is called with the first result (RequestFunc).
	fn       func(v any, err error)
	finished atomic.Bool
}

// complete ends the call with v or err; it reports whether this ended it (a call ends
// once: the first of its reply, its deadline and its node's failure).
func (c *pendingCall) complete(v any, err error) bool {
	if c.fn != nil {
		if c.finished.CompareAndSwap(false, true) {
			c.fn(v, err)
			return true
		}
		return false
	}
	select {
	case c.done <- callResult{value: v, err: err}:
		return true
	default:
		return false
	}
}

type pendingCalls struct {
	nodeFailed atomic.Int64 // calls failNode ended (Stats.RequestsNodeFailed)
	next       atomic.Uint64
	mu         sync.Mutex
	m          map[uint64]*pendingCall
}

func (p *pendingCalls) add(c *pendingCall) uint64 {
	corr := p.next.Add(1) | requestBit
	p.mu.Lock()
	if p.m == nil {
		p.m = map[uint64]*pendingCall{}
	}
	p.m[corr] = c
	p.mu.Unlock()
	return corr
}

func (p *pendingCalls) remove(corr uint64) {
	p.mu.Lock()
	delete(p.m, corr)
	p.mu.Unlock()
}

func (p *pendingCalls) get(corr uint64) *pendingCall {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.m[corr]
}

// failNode fails every call waiting on an Actor of a node that left or failed.
func (p *pendingCalls) failNode(id mesh.NodeID, why string) {
	p.mu.Lock()
	var calls []*pendingCall
	for _, c := range p.m {
		if c.node == id {
			calls = append(calls, c)
		}
	}
	p.mu.Unlock()
	for _, c := range calls {
		if c.complete(nil, fault.Errorf(fault.Unavailable, "actor: the target's node %s %s", id, why)) {
			p.nodeFailed.Add(1)
		}
	}
}

// HandleReplies registers fn for the records 20 that are not answers to Actor requests
// (the binding layer's bind terminals). The Actor host owns the node's record 20
// handler.
func (h *Host) HandleReplies(fn mesh.RecordHandler) {
	h.turnHandlers.mu.Lock()
	h.otherReplies = fn
	h.turnHandlers.mu.Unlock()
}

// onReply handles a record 20: the answer to one of this node's Actor requests, or
// another layer's.
func (h *Host) onReply(from mesh.NodeID, rec *wire.Record) {
	r, ok := rec.Body.(*wire.Reply)
	if !ok {
		return
	}
	if r.Correlation&requestBit == 0 {
		h.turnHandlers.mu.RLock()
		fn := h.otherReplies
		h.turnHandlers.mu.RUnlock()
		if fn != nil {
			fn(from, rec)
		}
		return
	}
	call := h.calls.get(r.Correlation)
	if call == nil {
		return // timed out or cancelled: a late answer
	}
	if call.node != from && !h.node.Membership().IsLive(from) {
		// The answer may come from another node than the one asked when the Actor
		// moved meanwhile (Message Follow); never from one that is not a member.
		h.node.Records().DropStale(from, "answer to an Actor request from a node that is not a member")
		return
	}
	call.complete(h.replyResult(r, rec.Payload))
}

// replyResult turns a record 20 into the requester's value or error.
func (h *Host) replyResult(r *wire.Reply, p *wire.Payload) (any, error) {
	if r.Result != wire.ResultOK {
		return nil, terminalError(r)
	}
	if p == nil {
		return nil, nil
	}
	if p.PacketName == replyErrorName {
		ep, err := codec.DecodeErrorPayload(p.Data)
		if err != nil {
			return nil, fault.Errorf(fault.ProtocolError, "actor: malformed error reply: %w", err)
		}
		k, _ := fault.KindOf(ep.Code)
		return nil, fault.Errorf(k, "%s", ep.Message)
	}
	return h.decode(&Message{Name: p.PacketName, ContentType: p.ContentType, Data: p.Data})
}

// terminalError maps an infrastructure failure of a request to its fault kind.
func terminalError(r *wire.Reply) error {
	switch r.Failure {
	case wire.FailureActorRouteNotFound:
		return errNotDelivered
	case wire.FailureWorkerQueueFull:
		// Digest §9.5: a remote queue that is full is Unavailable to the requester.
		return fault.Errorf(fault.Unavailable, "actor: the target's mailbox is full")
	}
	switch r.Result {
	case wire.ResultNotFound:
		return fault.Errorf(fault.NotFound, "actor: request: %s", r.Result)
	case wire.ResultTimedOut:
		return fault.Errorf(fault.DeadlineExceeded, "actor: request: %s", r.Result)
	case wire.ResultProtocolError:
		return fault.Errorf(fault.ProtocolError, "actor: request: %s", r.Result)
	case wire.ResultRejected:
		return fault.Errorf(fault.Rejected, "actor: request: %s", r.Result)
	}
	return fault.Errorf(fault.Unavailable, "actor: request: %s / %s", r.Result, r.Failure)
}

// answerRequest answers a request that arrived as record 24 from another node. A reply
// that cannot go (its value does not encode, it is over the limit between nodes) fails
// the requester at once with that error, a short error reply in its place, and the
// error is returned to the Actor: the requester never waits out its deadline for it.
func (h *Host) answerRequest(ctx context.Context, to mesh.NodeID, corr uint64, v any, err error) error {
	var p *wire.Payload
	if err != nil {
		p = errorPayload(err)
	} else {
		m, eerr := h.encode(v)
		if eerr != nil {
			h.sendErrorReply(ctx, to, corr, eerr)
			return eerr
		}
		p = &wire.Payload{PacketName: m.Name, ContentType: m.ContentType, Data: m.Data}
	}
	rec := &wire.Record{Body: &wire.Reply{Correlation: corr, Result: wire.ResultOK}, Payload: p}
	serr := h.node.Records().Send(ctx, to, rec)
	if errors.Is(serr, mesh.ErrRecordTooLarge) {
		serr = fault.Errorf(fault.CapacityExceeded, "actor: reply of %d bytes: %w", len(p.Data), serr)
		h.sendErrorReply(ctx, to, corr, serr)
	}
	return serr
}

// errorPayload is the payload of an error reply: err's fault code and message.
func errorPayload(err error) *wire.Payload {
	return &wire.Payload{PacketName: replyErrorName, ContentType: codec.ContentTypeJSON,
		Data: codec.EncodeErrorPayload(fault.Code(err), err.Error())}
}

// sendErrorReply answers a request whose reply could not go with why it could not.
func (h *Host) sendErrorReply(ctx context.Context, to mesh.NodeID, corr uint64, why error) {
	rec := &wire.Record{Body: &wire.Reply{Correlation: corr, Result: wire.ResultOK}, Payload: errorPayload(why)}
	if err := h.node.Records().Send(ctx, to, rec); err != nil {
		h.log.Debug("actor: error reply not sent", "to", to.String(), "err", err)
	}
}

// failRequest answers a request record that no Actor will see: it never waits (it runs
// where every Actor's records pass).
func (h *Host) failRequest(to mesh.NodeID, corr uint64, result wire.TerminalResult, failure wire.FailureCode) {
	rec := &wire.Record{Body: &wire.Reply{Correlation: corr, Result: result, Failure: failure}}
	if err := h.node.Records().TrySend(to, rec); err != nil {
		h.log.Debug("actor: request failure not answered", "to", to.String(), "err", err)
	}
}
