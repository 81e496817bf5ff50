package mesh

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/meshnode/meshnode/mesh/meshpb"
	"github.com/meshnode/meshnode/mesh/wire"
)

// recordsActorName is the name of each node's record receiver actor.
const recordsActorName = "$records"

// Errors of the record transport.
var (
	// ErrUnavailable: the addressed node lifecycle is not a live member, so the record
	// was not sent (never re-sent elsewhere).
	ErrUnavailable = errors.New("mesh: target node unavailable")
	// ErrStopped: this node is shutting down.
	ErrStopped = errors.New("mesh: node stopped")
)

// Drop reasons of zlink.mesh_node.messages.dropped (digest §10).
const (
	DropNoHandler   = "no_handler"
	DropDecodeError = "decode_error"
	DropStaleTarget = "stale_target"
	DropShutdown    = "shutdown"
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
	a.n.receive(env)
}

func (n *Node) receive(env *meshpb.Envelope) {
	from := NodeID{RID: env.FromRid, Generation: env.FromGeneration}
	to := NodeID{RID: env.ToRid, Generation: env.ToGeneration}
	if n.stopping.Load() {
		n.drop(DropShutdown, from, "node shutting down", nil)
		return
	}
	if to.RID != n.id.RID || to.Generation != n.id.Generation {
		detail := "addressed to another node"
		if to.RID == n.id.RID && to.Generation < n.id.Generation {
			detail = "addressed to an earlier lifecycle of this node"
		} else if to.RID == n.id.RID {
			detail = "addressed to an unknown lifecycle of this node"
		}
		n.drop(DropStaleTarget, from, detail, nil)
		return
	}
	if _, live := n.members.live(from); !live {
		n.drop(DropStaleTarget, from, "sender is not a current member", nil)
		return
	}
	rec, err := wire.Decode(env.Frames)
	if err != nil {
		n.drop(DropDecodeError, from, "malformed record", err)
		return
	}
	h := n.handler(rec.Command())
	if h == nil {
		n.drop(DropNoHandler, from, "no handler for command "+rec.Command().String(), nil)
		return
	}
	n.metrics.record(rec.Command(), Inbound)
	n.tap(TapRecord{Direction: Inbound, Command: rec.Command(), From: from, To: to})
	h(from, rec)
}

// Handle registers the handler of one command. A later call replaces it.
func (n *Node) Handle(cmd wire.Command, h RecordHandler) {
	n.hmu.Lock()
	defer n.hmu.Unlock()
	next := make(map[wire.Command]RecordHandler, len(*n.handlers.Load())+1)
	for k, v := range *n.handlers.Load() {
		next[k] = v
	}
	next[cmd] = h
	n.handlers.Store(&next)
}

func (n *Node) handler(cmd wire.Command) RecordHandler { return (*n.handlers.Load())[cmd] }

// Send sends a record to the node lifecycle to. It fails with ErrUnavailable, without
// sending, when to is not a live member; delivery is otherwise at most once (remote
// sends are one-way; the spec's replies are records too).
func (n *Node) Send(to NodeID, rec *wire.Record) error {
	if n.stopping.Load() {
		return ErrStopped
	}
	mem, ok := n.members.live(to)
	if !ok {
		return fmt.Errorf("%w: %s", ErrUnavailable, to)
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
	n.metrics.record(rec.Command(), Outbound)
	n.tap(TapRecord{Direction: Outbound, Command: rec.Command(), From: n.id, To: to})
	n.system.Root.Send(n.recordsPID(mem.RemoteAddr), env)
	return nil
}

// SendToRID sends to the current lifecycle of rid.
func (n *Node) SendToRID(rid string, rec *wire.Record) error {
	mem, ok := n.members.lookup(rid)
	if !ok {
		return fmt.Errorf("%w: %s", ErrUnavailable, rid)
	}
	return n.Send(mem.ID, rec)
}

// SendEnvelope sends a hand-built envelope as is, with no membership check: for tests
// that play a misbehaving or stale peer.
func (n *Node) SendEnvelope(remoteAddr string, env *meshpb.Envelope) {
	n.system.Root.Send(n.recordsPID(remoteAddr), env)
}

func (n *Node) recordsPID(addr string) *actor.PID {
	if v, ok := n.pids.Load(addr); ok {
		return v.(*actor.PID)
	}
	v, _ := n.pids.LoadOrStore(addr, actor.NewPID(addr, recordsActorName))
	return v.(*actor.PID)
}

// SetTap installs fn to see every record crossing this node's boundary (nil removes).
func (n *Node) SetTap(fn func(TapRecord)) {
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

// drop counts a record dropped before dispatch and logs its cause once per interval.
func (n *Node) drop(reason string, from NodeID, detail string, err error) {
	n.metrics.dropped(reason)
	n.dropLog.log(n.log, reason, from, detail, err)
}

// dropLogger logs each (reason, peer) cause once per interval, counting the rest.
type dropLogger struct {
	mu   sync.Mutex
	seen map[string]*dropCause
}

type dropCause struct {
	last       time.Time
	suppressed int
}

const dropLogInterval = time.Minute

func (d *dropLogger) log(log interface {
	Warn(string, ...any)
}, reason string, from NodeID, detail string, err error) {
	key := reason + "|" + from.RID
	now := time.Now()
	d.mu.Lock()
	if d.seen == nil {
		d.seen = map[string]*dropCause{}
	}
	c := d.seen[key]
	if c != nil && now.Sub(c.last) < dropLogInterval {
		c.suppressed++
		d.mu.Unlock()
		return
	}
	suppressed := 0
	if c == nil {
		if len(d.seen) > 1024 {
			d.seen = map[string]*dropCause{} // bound the memory of causes
		}
		c = &dropCause{}
		d.seen[key] = c
	} else {
		suppressed = c.suppressed
	}
	c.last, c.suppressed = now, 0
	d.mu.Unlock()
	args := []any{"reason", reason, "from", from.String(), "detail", detail}
	if err != nil {
		args = append(args, "err", err)
	}
	if suppressed > 0 {
		args = append(args, "suppressed_since_last", suppressed)
	}
	log.Warn("mesh: record dropped", args...)
}

// meshMetrics are the record counters. Attribute sets are built once per command.
type meshMetrics struct {
	records metric.Int64Counter
	drops   metric.Int64Counter
	byCmd   [256][2]atomic.Pointer[metric.AddOption] // command x direction
	attrs   sync.Map                                 // drop reason -> metric.AddOption
}

func newMeshMetrics(mp metric.MeterProvider) (*meshMetrics, error) {
	m := &meshMetrics{}
	var err error
	zm := mp.Meter("zlink.framework")
	mm := mp.Meter("github.com/meshnode/meshnode/mesh")
	if m.records, err = mm.Int64Counter("meshnode.mesh.records", metric.WithUnit("{record}"),
		metric.WithDescription("Service-wire records crossing this node's boundary, by command and direction.")); err != nil {
		return nil, err
	}
	if m.drops, err = zm.Int64Counter("zlink.mesh_node.messages.dropped", metric.WithUnit("{message}"),
		metric.WithDescription("Inbound records dropped before dispatch, by reason.")); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *meshMetrics) record(cmd wire.Command, dir Direction) {
	d := 0
	if dir == Outbound {
		d = 1
	}
	slot := &m.byCmd[cmd][d]
	opt := slot.Load()
	if opt == nil {
		o := metric.AddOption(metric.WithAttributes(attribute.String("command", cmd.String()), attribute.String("direction", string(dir))))
		slot.CompareAndSwap(nil, &o)
		opt = slot.Load()
	}
	m.records.Add(context.Background(), 1, *opt)
}

func (m *meshMetrics) dropped(reason string) {
	v, ok := m.attrs.Load(reason)
	if !ok {
		v, _ = m.attrs.LoadOrStore(reason, metric.WithAttributes(attribute.String("reason", reason)))
	}
	m.drops.Add(context.Background(), 1, v.(metric.AddOption))
}
