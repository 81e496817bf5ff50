package actor

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	proto "github.com/meshnode/meshnode/internal/protoactor/actor"
	"github.com/meshnode/meshnode/internal/protoactor/eventstream"
	"github.com/meshnode/meshnode/internal/workpool"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"

	"github.com/meshnode/meshnode/fault"
	"github.com/meshnode/meshnode/internal/nodert"
	"github.com/meshnode/meshnode/internal/ratelog"
	"github.com/meshnode/meshnode/mesh"
	"github.com/meshnode/meshnode/mesh/meshpb"
	"github.com/meshnode/meshnode/mesh/wire"
	"github.com/meshnode/meshnode/session/codec"
	"github.com/meshnode/meshnode/store"
)

// Errors of Actor hosting and lookup.
var (
	ErrUnknownKind  = fault.New(fault.NotFound, "actor: unknown kind")
	ErrKindMismatch = fault.New(fault.TypeMismatch, "actor: ActorId is active under another kind")
	ErrStale        = fault.New(fault.Unavailable, "actor: stale route fence")
	ErrNotFound     = fault.New(fault.NotFound, "actor: not active")
	ErrBadID        = fault.New(fault.InvalidOperation, "actor: invalid ActorId")
	ErrClosed       = fault.New(fault.ShuttingDown, "actor: host closed")
	// ErrMailboxFull: the Actor's mailbox is at its bound (MaxMailbox messages or
	// MaxMailboxBytes); the message was not queued (digest §9.5: capacity exceeded).
	ErrMailboxFull = fault.New(fault.CapacityExceeded, "actor: mailbox full")
)

// HostOptions configures a Host.
type HostOptions struct {
	// Directory answers where Actors live. nil: the embedded rendezvous directory.
	Directory Directory
	Logger    *slog.Logger
	// MeterProvider receives the Actor host's instruments. nil: otel's global.
	MeterProvider metric.MeterProvider
	// MaxMailbox and MaxMailboxBytes bound each activation's queued messages (0:
	// DefaultMaxMailbox, DefaultMaxMailboxBytes). A local send to a full mailbox fails
	// with ErrMailboxFull; a message from another node is refused (a relayed Request is
	// answered capacity_exceeded, anything else is dropped and counted).
	MaxMailbox      int
	MaxMailboxBytes int64
	// IdleTimeout deactivates an activation that has no session binding and received
	// no message for this long, through the normal stop path (default
	// DefaultIdleTimeout; negative: never).
	IdleTimeout time.Duration
	// Messages are the message types Actors of this node send and receive (MessageOf).
	// A type missing here cannot be sent; a name missing here arrives as a *Message.
	Messages []MessageType
	// Codecs encodes message types and relayed session payloads (default
	// codec.NewRegistry(): raw, JSON, msgpack, protobuf).
	Codecs *codec.Registry
	// MaxPanics and PanicWindow are the panic policy: an activation whose turns panic
	// MaxPanics times (default 3) within PanicWindow (default 1 minute) is stopped, and
	// its bound session is told. Each panic is logged and counted, and the request it
	// was handling (if any) gets an internal_failure error reply.
	MaxPanics   int
	PanicWindow time.Duration
	// Store keeps the state of the kinds that persist it (Kind.Persist); nil: none,
	// and registering such a kind fails. The host does not close it.
	Store store.Store
	// StoreTimeout bounds one store operation (default DefaultStoreTimeout): a save
	// that takes longer fails with an unknown outcome.
	StoreTimeout time.Duration
}

// DefaultIdleTimeout is how long an unbound, silent activation lives.
const DefaultIdleTimeout = 5 * time.Minute

// Host runs the Actors of one mesh node.
type Host struct {
	node   *mesh.Node
	system *proto.ActorSystem
	pool   *workpool.Pool // runs activation turns on goroutines whose stacks have grown
	log    *slog.Logger
	dir    Directory
	rdir   *RendezvousDirectory // the built-in directory (nil with another Directory)
	quorum *quorum

	mu         sync.Mutex
	kinds      map[string]Kind
	acts       map[string]*activation    // by ActorId
	systemActs int                       // of acts, those of the runtime's own kinds (IsSystemKind)
	departing  map[string]DirectoryEntry // moved away, target not committed yet
	leaving    map[string]*activation    // by name: out of acts, process not stopped yet (see spawn)
	closed     bool

	unsubscribe func()
	dirPID      *proto.PID

	codecs   *codec.Registry
	messages messageTypes
	routeMu  sync.Mutex
	routes   map[Address]RouteFence // resolved Addresses; forgotten on failure and membership change
	// staleRoutes are fences that named no activation, by Address: the next look-up
	// asks the directory to check them.
	staleRoutes map[Address]RouteFence
	calls       pendingCalls

	maxPanics   int
	panicWindow time.Duration
	panics      atomic.Int64
	stoppedBad  atomic.Int64

	addrMu   sync.Mutex
	addrs    map[addrKey]*cachedAddr    // remote activations' addresses, resolved once
	lastAddr atomic.Pointer[cachedAddr] // the last one used: a stream of sends to one Actor skips the map

	turnHandlers turnHandlers
	missing      func(from mesh.NodeID, rec *wire.Record)
	onStop       func(t *Turn)
	onRejected   func(from mesh.NodeID, rec *wire.Record)
	otherReplies mesh.RecordHandler
	moveLayers   []moveLayer

	// Directory and relocation work the host owns: tasks end with closing, Close
	// waits for them.
	closing      context.Context
	stopClosing  context.CancelFunc
	tasks        sync.WaitGroup
	taskSlots    chan struct{}
	followMu     sync.Mutex
	follows      map[string]follow // Message Follow routes, by the moved activation's name
	moves        atomic.Int64
	movesFailed  atomic.Int64
	movesRefused atomic.Int64
	followed     atomic.Int64
	duplicates   atomic.Int64
	dirPulls     atomic.Int64 // Stats.DirectoryPulls
	stopWaits    atomic.Int64 // Stats.StopWaits
	dirBusy      atomic.Int64 // Stats.DirectoryBusy
	reqTimedOut  atomic.Int64 // Stats.RequestsTimedOut
	draining     atomic.Bool
	failMu       sync.Mutex
	failedAt     map[mesh.NodeID]time.Time // members that failed, for the failover margin
	deadFollowed *eventstream.Subscription
	bridge       SessionBridge
	topics       TopicBridge

	maxMailbox      int
	maxMailboxBytes int64
	idleTimeout     time.Duration
	ratelog         ratelog.Limiter
	mailboxRejected atomic.Int64
	collected       atomic.Int64
	clock           atomic.Int64 // unix nanos, advanced by the sweeper: a turn stamps its activity without reading the clock
	metricsReg      metric.Registration
	store           store.Store
	storeTimeout    time.Duration
	storeCounts     storeCounts
	activating      map[string]chan struct{} // ids of persisting kinds claiming their record (activateLocal)
	turnDuration    metric.Float64Histogram  // sampled Actor turn durations (collect.go)
	stopSweep       chan struct{}
	sweepDone       chan struct{}
}

type addrKey struct {
	node mesh.NodeID
	ref  Ref
}

// maxCachedAddrs bounds the address cache; it is simply cleared when full.
const maxCachedAddrs = 1 << 16

// cachedAddr is one resolved remote activation address.
type cachedAddr struct {
	key  addrKey
	addr mesh.ActorAddr
}

func (h *Host) remoteAddr(to RouteFence) (mesh.ActorAddr, error) {
	k := addrKey{node: to.Node, ref: to.Ref}
	if last := h.lastAddr.Load(); last != nil && last.key == k {
		return last.addr, nil
	}
	h.addrMu.Lock()
	c, ok := h.addrs[k]
	h.addrMu.Unlock()
	if ok {
		h.lastAddr.Store(c)
		return c.addr, nil
	}
	addr, err := h.node.Records().ActorAddr(to.Node, activationName(to.Ref))
	if err != nil {
		return mesh.ActorAddr{}, err
	}
	c = &cachedAddr{key: k, addr: addr}
	h.addrMu.Lock()
	if len(h.addrs) >= maxCachedAddrs {
		h.addrs = map[addrKey]*cachedAddr{}
	}
	h.addrs[k] = c
	h.addrMu.Unlock()
	h.lastAddr.Store(c)
	return addr, nil
}

// activation is one live Actor.
type activation struct {
	kind  string
	def   Kind
	fence RouteFence
	pid   *proto.PID
	// former is the fence the Actor had on the node it moved from: records addressed to
	// it (held by the source, or forwarded by Message Follow) are its own.
	former   *RouteFence
	moved    bool        // it arrived by a move (set before it is published)
	moving   atomic.Bool // a move from here is in progress
	arriving atomic.Bool // moved here, not committed yet: dispatch closed
	// arrived is closed when an arriving activation commits (nil for one placed here):
	// a drain waits for it before moving the Actor on.
	arrived chan struct{}
	// persist is its hold on its record in the store (nil: the kind does not persist).
	persist *persistState

	queued      atomic.Int64 // messages in its mailbox (records and Actor messages)
	queuedBytes atomic.Int64
	lastActive  atomic.Int64 // unix nanos of its last turn
	keepActive  atomic.Bool  // a layer above holds it (a session binding): not collected
	stayActive  atomic.Bool  // the Actor holds itself (Context.StayActive): not collected

	ctx    context.Context // the Actors' turn context: cancelled when the activation stops
	cancel context.CancelFunc
	// gone is closed once its protoactor process has stopped and its name is free.
	gone chan struct{}
}

// stop cancels the activation's context (a turn blocked on it returns) and stops it.
func (h *Host) stop(a *activation) {
	a.cancel()
	h.system.Root.Stop(a.pid)
}

// ActiveActor describes one activation for operators (/v1/actors).
type ActiveActor struct {
	ID               string `json:"id"`
	Kind             string `json:"kind"`
	ObjectGeneration uint64 `json:"objectGeneration"`
	// Arriving: it is arriving by a move that has not committed (its dispatch is
	// closed; the Actor still serves on its source, or the move is being abandoned).
	Arriving bool `json:"arriving,omitempty"`
	// Moving: a move of it away from this node is under way (Relocate, a drain).
	Moving bool `json:"moving,omitempty"`
	// Held: it is kept from idle collection, by a session binding or by itself
	// (Context.StayActive).
	Held bool `json:"held,omitempty"`
}

// NewHost starts the Actor host of node: it receives record 24, serves directory
// lookups from other nodes and follows membership to give up Actors that placement
// moves elsewhere.
func NewHost(node *mesh.Node, opts HostOptions) (*Host, error) {
	h := &Host{node: node, system: nodert.SystemOf(node), pool: workpool.New(300), log: opts.Logger, kinds: map[string]Kind{}, acts: map[string]*activation{}, leaving: map[string]*activation{}, addrs: map[addrKey]*cachedAddr{},
		maxMailbox: opts.MaxMailbox, maxMailboxBytes: opts.MaxMailboxBytes, idleTimeout: opts.IdleTimeout}
	if h.log == nil {
		h.log = node.Logger()
	}
	if h.maxMailbox <= 0 {
		h.maxMailbox = DefaultMaxMailbox
	}
	if h.maxMailboxBytes <= 0 {
		h.maxMailboxBytes = DefaultMaxMailboxBytes
	}
	if h.idleTimeout == 0 {
		h.idleTimeout = DefaultIdleTimeout
	}
	h.codecs = opts.Codecs
	if h.codecs == nil {
		h.codecs = codec.NewRegistry()
	}
	if err := h.messages.register(h.codecs, opts.Messages); err != nil {
		return nil, err
	}
	h.routes = map[Address]RouteFence{}
	h.staleRoutes = map[Address]RouteFence{}
	h.maxPanics, h.panicWindow = opts.MaxPanics, opts.PanicWindow
	if h.maxPanics <= 0 {
		h.maxPanics = DefaultMaxPanics
	}
	if h.panicWindow <= 0 {
		h.panicWindow = DefaultPanicWindow
	}
	h.store, h.storeTimeout = opts.Store, opts.StoreTimeout
	if h.storeTimeout <= 0 {
		h.storeTimeout = DefaultStoreTimeout
	}
	h.activating = map[string]chan struct{}{}
	h.clock.Store(time.Now().UnixNano())
	h.closing, h.stopClosing = context.WithCancel(context.Background())
	h.taskSlots = make(chan struct{}, maxDirectoryTasks)
	h.follows = map[string]follow{}
	h.departing = map[string]DirectoryEntry{}
	h.failedAt = map[mesh.NodeID]time.Time{}
	h.quorum = newQuorum(node.ID().RID)
	h.dir = opts.Directory
	if h.dir == nil {
		h.rdir = newRendezvousDirectory(h)
		h.dir = h.rdir
	}
	pid, err := h.system.Root.SpawnNamed(proto.PropsFromProducer(func() proto.Actor { return &directoryActor{h: h} }), directoryActorName)
	if err != nil {
		return nil, fmt.Errorf("actor: directory actor: %w", err)
	}
	h.dirPID = pid
	mp := opts.MeterProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	if err := h.registerMetrics(mp); err != nil {
		_ = h.system.Root.StopFuture(pid).Wait()
		return nil, fmt.Errorf("actor: metrics: %w", err)
	}
	if err := h.registerStoreMetrics(mp); err != nil {
		_ = h.metricsReg.Unregister()
		_ = h.system.Root.StopFuture(pid).Wait()
		return nil, fmt.Errorf("actor: metrics: %w", err)
	}
	node.Records().Handle(wire.CmdActorSend, h.receiveActorSend)
	node.Records().Handle(wire.CmdReply, h.onReply)
	node.Records().OnUndeliverable(h.undeliverable)
	h.unsubscribe = node.Membership().Subscribe(h.onMembership)
	h.deadFollowed = h.system.EventStream.Subscribe(h.onDeadFollowed)
	if h.idleTimeout > 0 {
		h.stopSweep, h.sweepDone = make(chan struct{}), make(chan struct{})
		go h.sweep()
	}
	return h, nil
}

// Node returns the mesh node the host runs on.
func (h *Host) Node() *mesh.Node { return h.node }

// Register adds an Actor kind.
func (h *Host) Register(k Kind) error {
	if k.Name == "" || k.New == nil {
		return fault.Errorf(fault.InvalidOperation, "actor: kind %q needs a name and a factory (Kind.Name, Kind.New)", k.Name)
	}
	if err := h.checkPersist(k); err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, dup := h.kinds[k.Name]; dup {
		return fault.Errorf(fault.AlreadyExists, "actor: kind %q registered twice", k.Name)
	}
	h.kinds[k.Name] = k
	return nil
}

// RegisterMessages adds message types (see HostOptions.Messages); on error none is
// added. Register them before Actors exchange them.
func (h *Host) RegisterMessages(types ...MessageType) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.messages.register(h.codecs, types)
}

// Codecs returns the codec registry of the host's messages.
func (h *Host) Codecs() *codec.Registry { return h.codecs }

// Lookup returns where the Actor id of kind lives, activating it (on the directory
// holder of id) when it is not active.
func (h *Host) Lookup(ctx context.Context, kind, id string) (RouteFence, error) {
	return h.dir.Lookup(ctx, kind, id, "")
}

// LookupOn is Lookup with explicit placement on the node rid when the Actor is not
// active; an active Actor is returned where it is.
func (h *Host) LookupOn(ctx context.Context, kind, id, rid string) (RouteFence, error) {
	return h.dir.Lookup(ctx, kind, id, rid)
}

// Active lists this node's activations, those arriving by a move that has not committed
// yet included (Arriving).
func (h *Host) Active() []ActiveActor {
	h.mu.Lock()
	out := make([]ActiveActor, 0, len(h.acts))
	for id, a := range h.acts {
		out = append(out, ActiveActor{ID: id, Kind: a.kind, ObjectGeneration: a.fence.ObjectGeneration, Arriving: a.arriving.Load(), Moving: a.moving.Load(),
			Held: a.keepActive.Load() || a.stayActive.Load()})
	}
	h.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Close stops every activation.
func (h *Host) Close() {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	h.closed = true
	acts := h.acts
	h.acts, h.systemActs = map[string]*activation{}, 0
	h.mu.Unlock()
	if h.stopSweep != nil {
		close(h.stopSweep)
		<-h.sweepDone
	}
	if h.metricsReg != nil {
		_ = h.metricsReg.Unregister()
	}
	if h.storeCounts.reg != nil {
		_ = h.storeCounts.reg.Unregister()
	}
	h.unsubscribe()
	h.system.EventStream.Unsubscribe(h.deadFollowed)
	h.stopClosing()
	h.tasks.Wait()
	for _, a := range acts {
		a.cancel()
	}
	for _, a := range acts {
		_ = h.system.Root.StopFuture(a.pid).Wait()
	}
	_ = h.system.Root.StopFuture(h.dirPID).Wait()
	h.pool.Release()
}

// activateLocal returns the local activation of id, creating it if needed. The
// directory calls it on the node it places the Actor on.
func (h *Host) activateLocal(ctx context.Context, kind, id string) (RouteFence, error) {
	if id == "" || len(id) > 255 {
		return RouteFence{}, fmt.Errorf("%w: %q", ErrBadID, id)
	}
	var k Kind
	for {
		h.mu.Lock()
		if a, ok := h.acts[id]; ok {
			h.mu.Unlock()
			if a.kind != kind {
				return RouteFence{}, fmt.Errorf("%w: %s is a %s", ErrKindMismatch, id, a.kind)
			}
			return a.fence, nil
		}
		var ok bool
		k, ok = h.kinds[kind]
		if !ok {
			h.mu.Unlock()
			return RouteFence{}, fmt.Errorf("%w: %q", ErrUnknownKind, kind)
		}
		wait, busy := h.activating[id]
		if !busy {
			if k.Persist != NotPersisted {
				// Claiming the record is a store round trip: a second activation racing
				// this one must not claim too (its claim would fence this one out).
				done := make(chan struct{})
				h.activating[id] = done
				defer func() {
					h.mu.Lock()
					delete(h.activating, id)
					h.mu.Unlock()
					close(done)
				}()
			}
			h.mu.Unlock()
			break
		}
		h.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return RouteFence{}, fault.Errorf(fault.Unavailable, "actor: activate %s: waiting for its state to load: %w", id, ctx.Err())
		}
	}
	impl := k.New()
	var p *persistState
	if k.Persist != NotPersisted {
		var err error
		if p, err = h.claimState(ctx, k, id, impl); err != nil {
			return RouteFence{}, err
		}
	}
	gen := mesh.NewGeneration()
	self := h.node.ID()
	a, err := h.spawn(h.closing, k, RouteFence{
		Ref:  Ref{ID: id, ObjectGeneration: gen},
		Node: self,
		// The authority owner generation of a fresh activation is its activation time
		// on the mesh-wide generation clock: after a failover the new owner activates
		// later, so its authority generation is higher than the failed owner's.
		AuthorityOwnerGeneration: gen,
		OwnerLeaseGeneration:     self.Generation,
	}, impl, nil, p)
	if err != nil {
		return RouteFence{}, err
	}
	return a.fence, nil
}

// maxStopWait bounds how long an activation waits for an earlier activation of the
// same Actor on this node to finish stopping (see spawn): half the time a move's
// source waits for the target to restore the Actor, so that a target that gives up
// still answers before its source does.
const maxStopWait = movePrepareTimeout / 2

// spawn starts an activation of kind k under fence with the Actor impl, and enters it
// in the host's table; with arr it arrives by a move (dispatch closed until its
// cutover). If id is already active here, that activation is returned (kind
// permitting) and impl is dropped.
//
// An Actor that moved away from this node and comes back keeps its activation name
// (its ObjectGeneration), and the activation it left here may still be stopping
// (forwarding what its mailbox held, or in its Actor's Stopping turn): protoactor
// refuses a second process of that name until the first one has stopped. spawn waits
// for it, bounded by ctx and maxStopWait.
func (h *Host) spawn(ctx context.Context, k Kind, fence RouteFence, impl Actor, arr *arrival, p *persistState) (*activation, error) {
	name := activationName(fence.Ref)
	waited := false
	for {
		a, stopping, err := h.trySpawn(k, fence, impl, arr, name, p)
		if stopping == nil {
			return a, err
		}
		if !waited {
			waited = true
			h.stopWaits.Add(1)
		}
		wait := time.NewTimer(maxStopWait)
		select {
		case <-stopping.gone:
			wait.Stop()
		case <-wait.C:
			return nil, fault.Errorf(fault.Unavailable, "actor: activate %s: its previous activation here has not stopped after %s", fence.ID, maxStopWait)
		case <-ctx.Done():
			wait.Stop()
			return nil, fault.Errorf(fault.DeadlineExceeded, "actor: activate %s: waiting for its previous activation here to stop: %w", fence.ID, ctx.Err())
		case <-h.closing.Done():
			wait.Stop()
			return nil, ErrClosed
		}
	}
}

// trySpawn is one attempt of spawn; stopping, when not nil, is the earlier activation
// that still holds the name.
func (h *Host) trySpawn(k Kind, fence RouteFence, impl Actor, arr *arrival, name string, p *persistState) (_ *activation, stopping *activation, _ error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, nil, ErrClosed
	}
	if a, ok := h.acts[fence.ID]; ok {
		if arr != nil {
			return nil, nil, fault.Errorf(fault.AlreadyExists, "actor: %s already has an activation here", fence.ID)
		}
		if a.kind != k.Name {
			return nil, nil, fmt.Errorf("%w: %s is a %s", ErrKindMismatch, fence.ID, a.kind)
		}
		return a, nil, nil
	}
	if old, ok := h.leaving[name]; ok {
		return nil, old, nil
	}
	a := &activation{kind: k.Name, def: k, fence: fence, gone: make(chan struct{}), persist: p}
	if arr != nil {
		src := arr.m.Source
		a.former = &src
		a.moved = true
		a.arriving.Store(true)
		a.arrived = make(chan struct{})
	}
	a.lastActive.Store(time.Now().UnixNano())
	a.ctx, a.cancel = context.WithCancel(context.Background())
	props := proto.PropsFromProducer(func() proto.Actor {
		s := &shell{h: h, act: a, impl: impl, arrival: arr}
		s.turn.s = s
		return s
	},
		proto.WithMailbox(func() proto.Mailbox { return activationMailbox{Mailbox: proto.Unbounded()(), h: h, a: a} }),
		proto.WithDispatcher(h.pool))
	pid, err := h.system.Root.SpawnNamed(props, name)
	if err != nil {
		a.cancel()
		return nil, nil, fmt.Errorf("actor: activate %s: %w", fence.ID, err)
	}
	a.pid = pid
	h.acts[fence.ID] = a
	if IsSystemKind(a.kind) {
		h.systemActs++
	}
	return a, nil, nil
}

// leave moves a from the host's table to leaving, where it stays until its process
// has stopped (stopped); under h.mu.
func (h *Host) leave(a *activation) {
	delete(h.acts, a.fence.ID)
	if IsSystemKind(a.kind) {
		h.systemActs--
	}
	h.leaving[activationName(a.fence.Ref)] = a
}

// stopped is the last thing an activation's process does: its name is free again.
func (h *Host) stopped(a *activation) {
	h.mu.Lock()
	name := activationName(a.fence.Ref)
	if h.leaving[name] == a {
		delete(h.leaving, name)
	}
	h.mu.Unlock()
	close(a.gone)
}

func (h *Host) local(id string) (*activation, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	a, ok := h.acts[id]
	return a, ok
}

// Deactivate stops the local activation of id, if any; its directory entry goes.
func (h *Host) Deactivate(id string) {
	h.mu.Lock()
	a, ok := h.acts[id]
	if ok {
		h.leave(a)
	}
	h.mu.Unlock()
	if ok {
		if !a.arriving.Load() && h.rdir != nil {
			h.rdir.released(a.kind, a.fence)
		}
		h.stop(a)
	}
}

// ActivationName is the protoactor name of an activation on its node: senders on other
// nodes address records to it directly.
func ActivationName(r Ref) string { return activationName(r) }

func activationName(r Ref) string {
	return activationPrefix + r.ID + "@" + strconv.FormatUint(r.ObjectGeneration, 10)
}

const activationPrefix = "actor/"

// activationID returns the ActorId in an activation name.
func activationID(name string) (string, bool) {
	if !strings.HasPrefix(name, activationPrefix) {
		return "", false
	}
	rest := name[len(activationPrefix):]
	at := strings.LastIndexByte(rest, '@')
	if at <= 0 {
		return "", false
	}
	return rest[:at], true
}

func fenceMatches(cur, want RouteFence) bool {
	return cur.ObjectGeneration == want.ObjectGeneration &&
		cur.Node == want.Node &&
		cur.AuthorityOwnerGeneration == want.AuthorityOwnerGeneration
}

// addressedTo reports whether a record with fence want is for activation a: its
// current fence, or one it had before it moved (same ActorId and ObjectGeneration, an
// earlier authority owner generation: a move keeps the identity and raises the
// authority). A new activation of the ActorId has a new ObjectGeneration, so nothing
// meant for an earlier incarnation passes.
func (a *activation) addressedTo(want RouteFence) bool {
	if fenceMatches(a.fence, want) {
		return true
	}
	return a.moved && want.Ref == a.fence.Ref && want.AuthorityOwnerGeneration < a.fence.AuthorityOwnerGeneration
}

// receiveActorSend delivers an inbound record 24 into the target's mailbox once its
// fence is current.
func (h *Host) receiveActorSend(from mesh.NodeID, rec *wire.Record) {
	if send, ok := rec.Body.(*wire.ActorSend); ok && send.BoundSession != nil {
		// Relays of a bound session are addressed to the activation itself and judged
		// against its binding there; one that arrives here bypassed that.
		h.node.Records().DropStale(from, "bound-session relay not addressed to its activation")
		return
	}
	in, ok := decodeActorSend(rec)
	if !ok {
		h.log.Warn("actor: record 24 without a usable body", "from", from.String())
		return
	}
	a, found := h.local(in.to.ID)
	if !found {
		if f, ok := h.followRoute(activationName(in.to.Ref)); ok && fenceMatches(f.source, in.to) {
			if frames, err := wire.Encode(rec); err == nil {
				h.followed.Add(1)
				h.sendFollowed(f.pid, &meshpb.Followed{FromRid: from.RID, FromGeneration: from.Generation, Frames: frames, ToGeneration: f.target.Node.Generation})
				return
			}
		}
	}
	if !found || !a.addressedTo(in.to) {
		h.node.Records().DropStale(from, "record 24 for "+in.to.String()+": no such activation")
		if in.corr != 0 {
			h.failRequest(from, in.corr, wire.ResultNotFound, wire.FailureActorRouteNotFound)
		}
		return
	}
	h.system.Root.Send(a.pid, &remoteSend{from: from, in: in})
}

// remoteSend is an Actor message from another node that reached the node's record
// receiver, handed to its activation.
type remoteSend struct {
	from mesh.NodeID
	in   inboundSend
}

// membershipHook, when set (by tests, export_test.go), runs first in every host's
// onMembership: a test holds a node's directory behind the node's membership view.
var membershipHook atomic.Pointer[func(h *Host, ev mesh.MemberEvent)]

// onMembership follows membership: keep-majority, the directory's rebuild (the holder
// of some ids may have changed), and calls waiting on a node that went. Activations
// stay where they are.
func (h *Host) onMembership(ev mesh.MemberEvent) {
	if hook := membershipHook.Load(); hook != nil {
		(*hook)(h, ev)
	}
	// Resolved Addresses are looked up again.
	h.routeMu.Lock()
	clear(h.routes)
	h.routeMu.Unlock()
	if ev.Type == mesh.EventFailed || ev.Type == mesh.EventLeft {
		// Requests waiting on an Actor of that node get no answer now.
		h.calls.failNode(ev.Member.ID, ev.Type.String())
	}
	if ev.Type != mesh.EventJoined && ev.Type != mesh.EventFailed && ev.Type != mesh.EventLeft {
		return
	}
	if ok, changed := h.quorum.update(ev, h.node.Membership().Live()); changed {
		h.quorumChanged(ok)
	}
	if ev.Type == mesh.EventFailed {
		h.noteFailure(ev.Member.ID)
	}
	if h.rdir != nil {
		h.rdir.membershipChanged()
	}
}

// shell adapts an application Actor to a protoactor actor.
type shell struct {
	h           *Host
	act         *activation
	impl        Actor
	ctx         Context // reused: turns of one activation never overlap
	turn        Turn    // what every record handler of this activation gets: a Turn holds nothing of its own turn
	attachments map[any]any
	pctx        proto.Context // of the current Receive
	panics      []time.Time   // recent panics, for the panic policy
	stopped     bool          // the panic policy stopped it
	movedAway   bool          // it stops because it moved to another node
	holding     bool          // sealed for a move: messages are held, not dispatched
	held        []any         // what a sealed source or a closed target holds, in order
	arrival     *arrival      // set while it arrives by a move (dispatch closed)
	forwardTo   *proto.PID    // set once it moved away: what still reaches it follows
	forwardFrom RouteFence    // its fence before it moved away
	forwardGen  uint64        // the lifecycle of the node it moved to
	holdReplies bool          // a SaveEveryTurn turn: replies wait for its save
	heldReplies []heldReply
	turns       uint32 // turns delivered, for sampling their duration
}

// turnSample: one turn in turnSample of each activation (and its first) is timed for
// meshnode.actor.turn.duration. Two clock reads and a histogram update cost about
// 200 ns, a fifth of a small turn; one in 8 costs a fortieth.
const turnSample = 8

func (s *shell) Receive(pctx proto.Context) {
	s.pctx = pctx
	switch m := pctx.Message().(type) {
	case *proto.Started:
		if s.arrival != nil {
			// Arriving by a move: the Actor sees Started when dispatch opens.
			s.arrive()
			return
		}
		s.deliver(&Started{}, nil, nil)
	case *proto.Stopping:
		if s.arrival == nil {
			s.deliver(&Stopping{Moved: s.movedAway}, nil, nil)
			if fn := s.h.stopHook(); fn != nil {
				t := &s.turn
				s.guard(func() { fn(t) })
			}
		}
		s.act.cancel()
	case *moveSeal:
		s.seal(m)
	case *moveAbort:
		s.abort(m)
	case *moveHandOff:
		s.handOff(pctx, m)
	case *meshpb.MoveCutover:
		if !s.h.forThisLifecycle(m) {
			return
		}
		s.commitArrival(pctx, true, "")
	case cutoverTimeout:
		s.commitArrival(pctx, false, "timeout")
	case *proto.Stopped:
		// protoactor has taken the name out of its registry.
		s.h.stopped(s.act)
	case *proto.Restarting, *proto.ReceiveTimeout:
	default:
		if env, ok := m.(*meshpb.Envelope); ok && mesh.IsRun(env) {
			s.receiveRun(pctx, env)
			return
		}
		s.route(pctx, m)
	}
}

// receiveRun takes a run of records (consecutive records of one coalesced envelope,
// in one mailbox message) one record at a time, as if each had been a message of its
// own: dispatched while the activation is open; held or forwarded, in order, once a
// move seals it or has taken it away; and once a turn stopped it (the panic policy, a
// move that failed), given to dead letters like the messages still in its mailbox
// (whoever watches them forwards or answers them).
func (s *shell) receiveRun(pctx proto.Context, run *meshpb.Envelope) {
	sc := runScratchPool.Get().(*runScratch)
	defer sc.release()
	sc.cur.Reset(run)
	for rec, ok := sc.cur.Next(); ok; rec, ok = sc.cur.Next() {
		switch {
		case s.forwardTo != nil || s.holding || s.arrival != nil:
			s.route(pctx, mesh.CloneRecord(rec))
		case s.act.ctx.Err() != nil:
			s.h.system.DeadLetter.SendUserMessage(pctx.Self(), mesh.CloneRecord(rec))
		default:
			s.act.dequeued(envelopeBytes(rec))
			s.act.lastActive.Store(s.h.clock.Load())
			if from, decoded, ok := s.h.node.Records().AcceptWith(rec, &sc.dec); ok {
				s.receiveDecoded(from, decoded)
			}
		}
	}
}

// runScratch is what taking a run's records needs, pooled: a run of one record (the
// Actors of many sessions, each sent to now and then) then costs no allocation for it.
type runScratch struct {
	cur mesh.RunCursor
	dec wire.Decoder // consecutive records of a stream share their strings
}

var runScratchPool = sync.Pool{New: func() any { return new(runScratch) }}

func (sc *runScratch) release() {
	sc.cur.Clear()
	sc.dec.Reset()
	runScratchPool.Put(sc)
}

// route runs, holds or forwards one message, by the state of the activation.
func (s *shell) route(pctx proto.Context, m any) {
	if s.forwardTo != nil {
		s.forward(pctx, m)
		return
	}
	if s.holding || s.arrival != nil {
		s.hold(m)
		return
	}
	s.dispatch(pctx, m)
}

// hold keeps a message while the activation is sealed for a move (source) or not open
// yet (target). A sealed source drops its timers and collection checks: they belong to
// the activation that is going.
func (s *shell) hold(msg any) {
	if s.holding {
		switch msg.(type) {
		case turnCallback, collectIfIdle:
			return
		}
	}
	s.held = append(s.held, msg)
}

// dispatch runs one message of the activation.
func (s *shell) dispatch(pctx proto.Context, msg any) {
	switch m := msg.(type) {
	case *delivery:
		s.act.dequeued(0)
		s.act.lastActive.Store(s.h.clock.Load())
		s.deliver(m.msg, m.from, s.h.localReply(m.request))
	case *remoteSend:
		s.act.dequeued(0)
		s.act.lastActive.Store(s.h.clock.Load())
		s.receiveSend(m.from, m.in)
	case *meshpb.Envelope:
		s.act.dequeued(envelopeBytes(m))
		s.act.lastActive.Store(s.h.clock.Load())
		s.receiveRecord(m)
	case *meshpb.Followed:
		s.act.dequeued(0)
		if !s.h.forThisLifecycle(m) {
			s.h.node.Records().DropStale(mesh.NodeID{RID: m.FromRid, Generation: m.FromGeneration}, "followed record for an earlier lifecycle of this node")
			return
		}
		s.act.lastActive.Store(s.h.clock.Load())
		s.receiveFollowed(m)
	case turnCallback:
		t := &s.turn
		s.guard(func() { m.fn(t) })
	case collectIfIdle:
		if !s.act.moving.Load() && s.h.collectable(s.act, time.Now()) && s.h.retire(s.act) {
			s.h.collected.Add(1)
			if s.h.rdir != nil {
				s.h.rdir.released(s.act.kind, s.act.fence)
			}
			s.act.cancel()
			pctx.Stop(pctx.Self())
		}
	}
}

// localReply returns the reply function of a request from this node: it completes the
// requester's call in-process. A value is checked as a reply to another node would be
// (its type must be registered), so that Reply behaves the same wherever the requester
// is: a reply that cannot be sent fails the requester with that error, at once.
func (h *Host) localReply(req *requestInfo) func(v any, err error) error {
	if req == nil {
		return nil
	}
	return func(v any, err error) error {
		if v != nil && err == nil {
			if cerr := h.checkReply(v); cerr != nil {
				req.local.complete(nil, cerr)
				return cerr
			}
			if _, raw := v.(*Message); !raw {
				v = normalize(v)
			}
		}
		req.local.complete(v, err)
		return nil
	}
}

// receiveRecord handles a record addressed straight to this activation: validated as
// the node's record receiver would, then either an Actor message (plain 24) or a
// record for the layer that registered its command (bindings).
func (s *shell) receiveRecord(env *meshpb.Envelope) {
	from, rec, ok := s.h.node.Records().Accept(env)
	if !ok {
		return
	}
	s.receiveDecoded(from, rec)
}

// receiveDecoded handles a record addressed to this activation once it is validated.
func (s *shell) receiveDecoded(from mesh.NodeID, rec *wire.Record) {
	if send, isSend := rec.Body.(*wire.ActorSend); !isSend || send.BoundSession != nil {
		if fn := s.h.turnHandler(rec.Command()); fn != nil {
			t := &s.turn
			s.guard(func() { fn(t, from, rec) })
			return
		}
		s.h.node.Records().DropStale(from, "record "+rec.Command().String()+" addressed to an Actor has no handler")
		return
	}
	in, ok := decodeActorSend(rec)
	if !ok {
		s.h.node.Records().DropStale(from, "record 24 without a payload")
		return
	}
	s.receiveSend(from, in)
}

// receiveSend delivers an Actor message from another node: its fence must be current,
// its value is decoded with the registered type of its name, and a request gets a reply
// function that answers with a record 20.
func (s *shell) receiveSend(from mesh.NodeID, in inboundSend) {
	h := s.h
	if !s.act.addressedTo(in.to) {
		h.node.Records().DropStale(from, "record 24 for "+in.to.String()+", current "+s.act.fence.String())
		if in.corr != 0 {
			h.failRequest(from, in.corr, wire.ResultNotFound, wire.FailureActorRouteNotFound)
		}
		return
	}
	var reply func(v any, err error) error
	if in.corr != 0 {
		reply = func(v any, err error) error { return h.answerRequest(s.act.ctx, from, in.corr, v, err) }
	}
	v, err := h.decode(in.msg)
	if err != nil {
		h.node.Records().DropStale(from, err.Error())
		if reply != nil {
			_ = reply(nil, err)
		}
		return
	}
	s.deliver(v, in.from, reply)
}

// deliver runs the Actor's Receive with msg (from an Actor, or nil; reply answers it
// when it is a request). A relayed session Request replies through its binding.
func (s *shell) deliver(msg any, from *Ref, reply func(v any, err error) error) {
	s.deliverIn(s.act.ctx, msg, from, reply)
}

// deliverIn is deliver with ctx as the turn's context.Context (Turn.DeliverContext).
func (s *shell) deliverIn(ctx context.Context, msg any, from *Ref, reply func(v any, err error) error) {
	if p, ok := msg.(*SessionPacket); ok && p.Request && reply == nil {
		reply = s.h.sessionReply(p, s.act.fence.Ref)
	}
	s.ctx = Context{Context: ctx, host: s.h, act: s.act, msg: msg, from: from, shell: s, reply: reply}
	if p := s.act.persist; p != nil {
		s.receivePersisted(&s.ctx, p)
		return
	}
	s.receive(&s.ctx)
}

// receive runs the Actor's Receive; a panic ends the turn only (the panic policy).
func (s *shell) receive(actx *Context) {
	defer func() {
		if r := recover(); r != nil {
			s.panicked(r, actx)
		}
	}()
	if s.turns++; s.turns%turnSample == 1 && s.h.turnDuration != nil {
		defer s.h.observeTurn(time.Now())
	}
	s.impl.Receive(actx)
}

// observeTurn records the duration of a turn that started at start.
func (h *Host) observeTurn(start time.Time) {
	h.turnDuration.Record(context.Background(), time.Since(start).Seconds())
}

// guard runs a layer's hook in a turn; a panic is logged and goes no further.
func (s *shell) guard(fn func()) {
	defer func() {
		if r := recover(); r != nil {
			s.h.log.Error("actor turn hook panicked", "actor", s.act.fence.Ref.String(), "kind", s.act.kind, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
		}
	}()
	fn()
}
