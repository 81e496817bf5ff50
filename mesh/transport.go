package mesh

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshnode/meshnode/fault"
	"github.com/meshnode/meshnode/internal/protoactor/actor"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/meshnode/meshnode/internal/histogram"
	"github.com/meshnode/meshnode/internal/protoactor/remote"
	"github.com/meshnode/meshnode/mesh/meshpb"
	"github.com/meshnode/meshnode/mesh/wire"
)

// recordsActorName is the name of each node's record receiver actor.
const recordsActorName = "$records"

// Errors of the record transport.
var (
	// ErrStopped: this node is shutting down (kind ShuttingDown).
	ErrStopped = fault.New(fault.ShuttingDown, "mesh: node stopped")
	// ErrRecordTooLarge: a record's payload is over MaxRecordPayload (kind
	// CapacityExceeded). Nothing was sent.
	ErrRecordTooLarge = fault.New(fault.CapacityExceeded, "mesh: record payload over the limit between nodes")
)

// MaxRecordPayload bounds the payload of one record between nodes (an Actor message,
// a relayed packet, a push, a reply) and the state a move carries. A larger one is
// refused with ErrRecordTooLarge when it is sent, instead of reaching the peer's gRPC
// server over its message limit (grpcMaxMessage), which breaks the stream and loses
// every other record on it.
const MaxRecordPayload = 4 << 20

// grpcMaxMessage is what a node's gRPC server accepts in one message: a record at
// MaxRecordPayload with its envelope, or a batch of smaller ones (the endpoint writer
// splits its batches at remote.MaxBatchBytes, which is MaxRecordPayload).
const grpcMaxMessage = max(MaxRecordPayload, remote.MaxBatchBytes) + 1<<20

// checkPayload refuses a record whose payload is over MaxRecordPayload.
func checkPayload(rec *wire.Record) error {
	if p := rec.Payload; p != nil && len(p.Data) > MaxRecordPayload {
		return fmt.Errorf("%w: record %s with %d payload bytes (limit %d)", ErrRecordTooLarge, rec.Command(), len(p.Data), MaxRecordPayload)
	}
	return nil
}

// Drop reasons of zlink.mesh_node.messages.dropped (digest §10).
const (
	DropNoHandler   = "no_handler"
	DropDecodeError = "decode_error"
	DropStaleTarget = "stale_target"
	DropShutdown    = "shutdown"
	// DropBackpressure: a record that could not wait was not sent because its peer's
	// window was full.
	DropBackpressure = "backpressure"
)

// Direction of a tapped record.
type Direction string

const (
	Inbound  Direction = "in"
	Outbound Direction = "out"
)

// TapRecord is one record crossing this node's boundary, as the record tap sees it.
type TapRecord struct {
	Direction Direction
	Command   wire.Command
	From, To  NodeID
}

// RecordHandler handles one validated inbound record. It runs on the node's record
// receiver, one record at a time in arrival order, so it must hand work off (to an
// actor's mailbox, say) rather than block.
type RecordHandler func(from NodeID, rec *wire.Record)

// recordsActor validates every inbound envelope before anything dispatches it.
type recordsActor struct{ n *Node }

func (a *recordsActor) Receive(ctx actor.Context) {
	env, ok := ctx.Message().(*meshpb.Envelope)
	if !ok {
		return
	}
	defer a.n.ownPending.Add(-1) // even when a handler panics (protoactor recovers)
	a.n.receive(env)
}

// recordsMailbox is the record receiver's mailbox: it reports each envelope to the flow
// control when it arrives, before it waits in the queue.
type recordsMailbox struct {
	actor.Mailbox
	n *Node
}

func (m recordsMailbox) PostUserMessage(msg any) {
	if env, ok := msg.(*meshpb.Envelope); ok {
		if !m.n.arrived(env) {
			return // an acknowledgement only: nothing to dispatch
		}
		if len(env.Batch) > 0 {
			m.n.fanOut(env, m.Mailbox)
			return
		}
	}
	if _, ok := actor.UnwrapEnvelopeMessage(msg).(*meshpb.Envelope); ok {
		m.n.ownPending.Add(1)
	}
	m.Mailbox.PostUserMessage(msg)
}

// receiveInline handles a record of a coalesced envelope on the goroutine that
// received the envelope (the peer connection's reader), when its command's handler
// was registered with HandleInline and the record receiver holds no record, so that
// none of the sender's earlier records is still waiting there: a reply to a session
// reaches it without a hand-off to the receiver. It reports false when the record
// must go through the receiver instead.
func (n *Node) receiveInline(env *meshpb.Envelope) (handled bool) {
	f0 := env.Frames[0]
	if len(f0) <= 3 || n.ownPending.Load() != 0 {
		return false
	}
	h := n.inline[f0[3]].Load()
	if h == nil {
		return false
	}
	defer func() {
		// The receiver actor survives a handler's panic (protoactor recovers it);
		// so does the connection's reader. The record was handled (it is not posted
		// to the receiver to run again).
		if r := recover(); r != nil {
			n.log.Error("mesh: record handler panicked", "command", wire.Command(f0[3]).String(), "panic", r)
			handled = true
		}
	}()
	if from, rec, ok := n.accept(env, nil); ok {
		(*h)(from, rec)
	}
	return true
}

func (n *Node) receive(env *meshpb.Envelope) {
	from, rec, ok := n.accept(env, nil)
	if !ok {
		return
	}
	h := n.handler(rec.Command())
	if h == nil {
		n.drop(DropNoHandler, from, "no handler for command "+rec.Command().String(), nil)
		return
	}
	h(from, rec)
}

// accept: see Records.Accept; dec, when not nil, decodes the record (AcceptWith).
func (n *Node) accept(env *meshpb.Envelope, dec *wire.Decoder) (from NodeID, rec *wire.Record, ok bool) {
	from = NodeID{RID: env.FromRid, Generation: env.FromGeneration}
	to := NodeID{RID: env.ToRid, Generation: env.ToGeneration}
	if n.stopping.Load() {
		// This node chose to stop: what still arrives is expected, counted, not a fault.
		n.dropExpected(DropShutdown, from, "node shutting down")
		return from, nil, false
	}
	if to.RID != n.id.RID || to.Generation != n.id.Generation {
		detail := "addressed to another node"
		if to.RID == n.id.RID && to.Generation < n.id.Generation {
			detail = "addressed to an earlier lifecycle of this node"
		} else if to.RID == n.id.RID {
			detail = "addressed to an unknown lifecycle of this node"
		}
		n.drop(DropStaleTarget, from, detail, nil)
		return from, nil, false
	}
	if n.members.liveMember(from) == nil {
		n.drop(DropStaleTarget, from, "sender is not a current member", nil)
		return from, nil, false
	}
	var err error
	if dec != nil {
		rec, err = dec.Decode(env.Frames)
	} else {
		rec, err = wire.Decode(env.Frames)
	}
	if err != nil {
		n.drop(DropDecodeError, from, "malformed record", err)
		return from, nil, false
	}
	if from != n.id {
		// Same-node records (a binding whose Actor lives here) cross no boundary.
		n.metrics.record(rec.Command(), Inbound)
		n.tap(TapRecord{Direction: Inbound, Command: rec.Command(), From: from, To: to})
	}
	return from, rec, true
}

// dropStale: see Records.DropStale.
func (n *Node) dropStale(from NodeID, detail string) {
	n.drop(DropStaleTarget, from, detail, nil)
}

// dropExpected counts a drop that is the expected end of a race (a record that crossed
// a close or a shutdown) and logs it at debug level only.
func (n *Node) dropExpected(reason string, from NodeID, detail string) {
	n.metrics.dropped(reason)
	n.log.Debug("mesh: record dropped", "reason", reason, "from", from.String(), "detail", detail)
}

// connectionLossGrace is how long after losing the connection to a peer the mesh
// waits before it calls the loss a fault: a peer that leaves closes it, and so does
// one that dies, which membership reports within its failure detection (about 2 s
// with the LAN timing).
const connectionLossGrace = 5 * time.Second

// onEndpointEvent watches protoactor's endpoint writers, which log a lost stream at
// debug level only (protoactor patch 12): a leave closes the stream too, and membership
// reports a peer that leaves or dies. A stream lost to a member that is still the same
// live lifecycle connectionLossGrace later is a fault (a network fault, a broken
// stream): records on it may have been lost, and that is logged at warning level.
func (n *Node) onEndpointEvent(evt any) {
	ev, ok := evt.(*remote.EndpointTerminatedEvent)
	if !ok || n.stopping.Load() {
		return
	}
	mem, live := n.members.liveAt(ev.Address)
	if !live {
		return
	}
	time.AfterFunc(connectionLossGrace, func() {
		if n.stopping.Load() || n.members.liveMember(mem.ID) == nil {
			return
		}
		n.log.Warn("mesh: the connection to a live member was lost; records in flight on it may be lost",
			"rid", mem.ID.RID, "generation", mem.ID.Generation, "remote", ev.Address)
	})
}

// onDeadLetter counts envelopes addressed to an actor that no longer exists.
func (n *Node) onDeadLetter(evt any) {
	dl, ok := evt.(*actor.DeadLetterEvent)
	if !ok {
		return
	}
	msg := dl.Message
	if me, ok := msg.(*actor.MessageEnvelope); ok {
		msg = me.Message
	}
	switch m := msg.(type) {
	case *meshpb.Envelope:
		if !n.arrived(m) {
			return
		}
		if len(m.Batch) > 0 {
			// A coalesced envelope that never reached the record receiver: each record
			// is a dead letter for the actor it names.
			n.deadBatch(m)
			return
		}
		name := ""
		if dl.PID != nil {
			name = dl.PID.Id
		}
		n.deadEnvelope(m, name)
	case *outbox:
		m.undelivered()
	}
}

// deadEnvelope handles a one-record envelope for the actor named actorName that is not
// active: the undeliverable hook (Message Follow) or a drop.
func (n *Node) deadEnvelope(env *meshpb.Envelope, actorName string) {
	if fn := n.undeliverable.Load(); fn != nil && actorName != "" && (*fn)(env, actorName) {
		return
	}
	n.drop(DropStaleTarget, NodeID{RID: env.FromRid, Generation: env.FromGeneration}, "addressed to an actor that is not active", nil)
}

// onUndeliverable: see Records.OnUndeliverable.
func (n *Node) onUndeliverable(fn func(env *meshpb.Envelope, actorName string) bool) {
	n.undeliverable.Store(&fn)
}

// handle: see Records.Handle and Records.HandleInline.
func (n *Node) handle(cmd wire.Command, h RecordHandler, inline bool) {
	n.hmu.Lock()
	defer n.hmu.Unlock()
	if inline {
		n.inline[cmd].Store(&h)
	} else {
		n.inline[cmd].Store(nil)
	}
	next := make(map[wire.Command]RecordHandler, len(*n.handlers.Load())+1)
	for k, v := range *n.handlers.Load() {
		next[k] = v
	}
	next[cmd] = h
	n.handlers.Store(&next)
}

func (n *Node) handler(cmd wire.Command) RecordHandler { return (*n.handlers.Load())[cmd] }

// send: see Records.Send.
func (n *Node) send(ctx context.Context, to NodeID, rec *wire.Record) error {
	return n.sendTo(ctx, to, nil, rec, boundedWait(ctx))
}

// boundedWait is how long Send waits for window room: as long as ctx lasts when it has
// a deadline, otherwise DefaultSendWait.
func boundedWait(ctx context.Context) time.Duration {
	if _, ok := ctx.Deadline(); ok {
		return 0
	}
	return DefaultSendWait
}

// trySend: see Records.TrySend.
func (n *Node) trySend(to NodeID, rec *wire.Record) error {
	err := n.sendTo(context.Background(), to, nil, rec, -1)
	if errors.Is(err, ErrBackpressure) {
		n.metrics.dropped(DropBackpressure)
	}
	return err
}

func (n *Node) sendTo(ctx context.Context, to NodeID, pid *actor.PID, rec *wire.Record, maxWait time.Duration) error {
	if n.stopping.Load() {
		return ErrStopped
	}
	if err := checkPayload(rec); err != nil {
		return err
	}
	mem := n.members.liveMember(to)
	if mem == nil {
		return fault.Errorf(fault.Unavailable, "mesh: %s is not a live member", to)
	}
	if to != n.id && n.coalesce && (pid == nil || (pid.RequestId == 0 && pid.Address == mem.RemoteAddr)) {
		l := n.flow.link(to)
		if l == nil {
			return fault.Errorf(fault.Unavailable, "mesh: %s is not a live member", to)
		}
		target := ""
		if pid != nil {
			target = pid.Id
		}
		if err := l.enqueue(ctx, target, rec, maxWait); err != nil {
			var werr *wire.Error
			if errors.As(err, &werr) {
				return fmt.Errorf("mesh: encode %s record: %w", rec.Command(), err)
			}
			return err
		}
		n.metrics.record(rec.Command(), Outbound)
		n.tap(TapRecord{Direction: Outbound, Command: rec.Command(), From: n.id, To: to})
		return nil
	}
	frames, err := wire.Encode(rec)
	if err != nil {
		return fmt.Errorf("mesh: encode %s record: %w", rec.Command(), err)
	}
	env := &meshpb.Envelope{
		FromRid: n.id.RID, FromGeneration: n.id.Generation,
		ToRid: to.RID, ToGeneration: to.Generation,
		Frames: frames,
	}
	if pid == nil {
		pid = n.recordsPID(mem.RemoteAddr)
	}
	if to == n.id {
		// Same-node records (a binding whose Actor lives here) cross no boundary and
		// need no window.
		n.system.Root.Send(pid, env)
		return nil
	}
	l := n.flow.link(to)
	if l == nil {
		return fault.Errorf(fault.Unavailable, "mesh: %s is not a live member", to)
	}
	if err := l.send(ctx, pid, env, maxWait); err != nil {
		return err
	}
	n.metrics.record(rec.Command(), Outbound)
	n.tap(TapRecord{Direction: Outbound, Command: rec.Command(), From: n.id, To: to})
	return nil
}

func (n *Node) recordsPID(addr string) *actor.PID {
	if v, ok := n.pids.Load(addr); ok {
		return v.(*actor.PID)
	}
	v, _ := n.pids.LoadOrStore(addr, actor.NewPID(addr, recordsActorName))
	return v.(*actor.PID)
}

// setTap: see Records.SetTap.
func (n *Node) setTap(fn func(TapRecord)) {
	if fn == nil {
		n.tapFn.Store(nil)
		return
	}
	n.tapFn.Store(&fn)
}

func (n *Node) tap(r TapRecord) {
	if fn := n.tapFn.Load(); fn != nil {
		(*fn)(r)
	}
}

// drop counts a record dropped before dispatch and logs its cause (reason, sending
// RID) once per interval, with the number suppressed since.
func (n *Node) drop(reason string, from NodeID, detail string, err error) {
	n.metrics.dropped(reason)
	n.dropLog.LogFunc(n.log, slog.LevelWarn, reason+"|"+from.RID, "mesh: record dropped", func() []any {
		args := []any{"reason", reason, "from", from.String(), "detail", detail}
		if err != nil {
			args = append(args, "err", err)
		}
		return args
	})
}

// meshMetrics are the record counters. Per-record counts are atomics that an
// observable counter reads, so the record path makes no instrument call.
type meshMetrics struct {
	byCmd [256][2]atomic.Int64 // command x direction (0 in, 1 out)
	drops metric.Int64Counter
	attrs sync.Map // drop reason -> *dropReason
	reg   metric.Registration
	// sendLatency: how long the first record of each coalesced envelope waited
	// toward its peer (coalesce.go).
	sendLatency metric.Float64Histogram
}

// memberStates are the states meshnode.mesh.members reports, each always (0 too).
var memberStates = []MemberState{StateAlive, StateSuspect, StateDead, StateLeft}

func newMeshMetrics(mp metric.MeterProvider, flowStats func() FlowStats, sus *suspicionCounts, known func() []Member) (*meshMetrics, error) {
	m := &meshMetrics{}
	var err error
	zm := mp.Meter("zlink.framework")
	mm := mp.Meter("github.com/meshnode/meshnode/mesh")
	records, err := mm.Int64ObservableCounter("meshnode.mesh.records", metric.WithUnit("{record}"),
		metric.WithDescription("Service-wire records crossing this node's boundary, by command and direction."))
	if err != nil {
		return nil, err
	}
	if m.drops, err = zm.Int64Counter("zlink.mesh_node.messages.dropped", metric.WithUnit("{message}"),
		metric.WithDescription("Inbound records dropped before dispatch, by reason.")); err != nil {
		return nil, err
	}
	unacked, err := mm.Int64ObservableGauge("meshnode.mesh.peer_window.unacked", metric.WithUnit("{record}"),
		metric.WithDescription("Records sent to peers and not yet acknowledged by them (all peers)."))
	if err != nil {
		return nil, err
	}
	unackedBytes, err := mm.Int64ObservableGauge("meshnode.mesh.peer_window.unacked_bytes", metric.WithUnit("By"),
		metric.WithDescription("Bytes of the records sent to peers and not yet acknowledged by them (all peers)."))
	if err != nil {
		return nil, err
	}
	fullPeers, err := mm.Int64ObservableGauge("meshnode.mesh.peer_window.full_peers", metric.WithUnit("{node}"),
		metric.WithDescription("Peers whose window is full now: sends to them wait, sessions relaying to them do not pull."))
	if err != nil {
		return nil, err
	}
	waits, err := mm.Int64ObservableCounter("meshnode.mesh.peer_window.waits", metric.WithUnit("{record}"),
		metric.WithDescription("Sends that waited for room in a peer's window."))
	if err != nil {
		return nil, err
	}
	envelopes, err := mm.Int64ObservableCounter("meshnode.mesh.envelopes", metric.WithUnit("{envelope}"),
		metric.WithDescription("Envelopes that carried records to peers; with coalescing one carries every record queued toward its peer at the same moment."))
	if err != nil {
		return nil, err
	}
	suspected, err := mm.Int64ObservableCounter("meshnode.mesh.suspicions", metric.WithUnit("{suspicion}"),
		metric.WithDescription("Peers this node declared suspect (no ack to a probe)."))
	if err != nil {
		return nil, err
	}
	refuted, err := mm.Int64ObservableCounter("meshnode.mesh.suspicions.refuted", metric.WithUnit("{suspicion}"),
		metric.WithDescription("Suspicions of this node it refuted: false suspicions (it was alive)."))
	if err != nil {
		return nil, err
	}
	members, err := mm.Int64ObservableGauge("meshnode.mesh.members", metric.WithUnit("{node}"),
		metric.WithDescription("Members this node knows, itself included, by state: alive, suspect (its failure detector got no ack from it), dead (failed), left; the departed are forgotten after 256."))
	if err != nil {
		return nil, err
	}
	if m.sendLatency, err = mm.Float64Histogram("meshnode.mesh.record.send_latency", metric.WithUnit("s"),
		metric.WithDescription("How long records waited toward a peer before their envelope was handed to gRPC: the first record of each coalesced envelope, which waited longest."),
		metric.WithExplicitBucketBoundaries(histogram.Seconds...)); err != nil {
		return nil, err
	}
	stateAttrs := make([]metric.ObserveOption, len(memberStates))
	for i, st := range memberStates {
		stateAttrs[i] = metric.WithAttributes(attribute.String("state", string(st)))
	}
	dirs := [2]string{string(Inbound), string(Outbound)}
	m.reg, err = mm.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		var byState [4]int64
		for _, mem := range known() {
			if i := slices.Index(memberStates, mem.State); i >= 0 {
				byState[i]++
			}
		}
		for i := range memberStates {
			o.ObserveInt64(members, byState[i], stateAttrs[i])
		}
		o.ObserveInt64(suspected, sus.suspected.Load())
		o.ObserveInt64(refuted, sus.refuted.Load())
		fs := flowStats()
		o.ObserveInt64(unacked, int64(fs.Unacked))
		o.ObserveInt64(unackedBytes, fs.UnackedBytes)
		o.ObserveInt64(fullPeers, int64(fs.FullPeers))
		o.ObserveInt64(waits, fs.Waits)
		o.ObserveInt64(envelopes, fs.Envelopes)
		for cmd := range m.byCmd {
			for d := range dirs {
				if v := m.byCmd[cmd][d].Load(); v > 0 {
					o.ObserveInt64(records, v, metric.WithAttributes(
						attribute.String("command", wire.Command(cmd).String()), attribute.String("direction", dirs[d])))
				}
			}
		}
		return nil
	}, records, unacked, unackedBytes, fullPeers, waits, envelopes, suspected, refuted, members)
	if err != nil {
		return nil, err
	}
	return m, nil
}

func (m *meshMetrics) unregister() {
	if m.reg != nil {
		_ = m.reg.Unregister()
	}
}

func (m *meshMetrics) record(cmd wire.Command, dir Direction) {
	d := 0
	if dir == Outbound {
		d = 1
	}
	m.byCmd[cmd][d].Add(1)
}

// dropReason is one drop reason's metric attribute and its count, kept as a plain
// number too so that Records.Counts can read it without a metric reader.
type dropReason struct {
	opt metric.AddOption
	n   atomic.Int64
}

// dropCount is how many inbound messages were dropped for reason.
func (m *meshMetrics) dropCount(reason string) int64 {
	if v, ok := m.attrs.Load(reason); ok {
		return v.(*dropReason).n.Load()
	}
	return 0
}

func (m *meshMetrics) dropped(reason string) {
	v, ok := m.attrs.Load(reason)
	if !ok {
		v, _ = m.attrs.LoadOrStore(reason, &dropReason{opt: metric.WithAttributes(attribute.String("reason", reason))})
	}
	d := v.(*dropReason)
	d.n.Add(1)
	m.drops.Add(context.Background(), 1, d.opt)
}
