package binding

import (
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/meshnode/meshnode/actor"
	"github.com/meshnode/meshnode/fault"
	"github.com/meshnode/meshnode/internal/ratelog"
	"github.com/meshnode/meshnode/internal/traceprop"
	"github.com/meshnode/meshnode/mesh"
	"github.com/meshnode/meshnode/mesh/wire"
	"github.com/meshnode/meshnode/session"
	"github.com/meshnode/meshnode/session/codec"
)

// Errors of the binding surface (digest §7.5, §7.16), each of a fault kind. Where the
// binding fails for a class the error model already names (the Actor is unavailable or
// not found, the bind names another ObjectGeneration), the error is of that kind
// (errors.Is(err, fault.Unavailable), fault.NotFound, fault.InvalidOperation), with the
// cause wrapped.
var (
	// ErrNotBound: push, close or relay without a current binding (session-not-bound,
	// kind InvalidOperation; retryable after a bind). The same value as actor.ErrNotBound.
	// A relay's error names what the session is (not) bound to.
	ErrNotBound = actor.ErrNotBound
	// ErrSessionClosing: the session is closing (replaced or disconnected).
	ErrSessionClosing = fault.New(fault.ShuttingDown, "binding: session closing")
	// ErrTimeout: the bind terminal did not arrive before the deadline.
	ErrTimeout = fault.New(fault.DeadlineExceeded, "binding: bind timed out")
	// ErrTooManyBindings: the session is at its bindings bound (MaxBindingsPerSession).
	ErrTooManyBindings = fault.New(fault.CapacityExceeded, "binding: too many bindings for one session")
	// ErrBindingLost: a relay to an Actor whose binding of this session ended without
	// the session asking (its node failed or left the mesh, the Actor stopped): kind
	// Unavailable, retryable by binding again. The message names the Actor and why.
	ErrBindingLost = fault.New(fault.Unavailable, "binding: the binding ended")
	// ErrLocationStale: the bind named a location of the Actor that is no longer its
	// authority (conflict / actorLocationStale: it moved away and back, say). Binder.Bind
	// drops the cached route and looks the Actor up again; Session.Bind, which is given a
	// route, returns it (kind Unavailable).
	ErrLocationStale = fault.New(fault.Unavailable, "binding: the Actor is no longer at the location the bind named")
)

// Defaults of the binding protocol.
const (
	// DefaultReplacementCallbackTimeout bounds the binding-replaced callback (§7.10 9).
	DefaultReplacementCallbackTimeout = 30 * time.Second
	// ReplacementCloseDelay is the fixed delay between the replaced callback's terminal
	// and the close of the replaced session (§7.10 7).
	ReplacementCloseDelay = 100 * time.Millisecond
	// DefaultBindTimeout bounds a bind whose context has no deadline.
	DefaultBindTimeout = 5 * time.Second
	// DefaultOwnerID is the session owner id this node puts in retired-session fences.
	DefaultOwnerID = "meshnode-session"
	// DefaultMaxRelayedRequests bounds a session's relayed Requests awaiting replies.
	DefaultMaxRelayedRequests = 128
	// DefaultRelayTimeout bounds how long a relayed Request waits for its reply.
	DefaultRelayTimeout = 30 * time.Second
	// DefaultMaxBindingsPerSession bounds the Actors one session may be bound to.
	DefaultMaxBindingsPerSession = 1000
)

// Options configures a Binder.
type Options struct {
	// OwnerID identifies the session-owner runtime in retired-session fences (record
	// 51). Every node of a mesh must use the same value. Default DefaultOwnerID.
	OwnerID string
	// ReplacementCallbackTimeout bounds the binding-replaced callback (default 30 s).
	ReplacementCallbackTimeout time.Duration
	// Codecs maps payload content types to STREAM codec numbers (default
	// codec.NewRegistry()).
	Codecs *codec.Registry
	Logger *slog.Logger
	// MeterProvider receives the binding instruments. nil: otel's global.
	MeterProvider metric.MeterProvider
	// MaxRelayedRequests bounds the relayed Requests of one session awaiting their
	// replies (default 128). At the bound the session stops pulling packets (its client
	// stalls in TCP) until replies come back.
	MaxRelayedRequests int
	// RelayTimeout bounds how long a relayed Request waits for its reply (default
	// 30 s); past it the client gets an Error with code deadline_exceeded, and a late
	// reply is dropped. Negative: no timeout.
	RelayTimeout time.Duration
	// MaxBindingsPerSession bounds the Actors one session may be bound to at once
	// (default 1,000); a bind past it fails with ErrTooManyBindings.
	MaxBindingsPerSession int
	// RelayWindow and RelayWindowBytes bound the packets (default 4,096) and payload
	// bytes (default 4 MiB) a session relayed to its bound Actors that they have not
	// consumed yet: at either the session stops pulling (window.go). Keep them under
	// the Actor host's mailbox bounds.
	RelayWindow      int
	RelayWindowBytes int64
	// SessionRelocationSealTimeout bounds how long a session holds the relays to one of
	// its Actors while that Actor moves to another node (sealed by record 42, released
	// by 44): past it without the route update the session is closed and the held
	// relays are dropped (default 3 s; digest §7.13). Not positive: the default.
	SessionRelocationSealTimeout time.Duration
	// TracerProvider traces relays (docs/binding.md, "Trace context"): a relayed
	// packet's trace context rides in record 24, the Actor's turn runs in a span
	// parented on it, and the reply carries the turn's context back. nil (or otel's
	// no-op provider): no spans, and nothing traced crosses the wire from this node.
	TracerProvider trace.TracerProvider
}

// Binder runs both roles of the binding protocol on one mesh node.
type Binder struct {
	node   *mesh.Node
	actors *actor.Host
	opts   Options
	log    *slog.Logger

	nextGen  atomic.Uint64 // binding generations: monotonic within this node lifecycle
	nextCorr atomic.Uint64

	mu        sync.Mutex
	sessions  map[session.RoutingID]*Session
	byGen     map[uint64]*Session // current binding generation -> its session
	pending   map[uint64]*pendingOp
	sealWaits map[wire.RelocationID]*sealWait   // Actor owner: seals (42) waiting for their 43
	controls  map[string]func(*Session, []byte) // session owner: control packets of layers above (HandleControl)

	drops       dropCounters
	unsubscribe func()
	metricsReg  metric.Registration
	// relayLatency: relayed Requests from relay to reply (metrics.go).
	relayLatency metric.Float64Histogram
	ratelog      ratelog.Limiter

	tracer      trace.Tracer // nil: tracing off
	badCarriers *traceprop.BadCarriers
}

// pendingOp is a 38 waiting for its 20.
type pendingOp struct {
	s         *Session
	fence     actor.RouteFence
	gen       uint64
	tombstone bool
	done      chan error
}

// New starts the binding protocol on node, for the Actors of actors.
func New(node *mesh.Node, actors *actor.Host, opts Options) *Binder {
	if opts.OwnerID == "" {
		opts.OwnerID = DefaultOwnerID
	}
	if opts.ReplacementCallbackTimeout <= 0 {
		opts.ReplacementCallbackTimeout = DefaultReplacementCallbackTimeout
	}
	if opts.Codecs == nil {
		opts.Codecs = codec.NewRegistry()
	}
	if opts.Logger == nil {
		opts.Logger = node.Logger()
	}
	if opts.MaxRelayedRequests <= 0 {
		opts.MaxRelayedRequests = DefaultMaxRelayedRequests
	}
	if opts.RelayTimeout == 0 {
		opts.RelayTimeout = DefaultRelayTimeout
	}
	if opts.MaxBindingsPerSession <= 0 {
		opts.MaxBindingsPerSession = DefaultMaxBindingsPerSession
	}
	if opts.RelayWindow <= 0 {
		opts.RelayWindow = DefaultRelayWindow
	}
	if opts.RelayWindowBytes <= 0 {
		opts.RelayWindowBytes = DefaultRelayWindowBytes
	}
	if opts.SessionRelocationSealTimeout <= 0 {
		opts.SessionRelocationSealTimeout = DefaultSessionRelocationSealTimeout
	}
	b := &Binder{
		node: node, actors: actors, opts: opts, log: opts.Logger,
		sessions:  map[session.RoutingID]*Session{},
		byGen:     map[uint64]*Session{},
		pending:   map[uint64]*pendingOp{},
		sealWaits: map[wire.RelocationID]*sealWait{},
	}
	// Session-owner role: terminals, pushes and replacements arrive at the node (bind
	// terminals through the Actor host, which owns record 20).
	actors.HandleReplies(b.onReply)
	node.Records().HandleInline(wire.CmdBoundSessionSend, b.onPush)
	node.Records().Handle(wire.CmdBoundSessionReplaced, b.onReplaced)
	// The relocation barrier (relocation.go): seals and route updates arrive at the
	// session owner, the seal's confirmation at the Actor owner (move.go).
	node.Records().Handle(wire.CmdSessionRelocationSeal, b.onSeal)
	node.Records().Handle(wire.CmdSessionRelocationRoute, b.onRoute)
	node.Records().Handle(wire.CmdSessionRelocationSealed, b.onSealed)
	// Actor-owner role: binds and relays are addressed to the activation itself and
	// handled in its turn.
	actors.HandleActorRecord(wire.CmdBoundSessionBind, b.onBind)
	actors.HandleActorRecord(wire.CmdActorSend, b.onRelay)
	actors.HandleMissingActor(b.onMissingActor)
	actors.HandleRejected(b.onRejected)
	actors.HandleStop(b.onActorStop)
	actors.HandleMove(actor.MoveHooks{
		Seal: b.sealMove, Capture: b.captureMove, Restore: b.restoreMove,
		Committed: b.moveCommitted, Aborted: b.moveAborted,
	})
	actors.SetSessionBridge(bridge{b: b})
	b.unsubscribe = node.Membership().Subscribe(b.onMembership)
	mp := opts.MeterProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	if b.tracer = traceprop.Tracer(opts.TracerProvider, tracerName); b.tracer != nil {
		b.badCarriers = traceprop.NewBadCarriers(mp, "github.com/meshnode/meshnode/binding")
	}
	if err := b.registerMetrics(mp); err != nil {
		b.log.Warn("binding: metrics not registered", "err", err)
	}
	return b
}

// Stop stops following membership and exporting metrics. Sessions and bindings end
// with their sessions.
func (b *Binder) Stop() {
	b.unsubscribe()
	if b.metricsReg != nil {
		_ = b.metricsReg.Unregister()
	}
}

// Node returns the mesh node.
func (b *Binder) Node() *mesh.Node { return b.node }

// Actors returns the Actor host.
func (b *Binder) Actors() *actor.Host { return b.actors }

// sessionRID is the session's identity on the wire: its routing ID, unique among the
// live sessions of this node lifecycle (the node generation tells lifecycles apart).
func sessionRID(id session.RoutingID) string { return "s" + strconv.FormatUint(uint64(id), 10) }

// dropCounters count what the binding rejects before application code, and the
// relayed Requests it failed on its own.
type dropCounters struct {
	stalePush, staleRelay, staleReplaced, lateReply atomic.Int64
	relayTimeouts, peerFailures, bindsRefused       atomic.Int64
	bindTimeouts                                    atomic.Int64

	// The relocation barrier (relocation.go, move.go).
	seals, commits, aborts, sealTimeouts atomic.Int64
	lateRoutes, relocationProtocolErrors atomic.Int64
	staleSeals                           atomic.Int64 // 42s and 43s that name no current binding or waiting seal
	sealsGone                            atomic.Int64 // 42s answered at once: their session or binding is gone
}

// Drops reports the records this node's binding rejected, by kind (for tests and
// operators).
func (b *Binder) Drops() (stalePush, staleRelay, staleReplaced, lateReply int64) {
	return b.drops.stalePush.Load(), b.drops.staleRelay.Load(), b.drops.staleReplaced.Load(), b.drops.lateReply.Load()
}

func (b *Binder) rejected(counter *atomic.Int64, from mesh.NodeID, what string) {
	counter.Add(1)
	b.node.Records().DropStale(from, what)
}

// Stats counts the binding state this node holds (for tests and operators).
type Stats struct {
	Sessions        int   // sessions with binding state
	Bindings        int   // current bindings of those sessions (session-owner side)
	Pending         int   // 38s waiting for their terminal
	RelayedRequests int   // relayed Requests waiting for their replies
	Relayed         int   // relayed packets their Actors have not consumed yet (window.go)
	RelayTimeouts   int64 // relayed Requests failed with deadline_exceeded
	BindTimeouts    int64 // binds whose context ended before the Actor side answered (a tombstone followed)
	PeerFailures    int64 // relayed Requests and binds failed because their node failed

	// The relocation barrier, session-owner side (docs/binding.md, "During a
	// relocation"). Held is a gauge; the rest count since the binder started.
	Held                     int   // relays held by relocation seals now
	RelocationSeals          int64 // seals installed (42 applied)
	RelocationCommits        int64 // route switched to the target (44 commit applied)
	RelocationAborts         int64 // seals released to the source (44 abort applied)
	SealTimeouts             int64 // sessions closed because no 44 came within the seal timeout
	LateRouteUpdates         int64 // 44s ignored: late, another relocation, or the session gone
	RelocationProtocolErrors int64 // 42s and 44s repeating a relocation with other content
	StaleSeals               int64 // 42s (and 43s on the Actor owner) ignored: no such binding or seal
	SealsForGoneSessions     int64 // 42s answered at once: the session (or that binding of it) is gone
}

// Stats returns the current counts.
func (b *Binder) Stats() Stats {
	b.mu.Lock()
	sessions := make([]*Session, 0, len(b.sessions))
	for _, s := range b.sessions {
		sessions = append(sessions, s)
	}
	st := Stats{Sessions: len(b.sessions), Pending: len(b.pending),
		RelayTimeouts: b.drops.relayTimeouts.Load(), BindTimeouts: b.drops.bindTimeouts.Load(), PeerFailures: b.drops.peerFailures.Load(),
		RelocationSeals: b.drops.seals.Load(), RelocationCommits: b.drops.commits.Load(),
		RelocationAborts: b.drops.aborts.Load(), SealTimeouts: b.drops.sealTimeouts.Load(),
		LateRouteUpdates: b.drops.lateRoutes.Load(), RelocationProtocolErrors: b.drops.relocationProtocolErrors.Load(),
		StaleSeals: b.drops.staleSeals.Load(), SealsForGoneSessions: b.drops.sealsGone.Load()}
	b.mu.Unlock()
	for _, s := range sessions {
		s.mu.Lock()
		st.Bindings += len(s.binds)
		st.RelayedRequests += len(s.requests)
		st.Relayed += int(s.relayedCount.Load())
		for _, bd := range s.binds {
			if bd.hold != nil {
				st.Held += len(bd.hold.held)
			}
		}
		s.mu.Unlock()
	}
	return st
}
