package actor

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/meshnode/meshnode/fault"
	proto "github.com/meshnode/meshnode/internal/protoactor/actor"
	"github.com/meshnode/meshnode/mesh"
	"github.com/meshnode/meshnode/mesh/meshpb"
	"github.com/meshnode/meshnode/mesh/wire"
)

// Turn is what a record handler sees while it runs inside an activation's turn: the
// layer above Actors (session binding) keeps its per-activation state here and
// delivers messages to the Actor in the same turn.
type Turn struct {
	s *shell
}

// Context returns the activation's context: cancelled when it stops.
func (t *Turn) Context() context.Context { return t.s.act.ctx }

// Fence returns the activation's route fence.
func (t *Turn) Fence() RouteFence { return t.s.act.fence }

// Former returns the fence the activation had on the node it moved from, if it moved
// here: records addressed to it (forwarded by Message Follow) are this activation's.
func (t *Turn) Former() (RouteFence, bool) {
	if f := t.s.act.former; f != nil {
		return *f, true
	}
	return RouteFence{}, false
}

// Deliver runs the Actor's Receive with msg now, within this turn. A *SessionPacket
// Request is answered through its own reply function.
func (t *Turn) Deliver(msg any) { t.s.deliver(msg, nil, nil) }

// DeliverContext is Deliver with ctx as the context.Context the Actor's Context
// embeds for this message: ctx must derive from Context() (so it still ends when the
// activation stops) and adds what a layer above Actors carries for the message, such as
// the span of a traced relay, so that calls the Actor makes with its Context join it.
func (t *Turn) DeliverContext(ctx context.Context, msg any) { t.s.deliverIn(ctx, msg, nil, nil) }

// Kind returns the activation's kind name.
func (t *Turn) Kind() string { return t.s.act.kind }

// After runs fn in a turn of this activation, d from now (a message the activation
// posts to itself, behind what its mailbox already holds). If the activation stopped
// meanwhile, fn does not run.
func (t *Turn) After(d time.Duration, fn func(t *Turn)) {
	h, pid := t.s.h, t.s.act.pid
	if t.s.pctx != nil {
		// In an activation's first turn its pid may not be published yet.
		pid = t.s.pctx.Self()
	}
	time.AfterFunc(d, func() { h.system.Root.Send(pid, turnCallback{fn: fn}) })
}

// EachActivation runs fn in a turn of every activation on this node, behind what each
// mailbox already holds (the binding layer ends the bindings of a departed session
// owner with it). An activation that is moving away skips it: its move carries what
// the turn would have changed to the target, which checks for itself.
func (h *Host) EachActivation(fn func(t *Turn)) {
	h.mu.Lock()
	pids := make([]*proto.PID, 0, len(h.acts))
	for _, a := range h.acts {
		pids = append(pids, a.pid)
	}
	h.mu.Unlock()
	for _, pid := range pids {
		h.system.Root.Send(pid, turnCallback{fn: fn})
	}
}

// turnCallback is a function an activation runs in one of its turns (Turn.After).
type turnCallback struct{ fn func(t *Turn) }

// KeepActive marks the activation as held by a layer above Actors (a current session
// binding): while held it is not collected when idle.
func (t *Turn) KeepActive(held bool) { t.s.act.keepActive.Store(held) }

// Attachment returns what SetAttachment stored under key on this activation.
func (t *Turn) Attachment(key any) any { return t.s.attachments[key] }

// SetAttachment stores v under key on this activation, for its lifetime.
func (t *Turn) SetAttachment(key, v any) {
	if t.s.attachments == nil {
		t.s.attachments = map[any]any{}
	}
	t.s.attachments[key] = v
}

// TurnRecordHandler handles a record addressed to an activation, inside its turn.
type TurnRecordHandler func(t *Turn, from mesh.NodeID, rec *wire.Record)

type turnHandlers struct {
	mu sync.RWMutex
	m  map[wire.Command]TurnRecordHandler
}

// HandleActorRecord registers the handler of records of cmd addressed to activations
// (for record 24, only those with a bound-session tail; plain 24s are Actor messages).
func (h *Host) HandleActorRecord(cmd wire.Command, fn TurnRecordHandler) {
	h.turnHandlers.mu.Lock()
	defer h.turnHandlers.mu.Unlock()
	if h.turnHandlers.m == nil {
		h.turnHandlers.m = map[wire.Command]TurnRecordHandler{}
	}
	h.turnHandlers.m[cmd] = fn
}

func (h *Host) turnHandler(cmd wire.Command) TurnRecordHandler {
	h.turnHandlers.mu.RLock()
	defer h.turnHandlers.mu.RUnlock()
	return h.turnHandlers.m[cmd]
}

// SendRecord sends rec to the activation named by to, wherever it lives: to a remote
// one as a record addressed straight to it, to a local one in-process (same rules,
// no network, no tap). A fence whose node lifecycle is not live fails with
// fault.Unavailable. While the window toward the Actor's node is full it waits as long
// as ctx lasts (give it a deadline, or a context that ends with the work it serves).
func (h *Host) SendRecord(ctx context.Context, to RouteFence, rec *wire.Record) error {
	self := h.node.ID()
	if to.Node == self {
		a, ok := h.local(to.ID)
		if !ok {
			return fmt.Errorf("%w: %s", ErrNotFound, to.Ref)
		}
		if rec.Command() == wire.CmdActorSend && !a.admits(h, payloadBytes(rec)) {
			h.mailboxRejected.Add(1)
			return fmt.Errorf("%w: %s", ErrMailboxFull, to.Ref)
		}
		frames, err := wire.Encode(rec)
		if err != nil {
			return err
		}
		h.system.Root.Send(a.pid, &meshpb.Envelope{FromRid: self.RID, FromGeneration: self.Generation,
			ToRid: self.RID, ToGeneration: self.Generation, Frames: frames})
		return nil
	}
	if !h.node.Membership().IsLive(to.Node) {
		return fault.Errorf(fault.Unavailable, "actor: %s is not a live member", to.Node)
	}
	addr, err := h.remoteAddr(to)
	if err == nil {
		err = h.node.Records().SendToActor(ctx, addr, rec, 0)
	}
	if err != nil {
		return fmt.Errorf("actor: send to %s: %w", to.Ref, err)
	}
	return nil
}

// HandleMissingActor registers fn for records addressed to an activation that no
// longer exists on this node and has no successor (after the record's validation):
// the layer that owns the command answers (a bind gets "not found").
func (h *Host) HandleMissingActor(fn func(from mesh.NodeID, rec *wire.Record)) {
	h.turnHandlers.mu.Lock()
	h.missing = fn
	h.turnHandlers.mu.Unlock()
}

// undeliverable takes an envelope addressed to an activation that is gone: if the
// ActorId has a current activation here, the envelope goes to it, whose handlers judge
// the stale generation (a bind for another ObjectGeneration is answered
// InvalidOperation there); otherwise the missing-Actor handler answers.
func (h *Host) undeliverable(env *meshpb.Envelope, name string) bool {
	id, ok := activationID(name)
	if !ok {
		return false
	}
	if a, found := h.local(id); found {
		h.system.Root.Send(a.pid, env)
		return true
	}
	if f, ok := h.followRoute(name); ok {
		// Message Follow: the Actor moved; the record goes once to its new location,
		// with its sender's identity.
		h.followed.Add(1)
		h.sendFollowed(f.pid, &meshpb.Followed{FromRid: env.FromRid, FromGeneration: env.FromGeneration, Frames: env.Frames, ToGeneration: f.target.Node.Generation})
		return true
	}
	from, rec, ok := h.node.Records().Accept(env)
	if !ok {
		return true
	}
	if in, isSend := decodeActorSend(rec); isSend && in.corr != 0 {
		// An Actor request to an activation that is gone: answered, not left to time out.
		h.failRequest(from, in.corr, wire.ResultNotFound, wire.FailureActorRouteNotFound)
		return true
	}
	h.turnHandlers.mu.RLock()
	fn := h.missing
	h.turnHandlers.mu.RUnlock()
	if fn != nil {
		fn(from, rec)
	} else {
		h.node.Records().DropStale(from, "record "+rec.Command().String()+" for an Actor that is not active")
	}
	return true
}

// HandleStop registers fn to run in an activation's last turn, after the Actor saw
// Stopping: layers that keep per-activation state (bindings) let their peers know.
func (h *Host) HandleStop(fn func(t *Turn)) {
	h.turnHandlers.mu.Lock()
	h.onStop = fn
	h.turnHandlers.mu.Unlock()
}

func (h *Host) stopHook() func(t *Turn) {
	h.turnHandlers.mu.RLock()
	defer h.turnHandlers.mu.RUnlock()
	return h.onStop
}

func payloadBytes(rec *wire.Record) int64 {
	if rec.Payload == nil {
		return 0
	}
	return int64(len(rec.Payload.Data))
}
