package binding

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/codes"

	"github.com/meshnode/meshnode/actor"
	"github.com/meshnode/meshnode/fault"
	"github.com/meshnode/meshnode/internal/traceprop"
	"github.com/meshnode/meshnode/mesh"
	"github.com/meshnode/meshnode/mesh/wire"
	"github.com/meshnode/meshnode/session/codec"
	swire "github.com/meshnode/meshnode/session/wire"
)

// actorBinding is the Actor owner's current binding of one activation.
type actorBinding struct {
	owner      mesh.NodeID // session owner node lifecycle
	sessionRid string
	gen        uint64

	// The relay window (window.go): the last relay the Actor took, how many it took
	// since the session owner was last credited, whether a credit is scheduled.
	consumed    uint64
	owed        int
	creditArmed bool

	// arriving is set on a binding restored by a relocation until its commit (44) is
	// sent (move.go): what the Actor sends its session waits for the commit.
	arriving *arrival
}

// stateKey is the attachment key of the binding state on an activation.
type stateKey struct{}

type actorState struct {
	b       *Binder
	current *actorBinding

	// Relocation (move.go): on the source, the binding sealed for the move; on the
	// target, the restored binding until its commit is sent.
	departing *departure
	arrived   *actorBinding
}

func state(b *Binder, t *actor.Turn) *actorState {
	if st, ok := t.Attachment(stateKey{}).(*actorState); ok {
		return st
	}
	st := &actorState{b: b}
	t.SetAttachment(stateKey{}, st)
	return st
}

// reply sends a bind terminal (20). From an Actor's turn (wait) it waits for room
// toward the session owner, at most mesh.DefaultSendWait; from a handler that serves
// every Actor of the node it never waits.
func reply(wait bool, b *Binder, to mesh.NodeID, corr uint64, result wire.TerminalResult, failure wire.FailureCode, ok *wire.BindOK) {
	r := &wire.Record{Body: &wire.Reply{Correlation: corr, Result: result, Failure: failure, BindOK: ok}}
	var err error
	if wait {
		err = b.node.Records().Send(context.Background(), to, r)
	} else {
		err = b.node.Records().TrySend(to, r)
	}
	if err != nil {
		b.log.Debug("binding: terminal not sent", "to", to.String(), "err", err)
	}
}

// onBind runs in the Actor's turn for a 38 addressed to it. The bind is admitted on
// exactly three inputs (object generation, node generation, authority owner
// generation); the binding is registered before the terminal is sent (linearisation
// point A); the previous session owner gets one 51, after the terminal.
func (b *Binder) onBind(t *actor.Turn, from mesh.NodeID, rec *wire.Record) {
	body, ok := rec.Body.(*wire.BoundSessionBind)
	if !ok {
		return
	}
	self := t.Fence()
	want := actor.FenceFromWire(body.Actor)
	st := state(b, t)
	if body.Binding.State == wire.BindingTombstone {
		cur := st.current
		if cur != nil && cur.owner == from && cur.sessionRid == body.SessionRID && cur.gen == body.Binding.Generation {
			b.endCurrent(t, st)
		}
		// A late tombstone for a replaced identity changes nothing, and says so.
		reply(true, b, from, body.Correlation, wire.ResultOK, wire.FailureNone, nil)
		return
	}
	switch {
	case want.ObjectGeneration != self.ObjectGeneration:
		reply(true, b, from, body.Correlation, wire.ResultInvalidState, wire.FailureNone, nil)
		return
	case want.AuthorityOwnerGeneration != self.AuthorityOwnerGeneration && !followed(t, want):
		reply(true, b, from, body.Correlation, wire.ResultConflict, wire.FailureActorLocationStale, nil)
		return
	}
	next := &actorBinding{owner: from, sessionRid: body.SessionRID, gen: body.Binding.Generation}
	prev := st.current
	st.current = next // point A
	t.KeepActive(true)
	reply(true, b, from, body.Correlation, wire.ResultOK, wire.FailureNone,
		&wire.BindOK{BindingGeneration: next.gen, AuthorityOwnerGeneration: self.AuthorityOwnerGeneration})
	t.Deliver(&actor.SessionBound{Session: actor.SessionID{RID: next.sessionRid, BindingGeneration: next.gen}})
	if prev != nil && !(prev.owner == next.owner && prev.sessionRid == next.sessionRid) {
		// A binding that arrived with a relocation not committed yet: its session owner
		// still routes to the source and would refuse the 51 from here; it follows the
		// commit.
		if !deferUntilCommitted(prev, func(t *actor.Turn) { b.notifyReplaced(t.Fence(), prev) }) {
			b.notifyReplaced(self, prev)
		}
	}
}

// endCurrent ends the activation's current binding as its tombstone does: the notice
// runs while the binding is still current, so it may push a last word to a session
// that stays connected (NotifyDisconnected); then the binding ends (unless the notice
// bound another).
func (b *Binder) endCurrent(t *actor.Turn, st *actorState) {
	cur := st.current
	if cur == nil {
		return
	}
	t.Deliver(&actor.SessionEnded{Session: actor.SessionID{RID: cur.sessionRid, BindingGeneration: cur.gen}})
	if st.current == cur {
		st.current = nil
		t.KeepActive(false)
	}
	if st.arrived == cur {
		st.arrived = nil // no commit toward a session that is gone
	}
}

// retireOwnedBy ends, on the Actor-owner side, every binding held by a session of the
// departed node lifecycle gone, which will never send their tombstones: a seal waiting
// for it completes at once, and each local activation bound from it ends its binding in
// its next turn, as a disconnect would.
func (b *Binder) retireOwnedBy(gone mesh.NodeID) {
	b.mu.Lock()
	for _, w := range b.sealWaits {
		if w.owner == gone && !w.sealed {
			w.sealed, w.gone = true, true
			close(w.done)
		}
	}
	b.mu.Unlock()
	b.actors.EachActivation(func(t *actor.Turn) {
		if st, ok := t.Attachment(stateKey{}).(*actorState); ok && st.current != nil && st.current.owner == gone {
			b.endCurrent(t, st)
		}
	})
}

// followed reports whether a bind naming want reached this activation through Message
// Follow: want is exactly where the Actor was before it moved here. The bind is then
// admitted here, once (digest §7.5), and its terminal tells the session owner the new
// route (onReply).
func followed(t *actor.Turn, want actor.RouteFence) bool {
	former, ok := t.Former()
	return ok && former.Ref == want.Ref && former.Node == want.Node && former.AuthorityOwnerGeneration == want.AuthorityOwnerGeneration
}

// notifyReplaced sends one 51 to the previous session owner: one-way, no retry.
func (b *Binder) notifyReplaced(self actor.RouteFence, prev *actorBinding) {
	rec := &wire.Record{Body: &wire.BoundSessionReplaced{
		ActorAuthority: actor.FenceToWire(self),
		RetiredSession: b.sessionFence(prev),
	}}
	if err := b.node.Records().Send(context.Background(), prev.owner, rec); err != nil {
		b.log.Debug("binding: replacement notice not sent", "to", prev.owner.String(), "err", err)
	}
}

// onRelay runs in the Actor's turn for a 24 with the bound-session tail: delivered to
// the Actor only if it comes from the current binding.
func (b *Binder) onRelay(t *actor.Turn, from mesh.NodeID, rec *wire.Record) {
	body, ok := rec.Body.(*wire.ActorSend)
	if !ok || body.BoundSession == nil || rec.Payload == nil {
		return
	}
	tail := body.BoundSession
	cur := state(b, t).current
	if cur == nil || cur.owner != from || cur.sessionRid != tail.SourceSessionRID || cur.gen != tail.SourceBindingGeneration {
		b.rejected(&b.drops.staleRelay, from, "relay from a binding that is not current")
		return
	}
	kind, _ := rec.Metadata.Get(kindKey)
	b.consumed(t, cur, tail.SourceSessionSequence)
	request := kind == "request"
	seq := tail.SourceSessionSequence
	if b.tracer != nil {
		if f, ok := relayTrace(rec.Metadata); ok {
			b.deliverTraced(t, cur, rec, f, request, tail)
			return
		}
	}
	var replyFn func(k swire.Kind, c swire.Codec, payload []byte) error
	if request {
		replyFn = func(k swire.Kind, c swire.Codec, payload []byte) error {
			return b.replyRelayed(t, cur, seq, k, c, payload, nil)
		}
	}
	pkt := actor.NewSessionPacket(rec.Payload.PacketName, codecOf(b.opts.Codecs, rec.Payload.ContentType), rec.Payload.Data,
		request, actor.SessionID{RID: tail.SourceSessionRID, BindingGeneration: tail.SourceBindingGeneration}, seq,
		b.opts.Codecs, replyFn)
	pkt.Metadata = packetMetadata(rec.Metadata)
	t.Deliver(pkt)
}

// deliverTraced is onRelay's delivery for a relay that carries a trace context: the
// Actor's Receive runs in the turn's span, with the span in its Context (a services
// call from there joins the trace), and the reply carries the span's context back.
func (b *Binder) deliverTraced(t *actor.Turn, cur *actorBinding, rec *wire.Record, f traceprop.Fields, request bool, tail *wire.BoundSessionTail) {
	ctx, span := b.startTurnSpan(t, f, rec.Payload.PacketName, request, tail)
	defer span.End()
	seq := tail.SourceSessionSequence
	var replyFn func(k swire.Kind, c swire.Codec, payload []byte) error
	if request {
		back := traceprop.Inject(ctx)
		replyFn = func(k swire.Kind, c swire.Codec, payload []byte) error {
			if k == swire.KindError {
				span.SetStatus(codes.Error, "error reply")
			}
			return b.replyRelayed(t, cur, seq, k, c, payload, &back)
		}
	}
	pkt := actor.NewSessionPacket(rec.Payload.PacketName, codecOf(b.opts.Codecs, rec.Payload.ContentType), rec.Payload.Data,
		request, actor.SessionID{RID: tail.SourceSessionRID, BindingGeneration: tail.SourceBindingGeneration}, seq,
		b.opts.Codecs, replyFn)
	pkt.Metadata = packetMetadata(rec.Metadata)
	t.DeliverContext(ctx, pkt)
}

// The Actor-facing surface: the binding layer is the Actor host's session bridge
// (actor.SessionBridge), so Actors push, close and answer through their Context.

// bridge adapts the Binder to actor.SessionBridge.
type bridge struct{ b *Binder }

func currentOf(t *actor.Turn) *actorBinding {
	if st, ok := t.Attachment(stateKey{}).(*actorState); ok {
		return st.current
	}
	return nil
}

// IsBound reports whether the Actor has a current session binding.
func (br bridge) IsBound(t *actor.Turn) bool { return currentOf(t) != nil }

// Push sends a Send frame named name to the Actor's bound session (record 36).
// Without a binding it fails with ErrNotBound.
func (br bridge) Push(t *actor.Turn, name string, c swire.Codec, payload []byte) error {
	if swire.IsReservedName(name) {
		return fault.Errorf(fault.InvalidOperation, "binding: push name %q is reserved", name)
	}
	cur := currentOf(t)
	if cur == nil {
		return ErrNotBound
	}
	return br.b.send36(t, cur, cur.gen, name, contentType(br.b.opts.Codecs, c), payload)
}

// SendControl sends a control packet named name (in the "$zlink." control namespace, handled
// by the session owner's HandleControl) with data to the Actor's bound session
// (record 36), from a turn of the Actor. Without a binding it fails with ErrNotBound.
func (b *Binder) SendControl(t *actor.Turn, name string, data []byte) error {
	if !swire.IsReservedName(name) {
		return fault.Errorf(fault.InvalidOperation, "binding: control name %q is not in the control namespace", name)
	}
	cur := currentOf(t)
	if cur == nil {
		return ErrNotBound
	}
	return b.send36(t, cur, cur.gen, name, codec.ContentTypeRaw, data)
}

// HandleControl makes fn handle the control packets named name that the Actors of
// bound sessions send with SendControl (the topic layer subscribes a bound session
// this way). fn runs on the node's record receiver (or a peer connection's reader)
// and must not block.
func (b *Binder) HandleControl(name string, fn func(s *Session, data []byte)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.controls == nil {
		b.controls = map[string]func(*Session, []byte){}
	}
	b.controls[name] = fn
}

func (b *Binder) control(name string) func(*Session, []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.controls[name]
}

// CloseSession asks the bound session's owner to close the session with reason.
func (br bridge) CloseSession(t *actor.Turn, reason swire.CloseReason, diagnostic string) error {
	cur := currentOf(t)
	if cur == nil {
		return ErrNotBound
	}
	return br.b.send36(t, cur, cur.gen, closePacketName, codec.ContentTypeRaw, encodeClose(reason, diagnostic))
}

// replyRelayed answers a relayed Request: its Response or Error goes back (record 36)
// to the binding that relayed it, which completes the client's STREAM request exactly
// once. If that binding was replaced meanwhile, the reply is dropped there, never
// delivered to the new session.
//
// tc, when the relay carried a trace context, is the Actor turn's: it goes back in the
// reply envelope (encodeTracedReply).
func (b *Binder) replyRelayed(t *actor.Turn, relayedOn *actorBinding, seq uint64, kind swire.Kind, c swire.Codec, payload []byte, tc *traceprop.Fields) error {
	if currentOf(t) != relayedOn {
		// The relaying binding is gone: the reply has no session to reach.
		return ErrNotBound
	}
	relayedOn.repliedUpTo(seq)
	var data []byte
	if tc != nil {
		data = encodeTracedReply(seq, kind, *tc, payload)
	} else {
		data = encodeReply(seq, kind, payload)
	}
	err := b.send36(t, relayedOn, relayedOn.gen, replyPacketName, contentType(b.opts.Codecs, c), data)
	if errors.Is(err, mesh.ErrRecordTooLarge) {
		// The client gets why at once instead of waiting out its relay timeout.
		err = fault.Errorf(fault.CapacityExceeded, "binding: reply of %d bytes: %w", len(payload), err)
		data = encodeReply(seq, swire.KindError, codec.EncodeErrorPayload(fault.Code(err), err.Error()))
		if serr := b.send36(t, relayedOn, relayedOn.gen, replyPacketName, codec.ContentTypeJSON, data); serr != nil {
			b.log.Debug("binding: error reply not sent", "to", relayedOn.owner.String(), "err", serr)
		}
	}
	return err
}

func (b *Binder) send36(t *actor.Turn, cur *actorBinding, gen uint64, name, ct string, data []byte) error {
	if cur.arriving != nil {
		// Restored by a relocation whose commit is not sent yet: the session owner would
		// judge this against the source's fence and drop it. It follows the commit, in
		// order, with the fence the activation has then.
		data = cloneData(data)
		deferUntilCommitted(cur, func(t *actor.Turn) {
			if err := b.send36(t, cur, gen, name, ct, data); err != nil {
				b.log.Debug("binding: push held for the relocation commit not sent", "to", cur.owner.String(), "err", err)
			}
		})
		return nil
	}
	rec := &wire.Record{
		Body:    &wire.BoundSessionSend{Actor: actor.FenceToWire(t.Fence()), ExpectedBindingGeneration: gen},
		Payload: &wire.Payload{PacketName: name, ContentType: ct, Data: data},
	}
	return b.node.Records().Send(t.Context(), cur.owner, rec)
}

// onMissingActor answers a 38 addressed to an activation that no longer exists and has
// no successor on this node: a bind is "not found", a tombstone has nothing to remove.
func (b *Binder) onMissingActor(from mesh.NodeID, rec *wire.Record) {
	switch body := rec.Body.(type) {
	case *wire.BoundSessionBind:
		if body.Binding.State == wire.BindingTombstone {
			reply(false, b, from, body.Correlation, wire.ResultOK, wire.FailureNone, nil)
			return
		}
		reply(false, b, from, body.Correlation, wire.ResultNotFound, wire.FailureActorRouteNotFound, nil)
	case *wire.ActorSend:
		// A correct peer sends this whenever a relay crosses the Actor's end (its node
		// shutting down, an application's Deactivate): counted and answered, logged at
		// debug level only.
		b.drops.staleRelay.Add(1)
		b.node.Records().DropExpected(from, "relay to an Actor that is not active")
		// A relayed Request would otherwise wait for a reply that cannot come.
		b.failRelay(from, rec, fault.NotFound.Code(), "the bound Actor is no longer active")
	}
}

// onRejected answers a relayed Request that the Actor's full mailbox refused; a relayed
// Send is dropped (counted by the Actor host).
func (b *Binder) onRejected(from mesh.NodeID, rec *wire.Record) {
	b.failRelay(from, rec, fault.CapacityExceeded.Code(), "the bound Actor's mailbox is full")
}

// failRelay answers a relayed Request (a 24 with the bound-session tail) that no Actor
// will see, with an Error on the binding it was relayed on (the session owner judges
// the reply against that binding's fence, which is the one the 24 carried). It never
// waits: it runs where every Actor's records pass.
func (b *Binder) failRelay(from mesh.NodeID, rec *wire.Record, code, message string) {
	body, ok := rec.Body.(*wire.ActorSend)
	if !ok || body.BoundSession == nil {
		return
	}
	if kind, _ := rec.Metadata.Get(kindKey); kind != "request" {
		return
	}
	tail := body.BoundSession
	r := &wire.Record{
		Body: &wire.BoundSessionSend{Actor: body.TargetActor, ExpectedBindingGeneration: tail.SourceBindingGeneration},
		Payload: &wire.Payload{PacketName: replyPacketName, ContentType: codec.ContentTypeJSON,
			Data: encodeReply(tail.SourceSessionSequence, swire.KindError, codec.EncodeErrorPayload(code, message))},
	}
	var err error
	if from == b.node.ID() {
		// Same node: the record receiver takes it in-process.
		err = b.node.Records().Send(context.Background(), from, r)
	} else {
		err = b.node.Records().TrySend(from, r)
	}
	if err != nil {
		b.log.Debug("binding: relay failure reply not sent", "to", from.String(), "code", code, "err", err)
	}
}

// onActorStop runs in a stopping activation's last turn: a current binding ends with
// the Actor, and its session owner is told (36 $zlink.unbound) so the session drops
// the binding and fails what waits on it, instead of relaying into the void. An
// activation that moved away says nothing: its binding lives on at the target.
func (b *Binder) onActorStop(t *actor.Turn) {
	st, ok := t.Attachment(stateKey{}).(*actorState)
	if !ok || st.current == nil {
		return
	}
	cur := st.current
	st.current = nil
	st.departing, st.arrived = nil, nil
	if t.MovedAway() || cur.arriving != nil {
		// Moved: the target carries the binding on. Restored here but never committed:
		// the session owner never routed here, and its seal timeout cleans up there.
		return
	}
	rec := &wire.Record{
		Body:    &wire.BoundSessionSend{Actor: actor.FenceToWire(t.Fence()), ExpectedBindingGeneration: cur.gen},
		Payload: &wire.Payload{PacketName: unboundPacketName, ContentType: codec.ContentTypeRaw},
	}
	if err := b.node.Records().Send(context.Background(), cur.owner, rec); err != nil {
		b.log.Debug("binding: unbound notice not sent", "to", cur.owner.String(), "err", err)
	}
}
