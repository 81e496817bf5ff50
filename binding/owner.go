package binding

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/meshnode/meshnode/actor"
	"github.com/meshnode/meshnode/fault"
	"github.com/meshnode/meshnode/mesh"
	"github.com/meshnode/meshnode/mesh/wire"
	"github.com/meshnode/meshnode/session"
	"github.com/meshnode/meshnode/session/codec"
	swire "github.com/meshnode/meshnode/session/wire"
)

// roundTrip sends one 38 (bind or tombstone) and waits for its 20. For a bind, the
// binding is published in the reply handler (linearisation point B) before the waiter
// wakes, so nothing that follows the terminal on the wire is judged against stale state.
func (b *Binder) roundTrip(ctx context.Context, s *Session, fence actor.RouteFence, gen uint64, tombstone bool) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultBindTimeout)
		defer cancel()
	}
	corr := b.nextCorr.Add(1)
	op := &pendingOp{s: s, fence: fence, gen: gen, tombstone: tombstone, done: make(chan error, 1)}
	b.mu.Lock()
	b.pending[corr] = op
	b.mu.Unlock()
	if err := b.actors.SendRecord(ctx, fence, bindRecord(corr, fence, s.rid, gen, tombstone)); err != nil {
		b.mu.Lock()
		delete(b.pending, corr)
		b.mu.Unlock()
		if _, ok := fault.Of(err); ok {
			return fmt.Errorf("binding: bind: %w", err)
		}
		return fault.Errorf(fault.Unavailable, "binding: bind: %w", err)
	}
	select {
	case err := <-op.done:
		return err
	case <-ctx.Done():
		b.mu.Lock()
		_, still := b.pending[corr]
		delete(b.pending, corr)
		b.mu.Unlock()
		if !still {
			// The terminal won the race: its outcome stands.
			return <-op.done
		}
		if !tombstone {
			// The Actor owner may still register this binding: leave no orphan.
			b.sendTombstone(s, fence, gen)
			b.drops.bindTimeouts.Add(1)
		}
		return fmt.Errorf("%w: %w", ErrTimeout, ctx.Err())
	}
}

func (b *Binder) sendTombstone(s *Session, fence actor.RouteFence, gen uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = b.actors.SendRecord(ctx, fence, bindRecord(b.oneWayCorrelation(), fence, s.rid, gen, true))
}

// oneWayBit marks the correlation of a 38 nobody waits for (a tombstone sent while the
// session goes): its terminal is expected and ignored, not counted as late.
const oneWayBit = 1 << 62

func (b *Binder) oneWayCorrelation() uint64 { return b.nextCorr.Add(1) | oneWayBit }

// forget drops a binding generation from the push index.
func (b *Binder) forget(gen uint64) {
	b.mu.Lock()
	delete(b.byGen, gen)
	b.mu.Unlock()
}

// onReply completes a pending 38 with its terminal 20.
func (b *Binder) onReply(from mesh.NodeID, rec *wire.Record) {
	r, ok := rec.Body.(*wire.Reply)
	if !ok {
		return
	}
	if r.Correlation&oneWayBit != 0 {
		return
	}
	b.mu.Lock()
	op, ok := b.pending[r.Correlation]
	moved := ok && from != op.fence.Node
	if moved && !followedTerminal(r, op) {
		// A terminal from another node than the one asked is not this bind's: it
		// neither completes nor fails it.
		b.mu.Unlock()
		b.rejected(&b.drops.lateReply, from, "bind terminal from a node that was not asked")
		return
	}
	if ok {
		delete(b.pending, r.Correlation)
	}
	b.mu.Unlock()
	if !ok {
		b.drops.lateReply.Add(1)
		return
	}
	if op.tombstone {
		op.done <- nil
		return
	}
	if r.Result != wire.ResultOK {
		op.done <- bindFailure(r, op.fence)
		return
	}
	if r.BindOK == nil || r.BindOK.BindingGeneration != op.gen {
		// The Actor owner may hold a binding the caller will never see: retire it.
		b.sendTombstone(op.s, op.fence, op.gen)
		op.done <- fault.Errorf(fault.Unavailable, "binding: bind terminal without this binding generation")
		return
	}
	fence := op.fence
	fence.AuthorityOwnerGeneration = r.BindOK.AuthorityOwnerGeneration
	if moved {
		// The Actor moved and Message Follow took the bind to it: the binding routes to
		// where it was admitted (an activation's owner lease is its node's generation).
		fence.Node = from
		fence.OwnerLeaseGeneration = from.Generation
	}
	// Linearisation point B: publish the binding (session table and push index) in
	// one step, before the caller can observe success.
	s := op.s
	s.mu.Lock()
	if s.closing || s.closed {
		s.mu.Unlock()
		b.sendTombstone(s, fence, op.gen)
		op.done <- ErrSessionClosing
		return
	}
	prev := s.setBound(&bound{actorID: fence.ID, fence: fence, gen: op.gen})
	b.mu.Lock()
	if prev != nil {
		delete(b.byGen, prev.gen)
	}
	b.byGen[op.gen] = s
	b.mu.Unlock()
	s.mu.Unlock()
	if prev != nil {
		// The session moved to a new activation of the same ActorId: retire the old.
		b.sendTombstone(s, prev.fence, prev.gen)
	}
	op.done <- nil
}

// followedTerminal reports whether a terminal from another node than the one asked
// can be this 38's: Message Follow forwards a 38 that reaches an Actor's former node to
// its new one, which answers (digest §7.5). An ok terminal is taken that way only if,
// for a bind, it echoes this bind's binding generation; a failure (the Actor is not
// there either) is taken as it is: it only fails the bind, which its caller may look
// up and try again, instead of leaving it to time out.
func followedTerminal(r *wire.Reply, op *pendingOp) bool {
	if r.Result != wire.ResultOK {
		return true
	}
	return op.tombstone || (r.BindOK != nil && r.BindOK.BindingGeneration == op.gen)
}

func bindFailure(r *wire.Reply, f actor.RouteFence) error {
	switch {
	case r.Result == wire.ResultInvalidState:
		return fault.Errorf(fault.InvalidOperation, "binding: bind of %s: the Actor's ObjectGeneration is no longer %d", f.ID, f.ObjectGeneration)
	case r.Failure == wire.FailureActorRouteNotFound:
		return fault.Errorf(fault.NotFound, "binding: bind of %s: no activation at %s", f.ID, f.Node)
	case r.Failure == wire.FailureActorLocationStale:
		return fmt.Errorf("%w: %s at %s", ErrLocationStale, f.ID, f.Node)
	}
	return fault.Errorf(fault.Unavailable, "binding: bind of %s refused: %s / %s", f.ID, r.Result, r.Failure)
}

// onPush handles a 36 from an Actor owner: accepted only when the source Actor's
// object generation, node generation, authority owner generation and the expected
// binding generation are all current (§7.7). A rejected push is counted and logged.
func (b *Binder) onPush(from mesh.NodeID, rec *wire.Record) {
	body, ok := rec.Body.(*wire.BoundSessionSend)
	if !ok || rec.Payload == nil {
		return
	}
	b.mu.Lock()
	s := b.byGen[body.ExpectedBindingGeneration]
	b.mu.Unlock()
	if s == nil {
		if g := body.ExpectedBindingGeneration; g != 0 && g <= b.nextGen.Load() {
			// A binding of this lifecycle that ended (its session closed, unbound, was
			// replaced) while the Actor's pushes were on their way: expected, counted.
			b.drops.stalePush.Add(1)
			b.node.Records().DropExpected(from, "push for a binding that ended")
			return
		}
		b.rejected(&b.drops.stalePush, from, "push for a binding generation that is not current")
		return
	}
	bd, ok := s.current(body.ExpectedBindingGeneration)
	src := actor.FenceFromWire(body.Actor)
	p := rec.Payload
	if !ok || bd.actorID != src.ID || !pushFrom(bd.fence, src, from) {
		// A reply the Actor sent from its previous location, before it moved, to a
		// Request relayed there before the seal, may arrive after the commit switched
		// the route: it still completes that Request. Nothing else from a previous
		// location is accepted.
		if !ok || bd.actorID != src.ID || p.PacketName != replyPacketName || bd.prevFence.Node.IsZero() ||
			!pushFrom(bd.prevFence, src, from) {
			b.rejected(&b.drops.stalePush, from, "push with a stale Actor fence")
			return
		}
	}
	actorID := bd.actorID
	switch p.PacketName {
	case replyPacketName:
		seq, kind, payload, tc, err := decodeReply(p.Data)
		if err != nil {
			b.rejected(&b.drops.stalePush, from, "malformed relayed reply")
			return
		}
		s.credited(body.ExpectedBindingGeneration, seq)
		pkt := s.takeRequest(seq, body.ExpectedBindingGeneration)
		if pkt == nil {
			b.drops.lateReply.Add(1)
			return
		}
		if tc.Parent != "" && b.tracer != nil {
			defer b.finishReplySpan(pkt, tc, kind).End()
		}
		// NonBlocking: this runs on the node's record receiver, or on the reader of
		// the peer connection the record came by (Records.HandleInline), which serve
		// every session; a client that does not read must not stall the others.
		if kind == swire.KindError {
			ep, err := codec.DecodeErrorPayload(payload)
			if err != nil {
				_ = pkt.ReplyError(fault.InternalFailure.Code(), "malformed error from the Actor", session.NonBlocking())
				return
			}
			_ = pkt.ReplyError(ep.Code, ep.Message, session.NonBlocking())
			return
		}
		_ = pkt.Reply(codecOf(b.opts.Codecs, p.ContentType), payload, session.NonBlocking())
	case creditPacketName:
		if len(p.Data) != 8 {
			b.rejected(&b.drops.stalePush, from, "malformed credit")
			return
		}
		s.credited(body.ExpectedBindingGeneration, binary.BigEndian.Uint64(p.Data))
	case unboundPacketName:
		// The Actor stopped: this binding ended with it.
		s.dropBinding(actorID, bd.gen, endActorStopped, "")
		b.forget(bd.gen)
		s.failRequests(bd.gen, "the bound Actor stopped")
	case closePacketName:
		reason, diag, err := decodeClose(p.Data)
		if err != nil {
			b.rejected(&b.drops.stalePush, from, "malformed close request")
			return
		}
		_ = s.peer.Close(reason, diag)
	default:
		if swire.IsReservedName(p.PacketName) {
			if fn := b.control(p.PacketName); fn != nil {
				fn(s, p.Data)
			} else {
				b.rejected(&b.drops.stalePush, from, "push with an unknown control name")
			}
			return
		}
		if err := s.peer.Send(context.Background(), p.PacketName, codecOf(b.opts.Codecs, p.ContentType), p.Data, session.NonBlocking()); err != nil {
			b.log.Debug("binding: push not delivered", "actor", actorID, "err", err)
		}
	}
}

// pushFrom reports whether a 36 whose source Actor fence is src, sent by node from, is
// from the activation at route: same object generation, node and authority owner
// generation (§7.7).
func pushFrom(route, src actor.RouteFence, from mesh.NodeID) bool {
	return route.ObjectGeneration == src.ObjectGeneration && route.Node == from && src.Node == from &&
		route.AuthorityOwnerGeneration == src.AuthorityOwnerGeneration
}

// onReplaced handles a 51: the Actor owner installed another session's binding for an
// Actor this node's session was bound to. Every retired field must match exactly.
func (b *Binder) onReplaced(from mesh.NodeID, rec *wire.Record) {
	body, ok := rec.Body.(*wire.BoundSessionReplaced)
	if !ok {
		return
	}
	self := b.node.ID()
	rs := body.RetiredSession
	authority := actor.FenceFromWire(body.ActorAuthority)
	if authority.Node != from || rs.OwnerNodeRID != self.RID || rs.OwnerNodeGeneration != self.Generation ||
		rs.OwnerID != b.opts.OwnerID || rs.OwnerLeaseGeneration != self.Generation {
		b.rejected(&b.drops.staleReplaced, from, "replacement notice for another session owner")
		return
	}
	b.mu.Lock()
	s := b.byGen[rs.BindingGeneration]
	b.mu.Unlock()
	if s == nil || s.rid != rs.SessionRID {
		b.rejected(&b.drops.staleReplaced, from, "replacement notice for a binding that is not current")
		return
	}
	bd, ok := s.current(rs.BindingGeneration)
	actorID := bd.actorID
	if !ok || actorID != authority.ID || bd.fence.Node != from {
		b.rejected(&b.drops.staleReplaced, from, "replacement notice with a stale Actor authority")
		return
	}
	s.replaced(actorID, rs.BindingGeneration)
}

// replaced retires the binding (no tombstone: the Actor already holds the new one),
// enters closing, runs the replaced callback as a session turn, and closes the session
// ReplacementCloseDelay after the callback's terminal, or at the callback timeout.
func (s *Session) replaced(actorID string, gen uint64) {
	s.mu.Lock()
	s.removeBound(actorID, gen)
	already := s.closing
	s.closing = true
	fn := s.onReplaced
	s.mu.Unlock()
	s.b.forget(gen)
	s.failRequests(gen, "the binding was replaced")
	if already {
		return
	}
	s.peer.RejectInbound()
	peer := s.peer
	timeout := s.b.opts.ReplacementCallbackTimeout
	done := make(chan struct{})
	force := time.AfterFunc(timeout, func() {
		_ = peer.Close(swire.CloseServerDrain, swire.DiagnosticReplaced+" by another session; replacement callback timed out")
	})
	err := peer.Submit(func(ctx context.Context) {
		defer close(done)
		if fn != nil {
			fn(ctx, actorID)
		}
	})
	if err != nil {
		force.Stop()
		return
	}
	go func() {
		// Owned by the session: it ends when the callback ends or the session closes.
		select {
		case <-done:
		case <-peer.Done():
			force.Stop()
			return
		}
		if !force.Stop() {
			return
		}
		// A non-blocking timer, revalidated when it fires: close exactly this session.
		time.AfterFunc(ReplacementCloseDelay, func() {
			s.mu.Lock()
			still := s.closing && !s.closed
			s.mu.Unlock()
			if still {
				_ = peer.Close(swire.CloseServerDrain, swire.DiagnosticReplaced+" by another session")
			}
		})
	}()
}

// onMembership fails at once what waits on a node that left or failed: its pending
// binds and the relayed Requests to Actors on it get unavailable, and bindings to its
// Actors end (the Actors are gone with it; a new bind reaches a new activation). Without
// this they would wait for the relay timeout.
func (b *Binder) onMembership(ev mesh.MemberEvent) {
	if ev.Type != mesh.EventFailed && ev.Type != mesh.EventLeft {
		return
	}
	gone := ev.Member.ID
	b.retireOwnedBy(gone)
	b.mu.Lock()
	var ops []*pendingOp
	for corr, op := range b.pending {
		if op.fence.Node == gone {
			ops = append(ops, op)
			delete(b.pending, corr)
		}
	}
	sessions := make([]*Session, 0, len(b.sessions))
	for _, s := range b.sessions {
		sessions = append(sessions, s)
	}
	b.mu.Unlock()
	for _, op := range ops {
		op.done <- fault.Errorf(fault.Unavailable, "binding: node %s %s", gone, ev.Type)
	}
	why := "the node of the bound Actor (" + gone.RID + ") " + ev.Type.String()
	failed := 0
	for _, s := range sessions {
		s.mu.Lock()
		var gens []uint64
		for id, bd := range s.binds {
			if bd.fence.Node == gone {
				gens = append(gens, bd.gen)
				s.endBound(id, bd.gen, endNodeFailed, why)
			}
		}
		pkts := s.takeRequests(func(pr pendingRequest) bool { return pr.node == gone })
		s.mu.Unlock()
		for _, g := range gens {
			b.forget(g)
		}
		failPackets(pkts, fault.Unavailable.Code(), why)
		failed += len(pkts)
	}
	b.drops.peerFailures.Add(int64(failed + len(ops)))
	if failed+len(ops) > 0 {
		b.log.Info("binding: failed work waiting on a departed node", "node", gone.String(), "event", ev.Type.String(),
			"relayed_requests", failed, "binds", len(ops))
	}
}
