package binding

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/meshnode/meshnode/actor"
	"github.com/meshnode/meshnode/fault"
	"github.com/meshnode/meshnode/mesh"
	"github.com/meshnode/meshnode/mesh/wire"
)

// The Actor owner's side of a relocation (actor.MoveHooks; digest §7.13, §8). The
// binding moves with the Actor: the source seals it at the session owner (42, answered
// by 43) before its state is captured, the target restores it and, once it serves the
// Actor, switches the session owner's route to itself (44 commit); a move that fails
// before the target was ready releases the seal back to the source (44 abort).

// sealRetransmit is how often the source sends its 42 again until the 43 comes
// (digest §6.6.6: a lost seal is retransmitted until sealed or the deadline).
const sealRetransmit = 200 * time.Millisecond

// sealWait is a seal (42) waiting for its 43.
type sealWait struct {
	owner      mesh.NodeID
	actorID    string
	sessionRid string
	gen        uint64
	sealed     bool          // under Binder.mu: done is closed
	gone       bool          // under Binder.mu: done was closed because the session owner departed
	done       chan struct{} // closed by the first matching 43, or by the owner's departure
}

// departure is, on the source, the binding sealed for a move: from Seal until the move
// is aborted or the source activation stops.
type departure struct {
	id          wire.RelocationID
	coordinator wire.CoordinatorFence
	binding     *actorBinding
}

// arrival is, on the target, the relocation a restored binding came with, until the
// commit (44) is sent.
type arrival struct {
	// sealed: the source sealed the binding under id and coordinator (carried in the
	// capture), so the commit names exactly that seal.
	sealed      bool
	id          wire.RelocationID
	coordinator wire.CoordinatorFence
	// deferred is what the Actor sent to its session before the commit: the session
	// owner still routes to the source and would drop it as stale, so it goes out right
	// after the 44, in order, on the same ordered link.
	deferred []func(t *actor.Turn)
}

// sessionFence is the session-owner fence of a binding in 42, 43, 44 and 51.
func (b *Binder) sessionFence(cur *actorBinding) wire.SessionFence {
	return wire.SessionFence{
		OwnerNodeRID:         cur.owner.RID,
		OwnerNodeGeneration:  cur.owner.Generation,
		OwnerID:              b.opts.OwnerID,
		OwnerLeaseGeneration: cur.owner.Generation,
		SessionRID:           cur.sessionRid,
		BindingGeneration:    cur.gen,
	}
}

func coordinatorToWire(c actor.MoveCoordinator) wire.CoordinatorFence {
	return wire.CoordinatorFence{
		OwnerID: c.OwnerID, LeaseGeneration: c.LeaseGeneration,
		NodeRID: c.Node.RID, NodeGeneration: c.Node.Generation,
		ExpectedAuthorityStoreVersion: c.StoreVersion,
	}
}

// sealMove (MoveHooks.Seal) runs in the source's turn: it seals the activation's
// binding at its session owner and waits for the 43, sending the 42 again every
// sealRetransmit. Without a binding there is nothing to seal.
func (b *Binder) sealMove(ctx context.Context, t *actor.Turn, m actor.Move) error {
	st, ok := t.Attachment(stateKey{}).(*actorState)
	if !ok || st.current == nil {
		return nil
	}
	cur := st.current
	id := wire.RelocationID(m.ID)
	coord := coordinatorToWire(m.Coordinator)
	rec := &wire.Record{Body: &wire.SessionRelocationSeal{
		Relocation: id, Coordinator: coord, SenderRole: wire.RoleSource,
		Actor: actor.FenceToWire(m.Source), Session: b.sessionFence(cur),
	}}
	if _, err := wire.Encode(rec); err != nil {
		// The Move itself is unusable (a zero id, an empty coordinator): no retry helps.
		return fault.Errorf(fault.InvalidOperation, "binding: relocation seal of %s: %w", m.Source.ID, err)
	}
	if _, ok := ctx.Deadline(); !ok {
		// The wait is bounded whatever the caller gave: no longer than the session
		// owner would keep the seal without its route update.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, b.opts.SessionRelocationSealTimeout)
		defer cancel()
	}
	// Kept for Capture (the target's commit names this seal) and Aborted.
	st.departing = &departure{id: id, coordinator: coord, binding: cur}
	w := &sealWait{owner: cur.owner, actorID: m.Source.ID, sessionRid: cur.sessionRid, gen: cur.gen, done: make(chan struct{})}
	b.mu.Lock()
	b.sealWaits[id] = w
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		if b.sealWaits[id] == w {
			delete(b.sealWaits, id)
		}
		b.mu.Unlock()
	}()
	tick := time.NewTicker(sealRetransmit)
	defer tick.Stop()
	// A session owner that membership has declared departed (failed or left) can hold
	// nothing; retireOwnedBy ends a wait that was under way when it departed.
	gone := !b.node.Membership().IsLive(cur.owner)
	for !gone {
		// Each attempt waits for window room at most one retransmission interval.
		sctx, cancel := context.WithTimeout(ctx, sealRetransmit)
		err := b.node.Records().Send(sctx, cur.owner, rec)
		cancel()
		if err != nil {
			b.log.Debug("binding: relocation seal not sent", "to", cur.owner.String(), "actor", m.Source.ID, "err", err)
		}
		select {
		case <-w.done:
			b.mu.Lock()
			gone = w.gone
			b.mu.Unlock()
			if !gone {
				return nil
			}
		case <-ctx.Done():
			return fault.Errorf(fault.Unavailable, "binding: session owner %s did not confirm the relocation seal of %s: %w",
				cur.owner, m.Source.ID, ctx.Err())
		case <-tick.C:
		}
	}
	// The session owner departed (membership declared it failed or left): there is
	// no session to hold anything, and no tombstone will come. The binding ends here,
	// as a disconnect would end it, and the Actor moves without one.
	st.departing = nil
	b.endCurrent(t, st)
	return nil
}

// onSealed takes a 43 to the seal waiting for it. It runs on the node's record
// receiver and never waits.
func (b *Binder) onSealed(from mesh.NodeID, rec *wire.Record) {
	body, ok := rec.Body.(*wire.SessionRelocationSealed)
	if !ok {
		return
	}
	b.mu.Lock()
	w := b.sealWaits[body.Relocation]
	if w == nil {
		b.mu.Unlock()
		// The answer to a retransmission after the first answer, or to a seal that gave
		// up: expected, not a fault.
		b.log.Debug("binding: relocation sealed for no waiting seal", "from", from.String(), "relocation", relocationString(body.Relocation))
		return
	}
	match := from == w.owner && body.Actor.Actor.ID == w.actorID &&
		body.Session.SessionRID == w.sessionRid && body.Session.BindingGeneration == w.gen
	if match && !w.sealed {
		w.sealed = true
		close(w.done)
	}
	b.mu.Unlock()
	if !match {
		b.rejected(&b.drops.staleSeals, from, "relocation sealed for another binding than the seal's")
	}
}

// captureMove (MoveHooks.Capture) returns the activation's binding, for the target;
// nil without one.
func (b *Binder) captureMove(t *actor.Turn) ([]byte, error) {
	st, ok := t.Attachment(stateKey{}).(*actorState)
	if !ok || st.current == nil {
		return nil, nil
	}
	cur := st.current
	snap := bindingSnapshot{owner: cur.owner, sessionRid: cur.sessionRid, gen: cur.gen, consumed: cur.consumed}
	if cur.owed > 0 {
		snap.owed = uint32(min(int64(cur.owed), math.MaxInt32))
	}
	if d := st.departing; d != nil && d.binding == cur {
		snap.sealed, snap.relocation, snap.coordinator = true, d.id, d.coordinator
	}
	return snap.encode(), nil
}

// restoreMove (MoveHooks.Restore) installs the captured binding on the target. Until
// the commit is sent, what the Actor sends its session waits (arrival.deferred).
func (b *Binder) restoreMove(t *actor.Turn, data []byte) error {
	if len(data) == 0 {
		return nil
	}
	cur, err := restoredBinding(data)
	if err != nil {
		return err
	}
	if !b.node.Membership().IsLive(cur.owner) {
		// Its session owner died while the Actor moved (the node that saw it fail
		// retired the binding at the source, or would have): it ends here, as a
		// disconnect, once the Actor runs.
		t.After(0, func(t *actor.Turn) {
			t.Deliver(&actor.SessionEnded{Session: actor.SessionID{RID: cur.sessionRid, BindingGeneration: cur.gen}})
		})
		return nil
	}
	st := state(b, t)
	st.current = cur
	st.arrived = cur
	t.KeepActive(true)
	// The source's credit timer did not move, so the target owes what the source
	// owed. No timer here: no credit can go out before the commit anyway (sendCredit
	// holds it), and the commit sends it (moveCommitted).
	return nil
}

// restoredBinding rebuilds a captured binding, waiting for its commit. Malformed data
// is a ProtocolError: the source's capture is the only writer.
func restoredBinding(data []byte) (*actorBinding, error) {
	snap, err := decodeBindingSnapshot(data)
	if err != nil {
		return nil, fault.Errorf(fault.ProtocolError, "binding: relocation restore: %w", err)
	}
	return &actorBinding{
		owner: snap.owner, sessionRid: snap.sessionRid, gen: snap.gen, consumed: snap.consumed, owed: int(snap.owed),
		arriving: &arrival{sealed: snap.sealed, id: snap.relocation, coordinator: snap.coordinator},
	}, nil
}

// moveCommitted (MoveHooks.Committed) runs in the target's turn once it serves the
// Actor: one 44 commit to the session owner (one send, no retransmission: digest §7.9;
// if it is lost the session owner's seal timeout closes the session), then what the
// Actor sent meanwhile, then the credit it owes (its own and the source's).
func (b *Binder) moveCommitted(t *actor.Turn, m actor.Move) {
	st, ok := t.Attachment(stateKey{}).(*actorState)
	if !ok || st.arrived == nil {
		return
	}
	cur := st.arrived
	st.arrived = nil
	arr := cur.arriving
	cur.arriving = nil
	id, coord := wire.RelocationID(m.ID), coordinatorToWire(m.Coordinator)
	if arr.sealed {
		if arr.id != id {
			b.log.Warn("binding: relocation committed under another id than the seal's; the commit names the seal",
				"actor", m.Source.ID, "seal", relocationString(arr.id), "move", relocationString(id))
		}
		id, coord = arr.id, arr.coordinator
	}
	if self := t.Fence(); self.Node != m.Target.Node || self.AuthorityOwnerGeneration != m.Target.AuthorityOwnerGeneration {
		// The session owner judges pushes against the commit's route: they carry the
		// activation's own fence.
		b.log.Warn("binding: relocation target fence differs from the activation's; its pushes will be refused",
			"actor", self.ID, "target", m.Target.String(), "activation", self.String())
	}
	rec := &wire.Record{Body: &wire.SessionRelocationRoute{
		Relocation: id, Coordinator: coord, SenderRole: wire.RoleTarget,
		Actor:   wire.ActorRef{ID: m.Source.ID, Generation: m.Source.ObjectGeneration},
		Session: b.sessionFence(cur),
		Route: wire.RouteUpdate{Commit: &wire.RouteCommit{
			PreviousAuthorityOwnerGeneration: m.Source.AuthorityOwnerGeneration,
			TargetAuthorityOwnerGeneration:   m.Target.AuthorityOwnerGeneration,
			TargetNodeRID:                    m.Target.Node.RID,
			TargetNodeGeneration:             m.Target.Node.Generation,
			TargetOwnerLeaseGeneration:       m.Target.OwnerLeaseGeneration,
		}},
	}}
	if err := b.node.Records().Send(context.Background(), cur.owner, rec); err != nil {
		b.log.Warn("binding: relocation commit not sent; the session owner's seal timeout will close the session",
			"to", cur.owner.String(), "actor", m.Source.ID, "err", err)
	}
	for _, fn := range arr.deferred {
		fn(t)
	}
	if st.current == cur && cur.owed > 0 {
		b.sendCredit(t, cur)
	}
}

// moveAborted (MoveHooks.Aborted) runs in the source's turn when the move failed
// before the target was ready: one 44 abort releases the seal, and the session owner
// sends what it held to the source again.
func (b *Binder) moveAborted(t *actor.Turn, m actor.Move) {
	st, ok := t.Attachment(stateKey{}).(*actorState)
	if !ok || st.departing == nil {
		return
	}
	d := st.departing
	st.departing = nil
	rec := &wire.Record{Body: &wire.SessionRelocationRoute{
		Relocation: d.id, Coordinator: d.coordinator, SenderRole: wire.RoleSource,
		Actor:   wire.ActorRef{ID: m.Source.ID, Generation: m.Source.ObjectGeneration},
		Session: b.sessionFence(d.binding),
		Route:   wire.RouteUpdate{Abort: &wire.RouteAbort{CurrentAuthorityOwnerGeneration: m.Source.AuthorityOwnerGeneration}},
	}}
	if err := b.node.Records().Send(context.Background(), d.binding.owner, rec); err != nil {
		b.log.Warn("binding: relocation abort not sent; the session owner's seal timeout will close the session",
			"to", d.binding.owner.String(), "actor", m.Source.ID, "err", err)
	}
}

// deferUntilCommitted holds fn until the commit of the relocation cur arrived with;
// false if cur is not waiting for one (fn is then the caller's to run).
func deferUntilCommitted(cur *actorBinding, fn func(t *actor.Turn)) bool {
	if cur.arriving == nil {
		return false
	}
	cur.arriving.deferred = append(cur.arriving.deferred, fn)
	return true
}

// bindingSnapshot is the binding state an activation carries to its relocation
// target. Encoding (big-endian; str = u16 length + UTF-8 bytes):
//
//	u8 version (1), u8 flags (bit 0: sealed),
//	str owner node RID, u64 owner node generation, str sessionRid, u64 binding generation,
//	u64 consumed (the last relay the Actor took), u32 owed (taken, not credited),
//	if sealed: u64 relocation high, u64 low, str coordinator owner id,
//	u64 coordinator lease generation, str coordinator node RID,
//	u64 coordinator node generation, str expected authority store version.
type bindingSnapshot struct {
	owner       mesh.NodeID
	sessionRid  string
	gen         uint64
	consumed    uint64
	owed        uint32
	sealed      bool
	relocation  wire.RelocationID
	coordinator wire.CoordinatorFence
}

const (
	snapshotVersion     = 1
	snapshotFlagSealed  = 0x01
	snapshotMaxRIDBytes = 255 // rid on the service wire
)

func (s *bindingSnapshot) encode() []byte {
	var out []byte
	str := func(v string) {
		out = binary.BigEndian.AppendUint16(out, uint16(len(v)))
		out = append(out, v...)
	}
	flags := byte(0)
	if s.sealed {
		flags |= snapshotFlagSealed
	}
	out = append(out, snapshotVersion, flags)
	str(s.owner.RID)
	out = binary.BigEndian.AppendUint64(out, s.owner.Generation)
	str(s.sessionRid)
	out = binary.BigEndian.AppendUint64(out, s.gen)
	out = binary.BigEndian.AppendUint64(out, s.consumed)
	out = binary.BigEndian.AppendUint32(out, s.owed)
	if s.sealed {
		out = binary.BigEndian.AppendUint64(out, s.relocation.High)
		out = binary.BigEndian.AppendUint64(out, s.relocation.Low)
		str(s.coordinator.OwnerID)
		out = binary.BigEndian.AppendUint64(out, s.coordinator.LeaseGeneration)
		str(s.coordinator.NodeRID)
		out = binary.BigEndian.AppendUint64(out, s.coordinator.NodeGeneration)
		str(s.coordinator.ExpectedAuthorityStoreVersion)
	}
	return out
}

var errSnapshot = errors.New("malformed binding snapshot")

// snapshotReader reads a snapshot; the first short read sticks as the error.
type snapshotReader struct {
	b   []byte
	err error
}

func (r *snapshotReader) take(n int) []byte {
	if r.err != nil {
		return nil
	}
	if len(r.b) < n {
		r.err = fmt.Errorf("%w: truncated", errSnapshot)
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *snapshotReader) u8() byte {
	if v := r.take(1); v != nil {
		return v[0]
	}
	return 0
}

func (r *snapshotReader) u32() uint32 {
	if v := r.take(4); v != nil {
		return binary.BigEndian.Uint32(v)
	}
	return 0
}

func (r *snapshotReader) u64() uint64 {
	if v := r.take(8); v != nil {
		return binary.BigEndian.Uint64(v)
	}
	return 0
}

func (r *snapshotReader) str() string {
	v := r.take(2)
	if v == nil {
		return ""
	}
	return string(r.take(int(binary.BigEndian.Uint16(v))))
}

func decodeBindingSnapshot(data []byte) (bindingSnapshot, error) {
	r := &snapshotReader{b: data}
	var s bindingSnapshot
	if v := r.u8(); r.err == nil && v != snapshotVersion {
		return s, fmt.Errorf("%w: version %d", errSnapshot, v)
	}
	flags := r.u8()
	if r.err == nil && flags&^snapshotFlagSealed != 0 {
		return s, fmt.Errorf("%w: unknown flags %#x", errSnapshot, flags)
	}
	s.sealed = flags&snapshotFlagSealed != 0
	s.owner.RID = r.str()
	s.owner.Generation = r.u64()
	s.sessionRid = r.str()
	s.gen = r.u64()
	s.consumed = r.u64()
	s.owed = r.u32()
	if s.sealed {
		s.relocation.High, s.relocation.Low = r.u64(), r.u64()
		s.coordinator.OwnerID = r.str()
		s.coordinator.LeaseGeneration = r.u64()
		s.coordinator.NodeRID = r.str()
		s.coordinator.NodeGeneration = r.u64()
		s.coordinator.ExpectedAuthorityStoreVersion = r.str()
	}
	switch {
	case r.err != nil:
		return bindingSnapshot{}, r.err
	case len(r.b) != 0:
		return bindingSnapshot{}, fmt.Errorf("%w: %d trailing bytes", errSnapshot, len(r.b))
	case s.owner.RID == "" || len(s.owner.RID) > snapshotMaxRIDBytes || s.owner.Generation == 0:
		return bindingSnapshot{}, fmt.Errorf("%w: session owner node", errSnapshot)
	case s.sessionRid == "" || len(s.sessionRid) > snapshotMaxRIDBytes || s.gen == 0:
		return bindingSnapshot{}, fmt.Errorf("%w: session identity", errSnapshot)
	case s.owed > math.MaxInt32:
		return bindingSnapshot{}, fmt.Errorf("%w: owed %d", errSnapshot, s.owed)
	case s.sealed && s.relocation == (wire.RelocationID{}):
		return bindingSnapshot{}, fmt.Errorf("%w: zero relocation id", errSnapshot)
	}
	return s, nil
}

// cloneData copies data that a deferred push keeps past the Actor's turn.
func cloneData(b []byte) []byte { return bytes.Clone(b) }
