package binding

import (
	"context"
	"encoding/binary"
	"time"

	"github.com/meshnode/meshnode/actor"
	"github.com/meshnode/meshnode/mesh/wire"
	"github.com/meshnode/meshnode/session/codec"
)

// The relay window: backpressure from bound Actors to their session, across nodes.
//
// A session may have at most RelayWindow packets, and RelayWindowBytes of payload,
// relayed to its bound Actors and not consumed by them yet (Sends and Requests alike,
// across all its bindings). At the window its reader stops pulling packets (its client
// stalls in TCP) until the Actors catch up: a client that sends faster than its Actors
// serve is slowed down instead of filling their mailboxes (which would then refuse its
// messages) or the memory of their nodes.
//
// The Actor owner says what was consumed with a credit, the highest session sequence
// its Actor has taken from the binding. Relays reach an Actor in order, so consuming
// one consumes every earlier one of that binding. A reply to a relayed Request is a
// credit up to the Request's sequence; for Sends the Actor owner sends a credit record
// (36 with the reserved name $zlink.credit, see docs/binding.md) after every half window
// consumed and creditDelay after the last relay it has not credited yet.

// Defaults of the relay window.
const (
	DefaultRelayWindow      = 4096
	DefaultRelayWindowBytes = 4 << 20
)

// creditDelay bounds how long an Actor owner sits on a credit it owes.
const creditDelay = 5 * time.Millisecond

// creditPacketName is the reserved name of a credit record (36).
const creditPacketName = "$zlink.credit"

// bound is one current binding of the session, with what was relayed on it and not
// consumed yet.
type bound struct {
	actorID string
	fence   actor.RouteFence
	gen     uint64
	window  []relayed // oldest first

	// Relocation (relocation.go): the barrier's judgement state, the relays held while
	// sealed (nil when none), and the route before the last commit, whose replies to
	// Requests relayed before the move are still accepted.
	barrier   relocationBarrier
	hold      *relocationHold
	prevFence actor.RouteFence
	// sending counts relays whose route was read but which the transport has not taken
	// yet: a seal's 43 waits for them (relocation.go).
	sending int
}

// relayed is one relay not consumed yet: its session sequence and payload size.
type relayed struct {
	seq   uint64
	bytes int64
}

// setBound publishes bd as the session's binding of its Actor; it returns the binding
// it replaced. s.mu is held.
func (s *Session) setBound(bd *bound) *bound {
	prev := s.binds[bd.actorID]
	if prev != nil {
		s.unlinkBound(prev)
	}
	s.binds[bd.actorID] = bd
	s.byGen[bd.gen] = bd
	s.bindsChanged()
	return prev
}

// removeBound drops the binding of actorID if it is still generation gen. s.mu is held.
func (s *Session) removeBound(actorID string, gen uint64) bool {
	bd, ok := s.binds[actorID]
	if !ok || bd.gen != gen {
		return false
	}
	s.unlinkBound(bd)
	delete(s.binds, actorID)
	s.bindsChanged()
	return true
}

// unlinkBound forgets a binding's generation and its unconsumed relays (the binding is
// gone: nothing of it will be consumed), held ones included; whoever removes the
// binding fails its pending Requests. s.mu is held.
func (s *Session) unlinkBound(bd *bound) {
	delete(s.byGen, bd.gen)
	s.dropHold(bd)
	s.release(bd, len(bd.window))
}

// release drops the first n relays of bd's window from the session's counts. s.mu is
// held.
func (s *Session) release(bd *bound, n int) {
	if n == 0 {
		return
	}
	var bytes int64
	for _, r := range bd.window[:n] {
		bytes += r.bytes
	}
	bd.window = append(bd.window[:0], bd.window[n:]...)
	s.relayedCount.Add(-int64(n))
	s.relayedBytes.Add(-bytes)
	s.progress.Notify()
}

// relayedOn counts a relay against the session's window. s.mu is held.
func (s *Session) relayedOn(bd *bound, seq uint64, bytes int64) {
	bd.window = append(bd.window, relayed{seq: seq, bytes: bytes})
	s.relayedCount.Add(1)
	s.relayedBytes.Add(bytes)
}

// unrelayed takes back a relay that was never sent. s.mu is held.
func (s *Session) unrelayed(bd *bound, seq uint64) {
	for i := len(bd.window) - 1; i >= 0; i-- {
		if bd.window[i].seq == seq {
			s.relayedCount.Add(-1)
			s.relayedBytes.Add(-bd.window[i].bytes)
			bd.window = append(bd.window[:i], bd.window[i+1:]...)
			s.progress.Notify()
			return
		}
	}
}

// windowFull reports whether the session is at its relay window.
func (s *Session) windowFull() bool {
	return s.relayedCount.Load() >= int64(s.b.opts.RelayWindow) || s.relayedBytes.Load() >= s.b.opts.RelayWindowBytes
}

// credited takes a credit (up to seq) for binding gen.
func (s *Session) credited(gen, seq uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	bd := s.byGen[gen]
	if bd == nil {
		return
	}
	n := 0
	for n < len(bd.window) && bd.window[n].seq <= seq {
		n++
	}
	s.release(bd, n)
}

// Actor owner side: what the Actor consumed of its current binding.

// consumed notes, in the Actor's turn, that the Actor took relay seq of its binding,
// and credits the session owner when half a window is owed, or soon.
func (b *Binder) consumed(t *actor.Turn, cur *actorBinding, seq uint64) {
	cur.consumed = seq
	cur.owed++
	if cur.owed >= max(b.opts.RelayWindow/2, 1) {
		b.sendCredit(t, cur)
		return
	}
	b.armCredit(t, cur)
}

// armCredit schedules a credit creditDelay from now, unless one is scheduled already.
func (b *Binder) armCredit(t *actor.Turn, cur *actorBinding) {
	if cur.creditArmed {
		return
	}
	cur.creditArmed = true
	t.After(creditDelay, func(t *actor.Turn) {
		cur.creditArmed = false
		if st, ok := t.Attachment(stateKey{}).(*actorState); ok && st.current == cur && cur.owed > 0 {
			b.sendCredit(t, cur)
		}
	})
}

func (b *Binder) sendCredit(t *actor.Turn, cur *actorBinding) {
	if cur.arriving != nil {
		// Restored by a relocation whose commit is not sent yet: the session owner would
		// judge a credit from here against the source's fence and drop it. It stays owed;
		// the commit sends it (move.go).
		return
	}
	cur.owed = 0
	rec := &wire.Record{
		Body:    &wire.BoundSessionSend{Actor: actor.FenceToWire(t.Fence()), ExpectedBindingGeneration: cur.gen},
		Payload: &wire.Payload{PacketName: creditPacketName, ContentType: codec.ContentTypeRaw, Data: binary.BigEndian.AppendUint64(nil, cur.consumed)},
	}
	if err := b.node.Records().Send(context.Background(), cur.owner, rec); err != nil {
		b.log.Debug("binding: credit not sent", "to", cur.owner.String(), "err", err)
	}
}

// repliedUpTo notes that a reply to relay seq credits the session owner up to seq.
func (cur *actorBinding) repliedUpTo(seq uint64) {
	if seq >= cur.consumed {
		cur.owed = 0
	}
}
