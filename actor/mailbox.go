package actor

import (
	"log/slog"

	proto "github.com/meshnode/meshnode/internal/protoactor/actor"

	"github.com/meshnode/meshnode/mesh"
	"github.com/meshnode/meshnode/mesh/meshpb"
	"github.com/meshnode/meshnode/mesh/wire"
)

// Mailbox bounds: an Actor's mailbox is fed by its bound session (relays) and by other
// Actors, on any node; whatever they send, it holds at most MaxMailbox messages and
// MaxMailboxBytes of payload. Defaults below.
// The count is above the mesh's peer window (a burst of records from one node arrives
// at once), so a mailbox whose Actor keeps up never refuses.
const (
	DefaultMaxMailbox      = 16384
	DefaultMaxMailboxBytes = 16 << 20
)

// activationMailbox is an activation's protoactor mailbox. On every message put in, on
// whatever goroutine puts it (a local sender, protoactor's remote reader), it counts the
// message against the activation's bound, reports records to the mesh flow control as
// arrived, and refuses what the bound does not admit:
//   - a local send is checked by its sender before it posts (ErrMailboxFull);
//   - a record 24 from another node over the bound is rejected here: the layer that
//     owns it answers (a relayed Request gets an Error reply) or it is dropped and
//     counted. Every other record (binds, tombstones, replacement, relocation) is
//     control traffic and is always admitted, so a binding is never left behind.
type activationMailbox struct {
	proto.Mailbox
	h *Host
	a *activation
}

func (m activationMailbox) PostUserMessage(msg any) {
	switch v := msg.(type) {
	case *meshpb.Envelope:
		if !m.h.node.Records().Arrived(v) {
			return
		}
		if mesh.IsRun(v) {
			m.postRun(v)
			return
		}
		size := envelopeBytes(v)
		if isActorSend(v) && !m.a.admits(m.h, size) {
			m.h.rejected(m.a, v)
			return
		}
		m.a.enqueued(size)
	case *delivery, *remoteSend, *meshpb.Followed:
		m.a.enqueued(0)
	}
	m.Mailbox.PostUserMessage(msg)
}

// postRun puts a run of records from one coalesced envelope into the mailbox as one
// message when the bound admits all of them at once; otherwise they are put in one by
// one, each judged as above.
func (m activationMailbox) postRun(run *meshpb.Envelope) {
	records := m.h.node.Records()
	n, size, sends := records.RunStats(run)
	if sends == 0 || m.a.admitsRun(m.h, int64(n), size) {
		m.a.queued.Add(int64(n))
		m.a.queuedBytes.Add(size)
		m.Mailbox.PostUserMessage(run)
		return
	}
	records.EachInRun(run, func(rec *meshpb.Envelope) { m.PostUserMessage(mesh.CloneRecord(rec)) })
}

// admitsRun reports whether n more messages of size bytes in all fit the activation's
// bound together.
func (a *activation) admitsRun(h *Host, n, size int64) bool {
	q := a.queued.Load()
	return q+n <= int64(h.maxMailbox) && a.queuedBytes.Load()+size <= h.maxMailboxBytes
}

func envelopeBytes(env *meshpb.Envelope) int64 {
	var n int64
	for _, f := range env.Frames {
		n += int64(len(f))
	}
	return n
}

// isActorSend reports whether an envelope holds a record 24 (the fourth byte of its
// head frame is the command) without decoding it.
func isActorSend(env *meshpb.Envelope) bool {
	return len(env.Frames) > 0 && len(env.Frames[0]) > 3 && wire.Command(env.Frames[0][3]) == wire.CmdActorSend
}

// admits reports whether one more message of size bytes fits the activation's bound.
func (a *activation) admits(h *Host, size int64) bool {
	n := a.queued.Load()
	return n == 0 || (n < int64(h.maxMailbox) && a.queuedBytes.Load()+size <= h.maxMailboxBytes)
}

func (a *activation) enqueued(size int64) {
	a.queued.Add(1)
	a.queuedBytes.Add(size)
}

func (a *activation) dequeued(size int64) {
	a.queued.Add(-1)
	a.queuedBytes.Add(-size)
}

// rejected handles a record 24 from another node that the activation's full mailbox
// refused: validated like any inbound record, then given to the layer that handles
// rejections (a relayed Request is answered) or dropped; counted and logged once per
// interval.
func (h *Host) rejected(a *activation, env *meshpb.Envelope) {
	h.mailboxRejected.Add(1)
	h.ratelog.Log(h.log, slog.LevelWarn, "mailbox_full", "actor: mailbox full, record refused",
		"actor", a.fence.Ref.String(), "kind", a.kind, "queued", a.queued.Load(), "queued_bytes", a.queuedBytes.Load())
	from, rec, ok := h.node.Records().Accept(env)
	if !ok {
		return
	}
	if in, ok := decodeActorSend(rec); ok && in.corr != 0 {
		h.failRequest(from, in.corr, wire.ResultRejected, wire.FailureWorkerQueueFull)
		return
	}
	h.turnHandlers.mu.RLock()
	fn := h.onRejected
	h.turnHandlers.mu.RUnlock()
	if fn != nil {
		fn(from, rec)
	}
}

// HandleRejected registers fn for records addressed to an activation whose mailbox was
// full (after the record's validation): the layer that owns the command answers what
// needs an answer. It runs on the goroutine that delivered the record and must not
// block.
func (h *Host) HandleRejected(fn func(from mesh.NodeID, rec *wire.Record)) {
	h.turnHandlers.mu.Lock()
	h.onRejected = fn
	h.turnHandlers.mu.Unlock()
}
