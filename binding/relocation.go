package binding

import (
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/meshnode/meshnode/actor"
	"github.com/meshnode/meshnode/fault"
	"github.com/meshnode/meshnode/mesh"
	"github.com/meshnode/meshnode/mesh/wire"
	"github.com/meshnode/meshnode/session"
	swire "github.com/meshnode/meshnode/session/wire"
)

// The session owner's side of an Actor relocation (digest §7.13, the zlink binding
// specification §8). The session stays where it is; only the route of the moving
// Actor's binding changes, once:
//
//   - 42 (the source, before it captures the Actor): the binding is sealed. Relays to
//     that Actor are held here, in order, instead of being sent; the seal timeout starts;
//     43 answers the source. Other bindings of the session are not affected.
//   - 44 commit (the target, once it serves the Actor): in one span under the session's
//     lock the route switches to the target, and the held relays go out to it, in order,
//     before anything relayed later.
//   - 44 abort (the source, when the move failed before the target was ready): the seal
//     is released and the held relays go to the source route, which did not change.
//   - No 44 within SessionRelocationSealTimeout: the session is closed and the held
//     relays are never delivered. Timeout and 44 are serialized by the session's lock;
//     the first one wins, and a 44 after it is a late route update (a Warning).
//
// relocationBarrier (barrier.go) makes every judgement; this file acts on it.

// DefaultSessionRelocationSealTimeout bounds how long a binding stays sealed for a
// relocation without its route update (digest §7.13).
const DefaultSessionRelocationSealTimeout = 3 * time.Second

// relocationHold is what a sealed binding holds back, and the timer of its seal.
type relocationHold struct {
	id    wire.RelocationID
	held  []heldRelay // in session sequence order
	timer *time.Timer // the seal timeout; nil once the route update came

	// flushing: the route update came and the held relays go out. The hold stays on
	// the binding until the list is empty, so that a relay made meanwhile queues
	// behind the held ones instead of overtaking them.
	flushing bool
	// running: a flusher goroutine is sending. Only one ever runs per hold, so a seal
	// that lands while an earlier move's relays are still going out cannot reorder
	// them.
	running bool

	// ack is the 43 of this seal, held back while relays that read the route before
	// the seal are still on their way into the transport (bound.sending): sent after
	// them, on the same ordered link, it cannot overtake them, so the source receives
	// them before it captures the Actor and hands them over in order. Sent by whoever
	// hands the last of them over (Session.sent).
	ack   *wire.Record
	ackTo mesh.NodeID
}

// heldRelay is one relay held by a seal: counted in the session's window and, for a
// Request, in its pending requests, like a sent one.
type heldRelay struct {
	seq uint64
	pkt *session.Packet
}

// dropHold releases a binding's hold without sending what it held: the seal timed
// out, or the binding or its session ended. Pending Requests are the caller's to fail
// (or are dropped with the session). s.mu is held.
func (s *Session) dropHold(bd *bound) {
	h := bd.hold
	if h == nil {
		return
	}
	if h.timer != nil {
		h.timer.Stop()
		h.timer = nil
	}
	h.held = nil
	bd.hold = nil
}

// ownSession returns the session a relocation record names, if this node is the
// session owner it names (node lifecycle, owner id, lease) and the session is live.
// mine reports whether the record names this node's lifecycle as the session owner, and
// a well-formed session RID, whether or not the session is still there.
func (b *Binder) ownSession(f wire.SessionFence) (s *Session, mine bool) {
	self := b.node.ID()
	if f.OwnerNodeRID != self.RID || f.OwnerNodeGeneration != self.Generation || f.OwnerID != b.opts.OwnerID ||
		f.OwnerLeaseGeneration != self.Generation {
		return nil, false
	}
	id, ok := parseSessionRID(f.SessionRID)
	if !ok {
		return nil, false
	}
	b.mu.Lock()
	s = b.sessions[id]
	b.mu.Unlock()
	if s == nil || s.rid != f.SessionRID {
		return nil, true
	}
	return s, true
}

// bindPending reports whether a bind of binding generation gen is still waiting for
// its terminal here.
func (b *Binder) bindPending(gen uint64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, op := range b.pending {
		if op.gen == gen && !op.tombstone {
			return true
		}
	}
	return false
}

// parseSessionRID is the inverse of sessionRID.
func parseSessionRID(rid string) (session.RoutingID, bool) {
	digits, ok := strings.CutPrefix(rid, "s")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseUint(digits, 10, 32)
	if err != nil {
		return 0, false
	}
	return session.RoutingID(n), true
}

// onSeal handles a 42 from the relocation's source. It runs on the node's record
// receiver: it never waits (the 43 goes out with TrySend; a lost one is covered by the
// source's retransmission, answered by the duplicate rule).
func (b *Binder) onSeal(from mesh.NodeID, rec *wire.Record) {
	body, ok := rec.Body.(*wire.SessionRelocationSeal)
	if !ok {
		return
	}
	s, mine := b.ownSession(body.Session)
	if !mine {
		b.rejected(&b.drops.staleSeals, from, "relocation seal for a session this node does not own")
		return
	}
	sealed := &wire.Record{Body: &wire.SessionRelocationSealed{
		Relocation: body.Relocation, Coordinator: body.Coordinator, Actor: body.Actor, Session: body.Session,
	}}
	v, why, answer := verdictGone, "", true
	if s != nil {
		v, why, answer = s.seal(from, body, sealed)
	}
	switch v {
	case verdictApplied:
		b.drops.seals.Add(1)
	case verdictIdempotent:
	case verdictGone:
		// The session, or this binding of it, is gone (closed, unbound, replaced by a
		// rebind): there is nothing to hold, so the seal completes at once instead of
		// leaving the move to wait out its deadline. The binding's tombstone, already on
		// its way to the Actor, follows it to the target and ends it there. A 42 that
		// overtook the terminal of its own bind is not answered: its retransmission
		// finds the binding.
		if b.bindPending(body.Session.BindingGeneration) {
			return
		}
		b.drops.sealsGone.Add(1)
	case verdictProtocolError:
		b.relocationProtocolError(from, "seal", body.Relocation, s.rid, why)
		return
	default:
		b.rejected(&b.drops.staleSeals, from, "relocation seal: "+why)
		return
	}
	if answer {
		b.sendSealed(from, sealed)
	}
}

// sendSealed sends a 43 without waiting: a lost one is covered by the source's
// retransmitted 42, answered by the duplicate rule.
func (b *Binder) sendSealed(to mesh.NodeID, sealed *wire.Record) {
	if err := b.node.Records().TrySend(to, sealed); err != nil {
		b.log.Debug("binding: relocation sealed not sent", "to", to.String(), "err", err)
	}
}

// seal installs the seal of a 42 on the binding it names. answer: the 43 may go now;
// otherwise it is held until the relays on their way into the transport are in it.
func (s *Session) seal(from mesh.NodeID, body *wire.SessionRelocationSeal, sealed *wire.Record) (v verdict, why string, answer bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	bd := s.binds[body.Actor.Actor.ID]
	if s.closed || bd == nil || bd.gen != body.Session.BindingGeneration {
		return verdictGone, "", true
	}
	if bd.fence.ObjectGeneration != body.Actor.Actor.Generation {
		return verdictStale, "the binding it names is not current", false
	}
	v, why = bd.barrier.seal(body, bd.fence, from)
	switch v {
	case verdictApplied:
	case verdictIdempotent:
		// Held back still (a retransmission): the held 43 answers it.
		return v, why, bd.hold == nil || bd.hold.ack == nil
	default:
		return v, why, false
	}
	h := bd.hold
	if h == nil {
		h = &relocationHold{}
		bd.hold = h
	}
	// A hold still flushing an earlier move's relays stops sending: what is left of it
	// is held for this move, ahead of what comes next.
	h.flushing = false
	h.id = body.Relocation
	id := body.Relocation
	h.timer = time.AfterFunc(s.b.opts.SessionRelocationSealTimeout, func() { s.sealExpired(bd, id) })
	if bd.sending > 0 {
		h.ack, h.ackTo = sealed, from
		return v, "", false
	}
	return v, "", true
}

// sent notes that a relay of bd that read its route is in the transport (or failed);
// the last one sends the 43 a seal held back for it.
func (s *Session) sent(bd *bound) {
	s.mu.Lock()
	bd.sending--
	var ack *wire.Record
	var to mesh.NodeID
	if h := bd.hold; bd.sending == 0 && h != nil && h.ack != nil {
		ack, to = h.ack, h.ackTo
		h.ack = nil
	}
	s.mu.Unlock()
	if ack != nil {
		s.b.sendSealed(to, ack)
	}
}

// onRoute handles a 44: one-way, never answered, never retransmitted.
func (b *Binder) onRoute(from mesh.NodeID, rec *wire.Record) {
	body, ok := rec.Body.(*wire.SessionRelocationRoute)
	if !ok {
		return
	}
	s, mine := b.ownSession(body.Session)
	if s == nil {
		if mine {
			// The session is gone: closed by this very seal's timeout (its Warning was
			// logged then), or closed before the seal, which was answered at once
			// (onSeal): either way an expected end, counted, not a fault.
			b.drops.lateRoutes.Add(1)
			b.log.Debug("binding: route update for a session that is gone", "from", from.String(),
				"session", body.Session.SessionRID, "actor", body.Actor.ID)
			return
		}
		b.lateRoute(from, body, "the session is not live")
		return
	}
	v, why := s.route(from, body)
	switch v {
	case verdictApplied:
		if body.Route.Commit != nil {
			b.drops.commits.Add(1)
		} else {
			b.drops.aborts.Add(1)
		}
	case verdictAlreadyApplied:
		b.log.Debug("binding: duplicate relocation route update", "session", s.rid, "actor", body.Actor.ID)
	case verdictProtocolError:
		b.relocationProtocolError(from, "route update", body.Relocation, s.rid, why)
	default:
		b.lateRoute(from, body, why)
	}
}

// route applies a 44 to the binding it names: in one span under s.mu, a commit
// switches the route to the target (and the node its pending Requests wait on), and
// the held relays are set to go out, in order, before any later one.
func (s *Session) route(from mesh.NodeID, body *wire.SessionRelocationRoute) (verdict, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	bd := s.binds[body.Actor.ID]
	if s.closed || bd == nil || bd.gen != body.Session.BindingGeneration || bd.fence.ObjectGeneration != body.Actor.Generation {
		return verdictStale, "the binding it names is not current"
	}
	v, why := bd.barrier.route(body, from)
	if v != verdictApplied {
		return v, why
	}
	if c := body.Route.Commit; c != nil {
		bd.prevFence = bd.fence
		bd.fence = actor.RouteFence{
			Ref:                      bd.fence.Ref,
			Node:                     mesh.NodeID{RID: c.TargetNodeRID, Generation: c.TargetNodeGeneration},
			AuthorityOwnerGeneration: c.TargetAuthorityOwnerGeneration,
			OwnerLeaseGeneration:     c.TargetOwnerLeaseGeneration,
		}
		for seq, pr := range s.requests {
			if pr.gen == bd.gen {
				pr.node = bd.fence.Node // the target's failure now fails them
				s.requests[seq] = pr
			}
		}
		s.bindsChanged()
	}
	h := bd.hold
	if h == nil {
		return v, ""
	}
	if h.timer != nil {
		h.timer.Stop()
		h.timer = nil
	}
	h.ack = nil // an abort can overtake the 43 a seal still held back: it is moot now
	h.flushing = true
	switch {
	case h.running:
		// The flusher of an earlier move is still sending: it carries on, to this route.
	case len(h.held) == 0:
		bd.hold = nil
	default:
		h.running = true
		go s.flushHeld(bd, h)
	}
	return v, ""
}

// flushHeld sends a hold's relays to the binding's route, oldest first, one at a time,
// and releases the hold when it is empty. It is owned by the session: it ends when
// the list is empty, when the session closes (its sends end with the session's
// context), or when the binding ends or is sealed again. It runs off the record
// receiver because a send may wait for room toward the Actor's node.
func (s *Session) flushHeld(bd *bound, h *relocationHold) {
	for {
		s.mu.Lock()
		if s.closed || bd.hold != h || !h.flushing || s.byGen[bd.gen] != bd {
			h.running = false
			s.mu.Unlock()
			return
		}
		if len(h.held) == 0 {
			h.running = false
			bd.hold = nil // later relays go straight out, behind the last held one
			s.mu.Unlock()
			return
		}
		next := h.held[0]
		h.held[0] = heldRelay{}
		h.held = h.held[1:]
		fence, gen := bd.fence, bd.gen
		bd.sending++ // a seal landing now waits for this one before its 43
		s.mu.Unlock()
		err := s.send(fence, gen, next.seq, next.pkt)
		s.sent(bd)
		if err != nil && next.pkt.IsRequest() {
			// Nobody waits on Relay for a held packet: its Request is answered here.
			failPackets([]*session.Packet{next.pkt}, fault.Code(err), "the bound Actor could not be reached after its relocation")
		}
	}
}

// sealExpired runs at the seal timeout of relocation id: unless the route update came
// first, the session is closed and the held relays are dropped undelivered (digest
// §7.13: held messages are never delivered after the timeout).
func (s *Session) sealExpired(bd *bound, id wire.RelocationID) {
	s.mu.Lock()
	h := bd.hold
	if s.closed || s.byGen[bd.gen] != bd || h == nil || h.flushing || h.id != id || !bd.barrier.expire(id) {
		s.mu.Unlock()
		return
	}
	held := len(h.held)
	for _, r := range h.held {
		s.unrelayed(bd, r.seq)
		if _, ok := s.requests[r.seq]; ok {
			// Not answered: the close fails it at the client with the connection.
			s.removeRequest(r.seq)
		}
	}
	h.timer = nil
	s.dropHold(bd)
	// No relay may go to the source (it may be gone) or anywhere else from here.
	s.closing = true
	actorID := bd.actorID
	s.mu.Unlock()
	s.b.drops.sealTimeouts.Add(1)
	s.b.ratelog.Log(s.b.log, slog.LevelWarn, "relocation_seal_timeout",
		"binding: relocation seal timed out without a route update; closing the session",
		"session", s.rid, "actor", actorID, "held", held, "timeout", s.b.opts.SessionRelocationSealTimeout)
	// ServerDrain: the server ends the session and the client may reconnect and bind
	// again (the same reason as a replaced binding's close).
	_ = s.peer.Close(swire.CloseServerDrain, "the bound Actor's relocation did not complete")
}

// lateRoute counts and logs (rate-limited) a 44 that matches no installed seal: late
// (after the seal timeout), for another relocation, or for a session that is gone. It
// has no effect (digest §7.13).
func (b *Binder) lateRoute(from mesh.NodeID, body *wire.SessionRelocationRoute, why string) {
	b.drops.lateRoutes.Add(1)
	action := "commit"
	if body.Route.Abort != nil {
		action = "abort"
	}
	// The warning the zlink specification names; it is the only record of the drop
	// (no generic stale-record log besides it).
	b.ratelog.Log(b.log, slog.LevelWarn, "late_session_route_update", "binding: late_session_route_update",
		"from", from.String(), "session", body.Session.SessionRID, "actor", body.Actor.ID, "action", action,
		"relocation", relocationString(body.Relocation), "reason", why)
}

// relocationProtocolError counts and logs (rate-limited) a 42 or 44 that repeats a
// relocation with other content. Nothing changes.
func (b *Binder) relocationProtocolError(from mesh.NodeID, what string, id wire.RelocationID, sessionRid, why string) {
	b.drops.relocationProtocolErrors.Add(1)
	b.ratelog.Log(b.log, slog.LevelWarn, "relocation_protocol_error", "binding: relocation "+what+" refused as a protocol error",
		"from", from.String(), "session", sessionRid, "relocation", relocationString(id), "reason", why)
}

func relocationString(id wire.RelocationID) string {
	return strconv.FormatUint(id.High, 16) + ":" + strconv.FormatUint(id.Low, 16)
}
