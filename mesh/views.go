package mesh

import (
	"context"
	"time"

	"github.com/meshnode/meshnode/fault"
	"github.com/meshnode/meshnode/internal/nodert"
	"github.com/meshnode/meshnode/internal/protoactor/actor"
	"github.com/meshnode/meshnode/mesh/meshpb"
	"github.com/meshnode/meshnode/mesh/wire"
)

// A Node's API is split by concern: Membership (who is in the mesh), Records (the record
// transport, its flow control and tap). Test-only hooks (killing a node, sending
// hand-built envelopes) live in meshtest.

func init() {
	nodert.SystemOf = func(node any) *actor.ActorSystem { return node.(*Node).system }
	nodert.Kill = func(node any) { node.(*Node).kill() }
}

// Membership is a node's view of the mesh.
type Membership struct{ n *Node }

// Members returns every member this node knows, itself included, sorted by RID. Live
// members are probed: one that does not answer is reported as suspect.
func (m *Membership) Members(ctx context.Context) []Member {
	return m.n.members.probe(ctx, m.n.members.members())
}

// Live returns the members whose current lifecycle has not departed, without probing,
// this node included.
func (m *Membership) Live() []Member {
	all := m.n.members.members()
	out := all[:0]
	for _, mem := range all {
		if mem.State == StateAlive || mem.State == StateSuspect {
			out = append(out, mem)
		}
	}
	return out
}

// Member returns the current lifecycle of rid.
func (m *Membership) Member(rid string) (Member, bool) { return m.n.members.lookup(rid) }

// Suspicions returns how many peers this node has declared suspect, and how many
// suspicions of itself it refuted (each refutation is a false suspicion: this node was
// alive). memberlist keeps suspicion private; these are read from what it logs.
func (m *Membership) Suspicions() (suspected, refuted int64) {
	return m.n.suspicions.suspected.Load(), m.n.suspicions.refuted.Load()
}

// IsLive reports whether id is a current, not departed, member lifecycle.
func (m *Membership) IsLive(id NodeID) bool {
	return m.n.members.liveMember(id) != nil
}

// Subscribe calls fn for every membership event, in order, on the membership's event
// goroutine (fn must not block). The returned function unsubscribes.
func (m *Membership) Subscribe(fn func(MemberEvent)) (unsubscribe func()) {
	return m.n.members.subscribe(fn)
}

// WaitLive waits until at least n members (this node included) are live in this
// node's view, or ctx ends (its error, wrapped, naming how many are live).
func (m *Membership) WaitLive(ctx context.Context, n int) error {
	changed := make(chan struct{}, 1)
	unsubscribe := m.Subscribe(func(MemberEvent) {
		select {
		case changed <- struct{}{}:
		default:
		}
	})
	defer unsubscribe()
	for {
		live := len(m.Live())
		if live >= n {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fault.Errorf(fault.DeadlineExceeded, "mesh: %d of the %d members waited for are live: %w", live, n, ctx.Err())
		}
	}
}

// FailureBound is the longest a member of this mesh can take to declare a peer failed
// that it can no longer reach: memberlist's suspicion timeout when no other member
// confirms the suspicion (the node alone on its side of a partition), plus one probe.
// A node on the majority side of a partition declares the others failed sooner; it
// waits this long after a failure before it acts as if the failed side has given up
// (Actor failover), as Akka's down-removal margin does.
func (m *Membership) FailureBound() time.Duration { return m.n.failureBound() }

// Joined is closed once another member has joined this node's view.
func (m *Membership) Joined() <-chan struct{} { return m.n.members.joined }

// WaitJoined waits until this node is in the mesh: it joined through one of its seeds
// (Config.Join), or it has none. It returns when that happened, an error matching
// ErrDuplicateRID when a seed's mesh already has a live member with this node's RID
// (the node is refused: close it; Node.Leave then sends no leave), or ctx's error.
func (m *Membership) WaitJoined(ctx context.Context) (at time.Time, err error) {
	mm := m.n.members
	select {
	case <-mm.seeded:
		return mm.settledAt, nil
	case <-mm.refused:
		return time.Time{}, mm.refusal()
	case <-ctx.Done():
		return time.Time{}, ctx.Err()
	}
}

// Records is a node's record transport: numbered service-wire records to and from the
// other node lifecycles of the mesh, validated before dispatch, under flow control.
type Records struct{ n *Node }

// Handle registers the handler of one command. A later call replaces it.
func (r *Records) Handle(cmd wire.Command, h RecordHandler) { r.n.handle(cmd, h, false) }

// HandleInline is Handle for a handler that never waits (its sends do not wait for
// room, it only queues) and is safe to run at the same time as any other record
// handler. The node may then run it on the goroutine that received the record from
// its peer, when no earlier record is waiting for the record receiver, which saves a
// hand-off per record; the order of one peer's records is kept either way. With
// Config.NoRecordCoalescing every record goes through the receiver.
func (r *Records) HandleInline(cmd wire.Command, h RecordHandler) { r.n.handle(cmd, h, true) }

// Send sends a record to the node lifecycle to, for the handler of its command. It
// fails with fault.Unavailable, without sending, when to is not a live member. While
// the peer's window is full (flow.go) it waits for room until ctx ends
// (DefaultSendWait when ctx has no deadline), then fails with ErrBackpressure.
// Delivery is otherwise at most once (remote sends are one-way).
func (r *Records) Send(ctx context.Context, to NodeID, rec *wire.Record) error {
	return r.n.send(ctx, to, rec)
}

// TrySend is Send for callers that must never wait, such as the node's record receiver
// serving every session: a full window fails at once with ErrBackpressure, and the
// record is counted as dropped with reason backpressure.
func (r *Records) TrySend(to NodeID, rec *wire.Record) error { return r.n.trySend(to, rec) }

// ActorAddr is the address of one actor on one node lifecycle (an Actor activation).
// Resolve it once with Records.ActorAddr and reuse it: resolving per record costs
// allocations on the hot path.
type ActorAddr struct {
	node NodeID
	pid  *actor.PID
}

// Node returns the node lifecycle the actor lives on.
func (a ActorAddr) Node() NodeID { return a.node }

// ActorAddr returns the address of the actor named actorName on the live member to.
func (r *Records) ActorAddr(to NodeID, actorName string) (ActorAddr, error) {
	mem, ok := r.n.members.live(to)
	if !ok {
		return ActorAddr{}, fault.Errorf(fault.Unavailable, "mesh: %s is not a live member", to)
	}
	return ActorAddr{node: to, pid: actor.NewPID(mem.RemoteAddr, actorName)}, nil
}

// SendToActor is Send addressed straight to an actor on the node (an Actor
// activation): the record skips the node's record receiver, and the receiving actor
// validates it with Accept. While the peer's window is full it waits at most maxWait,
// or as long as ctx lasts when maxWait is 0 (a session's relay: its session stops
// pulling meanwhile, and the wait ends when the session closes or the peer departs).
func (r *Records) SendToActor(ctx context.Context, to ActorAddr, rec *wire.Record, maxWait time.Duration) error {
	return r.n.sendTo(ctx, to.node, to.pid, rec, maxWait)
}

// Accept validates an inbound envelope (addressed to this node lifecycle, from a
// current member, a well-formed record), counts and taps it, and returns the record.
// Invalid envelopes are counted as dropped and logged; ok is then false. Actors that
// receive records addressed straight to them call this before anything else.
func (r *Records) Accept(env *meshpb.Envelope) (from NodeID, rec *wire.Record, ok bool) {
	return r.n.accept(env, nil)
}

// AcceptWith is Accept for records taken one after another (those of a run), decoded
// with dec, which shares the strings of consecutive records whose text is the same
// (see wire.Decoder).
func (r *Records) AcceptWith(env *meshpb.Envelope, dec *wire.Decoder) (from NodeID, rec *wire.Record, ok bool) {
	return r.n.accept(env, dec)
}

// IsRun reports whether env, addressed to an actor, is a run: consecutive records of
// one coalesced envelope for that actor, handed to it as one message instead of one
// each. The actor takes the records with EachInRun; anything that keeps or forwards
// them takes them one by one (CloneRecord), since the other paths know one-record
// envelopes only.
func IsRun(env *meshpb.Envelope) bool { return isRun(env) }

// RunStats returns the number of records in the run env, their frame bytes (as
// mailbox bounds count them) and how many of them are Actor sends (record 24).
func (r *Records) RunStats(env *meshpb.Envelope) (records int, bytes int64, sends int) {
	return runStats(env)
}

// EachInRun calls fn with each record of the run env, in order, as a one-record
// envelope (from and to those of env) that is valid only until fn returns: one
// envelope is reused for every record. Use CloneRecord to keep one. A RunCursor does
// the same without a callback and, kept between runs, without allocating.
func (r *Records) EachInRun(env *meshpb.Envelope, fn func(rec *meshpb.Envelope)) {
	eachInRun(env, fn)
}

// CloneRecord returns a one-record envelope that can be kept: the copy of one that
// EachInRun handed out (the frames' bytes are shared; they are never written).
func CloneRecord(env *meshpb.Envelope) *meshpb.Envelope {
	return &meshpb.Envelope{FromRid: env.FromRid, FromGeneration: env.FromGeneration,
		ToRid: env.ToRid, ToGeneration: env.ToGeneration, Frames: append([][]byte(nil), env.Frames...)}
}

// Arrived must be called for every envelope that reaches this node (once; a second call
// is harmless), when it is put into the mailbox of the actor it is addressed to
// (before it waits there): it feeds the flow control of the peer that sent it. The
// node's record receiver does it for the envelopes addressed to it; the Actor host for
// those addressed to activations. It reports whether the envelope carries a record
// (false for an envelope that only acknowledges).
func (r *Records) Arrived(env *meshpb.Envelope) bool { return r.n.arrived(env) }

// DropStale counts and logs a valid record that a receiver found stale (a fence that
// is no longer current).
func (r *Records) DropStale(from NodeID, detail string) { r.n.dropStale(from, detail) }

// DropExpected counts a stale_target drop that is the expected end of a race (a push
// that crossed its session's close, say) and logs it at debug level only: DropStale is
// for records no correct peer sends.
func (r *Records) DropExpected(from NodeID, detail string) {
	r.n.dropExpected(DropStaleTarget, from, detail)
}

// OnUndeliverable installs fn to see envelopes addressed to a local actor that does
// not exist (by name); fn reports whether it took care of the envelope. Otherwise the
// envelope is counted as a stale_target drop.
func (r *Records) OnUndeliverable(fn func(env *meshpb.Envelope, actorName string) bool) {
	r.n.onUndeliverable(fn)
}

// PeerBlocked returns nil while the window toward the live member to has room, or a
// channel that is closed when room may have come back. Sessions that relay to to stop
// pulling packets until then.
func (r *Records) PeerBlocked(to NodeID) <-chan struct{} { return r.n.peerBlocked(to) }

// FlowStats returns the current flow-control figures (also exported as metrics).
func (r *Records) FlowStats() FlowStats { return r.n.flowStats() }

// SetTap installs fn to see every record crossing this node's boundary (nil removes).
func (r *Records) SetTap(fn func(TapRecord)) { r.n.setTap(fn) }

// Known returns every member this node knows, itself included, sorted by RID, in the
// state gossip last reported, without probing any (Members probes every live member:
// too much for a page polled every second).
func (m *Membership) Known() []Member { return m.n.members.withSuspicion(m.n.members.members()) }
