package session

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"math"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshnode/meshnode/internal/protoactor/actor"
	"github.com/meshnode/meshnode/internal/workpool"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/meshnode/meshnode/internal/logfloor"
	"github.com/meshnode/meshnode/internal/ratelog"
	"github.com/meshnode/meshnode/internal/traceprop"
	"github.com/meshnode/meshnode/session/codec"
	"github.com/meshnode/meshnode/session/wire"
)

// HostOptions configures a Host. The zero value is usable.
type HostOptions struct {
	// MaxQueuedApplicationJobs is the host-wide permit count (digest §9.2). 0 means the
	// Balanced profile: 128 per effective processor.
	MaxQueuedApplicationJobs int
	// Codecs is the server root's codec registry. nil: codec.NewRegistry().
	Codecs *codec.Registry
	// MeterProvider receives the STREAM and job-queue instruments. nil: otel's global.
	MeterProvider metric.MeterProvider
	// Logger receives monitoring records. nil: slog.Default().
	Logger *slog.Logger
	// MaxConnections bounds the sockets the host's listeners hold at once (sessions and
	// handshakes in progress). A connection past it is refused cleanly: a tcp:// client
	// gets session-closing ServerDrain, a ws:// client an HTTP 503, then the socket
	// closes; nothing else is affected. 0 means the default, the process's open-files
	// limit less a reserve (a tenth of it, at least 256) for the mesh, the admin
	// endpoint and files, so the process never runs out of descriptors because of
	// clients. Negative means no limit.
	MaxConnections int
	// StallTimeout is how long the packets a session pulled may wait behind a callback
	// that does not return before they give their host permits back (default 10 ms).
	// Without it a session whose callback blocks (say, writing to a client that does
	// not read) holds up to MaxPendingPackets permits until it moves, and enough such
	// sessions pause the whole host. Negative: never give permits back early, the
	// strict accounting of zlink digest §9.3 (a permit returns only at its callback's
	// start).
	StallTimeout time.Duration
	// NoInlineTurns sends every session turn to the worker pool, and leaves every
	// write to a writer goroutine. By default a packet's turn runs on the read loop
	// goroutine that pulled it, when no other turn of that session is scheduled (it
	// saves a goroutine hand-off per packet; turns stay serial either way), and a
	// NonBlocking frame queued outside a turn when no write is in progress (a reply
	// that came from another node) is written by its producer with one non-blocking
	// system call on a plain TCP connection, a writer starting only for what the
	// socket did not take. The switch exists to compare the paths and to rule the fast
	// ones out when diagnosing.
	NoInlineTurns bool
	// NoBatchedIngress hands every pulled packet to its session owner in a mailbox
	// message of its own. By default the read loop pulls, in one go, the frames of a
	// pipelining client that are already in the session's receive buffer (up to 64,
	// each after taking its own permit) and hands them over in one message; the turns
	// are the same, in the same order. The switch exists to compare the two paths and
	// to rule the fast one out when diagnosing.
	NoBatchedIngress bool
	// NoPacketReuse allocates every packet anew, even for session types that reuse
	// their Send packets (SessionType.ReuseSendPackets). The switch exists to rule reuse
	// out when diagnosing: a session that keeps a packet it did not retain sees its
	// bytes change under it only while reuse is on.
	NoPacketReuse bool
	// TracerProvider starts a server span for every packet dispatched to a session
	// callback (docs/tracing.md), continuing the trace of the packet's traceparent
	// metadata. nil (or otel's no-op provider): no spans, and the packet path pays one
	// nil check.
	TracerProvider trace.TracerProvider
}

// Host is one process's STREAM runtime: its stream nodes, the host-wide permit pool
// and the actor system the sessions run in. Register nodes with AddStreamNode, then
// Start; Shutdown drains, Close does not.
type Host struct {
	opts       HostOptions
	log        *slog.Logger
	codecs     *codec.Registry
	system     *actor.ActorSystem // the session-owner actors'; the host's own
	systemDown bool
	permits    *permitPool
	dispatch   *workpool.Pool
	metrics    *metrics
	builders   []*NodeBuilder

	mu       sync.Mutex
	started  bool
	closed   bool
	nodes    []*StreamNode
	byName   map[string]*StreamNode
	conns    map[*conn]struct{}
	connWG   sync.WaitGroup // one per live connection, done after its teardown
	acceptWG sync.WaitGroup // accept loops and ws servers

	stallTimeout time.Duration // 0: permits are never given back early
	sockets      atomic.Int64  // accepted sockets not yet closed
	refusers     atomic.Int64  // WebSocket refusals in progress
	maxConns     int64         // 0: no limit
	ratelog      ratelog.Limiter
	tracer       trace.Tracer // nil: tracing off
	badCarriers  *traceprop.BadCarriers

	baseCtx      context.Context
	cancelBase   context.CancelFunc
	acceptCtx    context.Context // handshakes in progress; cancelled when closing starts
	cancelAccept context.CancelFunc
	nextRID      atomic.Uint32
}

// NewHost returns a host with no stream nodes.
func NewHost(opts HostOptions) *Host {
	h := &Host{opts: opts, byName: map[string]*StreamNode{}, conns: map[*conn]struct{}{}}
	h.log = opts.Logger
	if h.log == nil {
		h.log = slog.Default()
	}
	h.codecs = opts.Codecs
	if h.codecs == nil {
		h.codecs = codec.NewRegistry()
	}
	h.tracer = traceprop.Tracer(opts.TracerProvider, tracerName)
	h.baseCtx, h.cancelBase = context.WithCancel(context.Background())
	h.acceptCtx, h.cancelAccept = context.WithCancel(h.baseCtx)
	return h
}

// AddStreamNode registers a stream node named name and returns its builder.
func (h *Host) AddStreamNode(name string) *NodeBuilder {
	b := &NodeBuilder{name: name, maxMessageSize: DefaultMaxMessageSize}
	h.mu.Lock()
	h.builders = append(h.builders, b)
	h.mu.Unlock()
	return b
}

// Codecs returns the server root's codec registry.
func (h *Host) Codecs() *codec.Registry { return h.codecs }

func effectiveProcessors() int {
	n := runtime.GOMAXPROCS(0)
	if c := runtime.NumCPU(); c < n {
		n = c
	}
	if n < 1 {
		n = 1
	}
	return n
}

// validate runs every start-up validation without binding anything.
func (h *Host) validate() ([][]endpoint, int, error) {
	limit := h.opts.MaxQueuedApplicationJobs
	if limit == 0 {
		limit = ProfileBalanced * effectiveProcessors()
	}
	if limit < 1 || limit > math.MaxInt32 {
		return nil, 0, &ConfigError{Err: fmt.Errorf("%w: %d", ErrJobQueueLimit, limit)}
	}
	names := map[string]bool{}
	sessionNodes := map[string]string{}
	all := make([][]endpoint, 0, len(h.builders))
	for _, b := range h.builders {
		eps, err := b.validate()
		if err != nil {
			return nil, 0, &ConfigError{Node: b.name, Err: err}
		}
		if names[b.name] {
			return nil, 0, &ConfigError{Node: b.name, Err: ErrDuplicateNodeName}
		}
		names[b.name] = true
		st := b.sessions[0].name
		if other, ok := sessionNodes[st]; ok {
			return nil, 0, &ConfigError{Node: b.name, Err: fmt.Errorf("%w: %s also on node %q", ErrSessionTypeOnTwoNodes, st, other)}
		}
		sessionNodes[st] = b.name
		all = append(all, eps)
	}
	return all, limit, nil
}

// Start validates every registered node and, when all are valid, binds their listeners
// and starts accepting. Nothing is bound when any validation fails.
func (h *Host) Start(ctx context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.started || h.closed {
		return &ConfigError{Err: ErrHostStarted}
	}
	all, limit, err := h.validate()
	if err != nil {
		return err
	}
	tlsConfigs := make([]*tls.Config, len(h.builders))
	for i, b := range h.builders {
		if !b.tlsEnabled {
			continue
		}
		cfg, err := loadTLS(b)
		if err != nil {
			return &ConfigError{Node: b.name, Err: err}
		}
		tlsConfigs[i] = cfg
	}
	h.permits = newPermitPool(limit)
	h.stallTimeout = h.opts.StallTimeout
	switch {
	case h.stallTimeout == 0:
		h.stallTimeout = DefaultStallTimeout
	case h.stallTimeout < 0:
		h.stallTimeout = 0
	}
	h.maxConns = int64(h.opts.MaxConnections)
	switch {
	case h.maxConns == 0:
		h.maxConns = int64(DefaultMaxConnections())
	case h.maxConns < 0:
		h.maxConns = 0
	}
	h.dispatch = workpool.New(300)
	h.system = actor.NewActorSystem(actor.WithLoggerFactory(quietActorLogger(h.log)))
	mp := h.opts.MeterProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	if h.tracer != nil {
		h.badCarriers = traceprop.NewBadCarriers(mp, "github.com/meshnode/meshnode/session")
	}
	if h.metrics, err = newMetrics(mp, h); err != nil {
		return fmt.Errorf("stream host metrics: %w", err)
	}
	for i, b := range h.builders {
		n := newStreamNode(h, b, tlsConfigs[i])
		if err := n.listen(ctx, all[i]); err != nil {
			n.closeListeners()
			for _, prev := range h.nodes {
				prev.closeListeners()
			}
			h.nodes = nil
			h.byName = map[string]*StreamNode{}
			h.closed = true // a host whose start failed is not reused
			h.mu.Unlock()
			h.finish()
			h.mu.Lock()
			return err
		}
		h.nodes = append(h.nodes, n)
		h.byName[b.name] = n
	}
	for _, n := range h.nodes {
		n.serve()
	}
	h.started = true
	return nil
}

func quietActorLogger(base *slog.Logger) func(*actor.ActorSystem) *slog.Logger {
	return func(*actor.ActorSystem) *slog.Logger {
		return slog.New(logfloor.New(base.Handler(), slog.LevelWarn))
	}
}

func loadTLS(b *NodeBuilder) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(b.certPath, b.keyPath)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTLSConfig, err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if b.requireClient {
		pem, err := os.ReadFile(b.clientCAPath)
		if err != nil {
			return nil, fmt.Errorf("%w: client CA: %w", ErrTLSConfig, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: client CA %s holds no PEM certificate", ErrTLSConfig, b.clientCAPath)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// Node returns the started stream node called name, or nil.
func (h *Host) Node(name string) *StreamNode {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.byName[name]
}

// Nodes returns the started stream nodes in registration order.
func (h *Host) Nodes() []*StreamNode {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]*StreamNode(nil), h.nodes...)
}

// MaxConnections returns the connection limit in force (0: none). Valid after Start.
func (h *Host) MaxConnections() int { return int(h.maxConns) }

// Connections returns the sockets the host's listeners hold now.
func (h *Host) Connections() int { return int(h.sockets.Load()) }

func (h *Host) routingID() RoutingID {
	for {
		if id := h.nextRID.Add(1); id != 0 {
			return RoutingID(id)
		}
	}
}

// track registers a live connection; false when the host is closing.
func (h *Host) track(c *conn) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return false
	}
	h.conns[c] = struct{}{}
	h.connWG.Add(1)
	return true
}

// queuedPermits counts the host permits held by packets handed to a session owner
// whose callback has not started. The sessions keep the count; the host adds it up when
// asked (a metrics collection or JobQueue), rather than every packet turn moving one
// host-wide counter that every core writes. It walks every connection under h.mu,
// which accepts and closes also take: a few microseconds per thousand sessions, once
// per collection.
func (h *Host) queuedPermits() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	var n int64
	for c := range h.conns {
		n += max(0, c.pendingPermits.Load())
	}
	return n
}

func (h *Host) untrack(c *conn) {
	h.mu.Lock()
	delete(h.conns, c)
	h.mu.Unlock()
	h.connWG.Done()
}

// Shutdown drains the host: it stops accepting, sends every session session-closing
// with reason ServerDrain, and waits until every session has run its disconnect
// callback. When ctx ends first the remaining connections are closed without waiting
// for their writes, and ctx's error is returned.
func (h *Host) Shutdown(ctx context.Context) error {
	conns, first := h.beginClose()
	if first {
		for _, c := range conns {
			c.close(closeCause{reason: wire.CloseServerDrain, notify: true, diag: "server shutting down"})
		}
	}
	done := make(chan struct{})
	go func() {
		h.connWG.Wait()
		h.acceptWG.Wait()
		close(done)
	}()
	select {
	case <-done:
		h.finish()
		return nil
	case <-ctx.Done():
		for _, c := range h.liveConns() {
			c.abort()
		}
		<-done
		h.finish()
		return ctx.Err()
	}
}

// Close closes every listener and connection at once: sessions get no session-closing
// frame. It waits for the teardown of every session (disconnect callbacks included).
func (h *Host) Close() error {
	h.beginClose()
	for _, c := range h.liveConns() {
		c.abort()
	}
	h.connWG.Wait()
	h.acceptWG.Wait()
	h.finish()
	return nil
}

func (h *Host) beginClose() ([]*conn, bool) {
	h.mu.Lock()
	first := !h.closed
	h.closed = true
	nodes := append([]*StreamNode(nil), h.nodes...)
	h.mu.Unlock()
	h.cancelAccept() // handshakes in progress make no new sessions
	for _, n := range nodes {
		n.closeListeners()
	}
	return h.liveConns(), first
}

func (h *Host) liveConns() []*conn {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]*conn, 0, len(h.conns))
	for c := range h.conns {
		out = append(out, c)
	}
	return out
}

func (h *Host) finish() {
	// Unregistering waits for a metrics collection in progress, whose callbacks take
	// h.mu (queuedPermits): never under h.mu, or the two wait for each other.
	if h.metrics != nil {
		h.metrics.unregister()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cancelBase != nil {
		h.cancelBase()
	}
	if h.dispatch != nil {
		h.dispatch.Stop()
	}
	if h.system != nil && !h.systemDown {
		h.system.Shutdown()
		h.systemDown = true
	}
}

// SessionInfo describes one open session, for operators (the admin API's /v1/sessions).
type SessionInfo struct {
	RoutingID RoutingID
	Stream    string // the stream node that accepted it
	Transport string // tcp, tls, ws, wss
	Remote    string // the client's address
	Opened    time.Time
	Closing   bool // it is closing (drain, replacement, a close in progress)
}

// SessionCounts are the open sessions by transport and by state (open, closing).
type SessionCounts struct {
	Total       int
	ByTransport map[string]int
	ByState     map[string]int
}

// MaxSessionsPage bounds the page Sessions returns, however many sessions there are.
const MaxSessionsPage = 500

// Sessions returns the counts of the open sessions and a page of at most limit of
// them whose RoutingID is above after, in RoutingID order. limit is capped at one more
// than MaxSessionsPage, so that a caller asking for a full page and one more can tell
// whether another page follows.
func (h *Host) Sessions(after RoutingID, limit int) ([]SessionInfo, SessionCounts) {
	limit = min(max(limit, 0), MaxSessionsPage+1)
	counts := SessionCounts{ByTransport: map[string]int{}, ByState: map[string]int{}}
	var page []SessionInfo
	for _, c := range h.liveConns() {
		closing := false
		select {
		case <-c.closing:
			closing = true
		default:
		}
		counts.Total++
		counts.ByTransport[c.transport]++
		if closing {
			counts.ByState["closing"]++
		} else {
			counts.ByState["open"]++
		}
		if c.rid <= after {
			continue
		}
		page = append(page, SessionInfo{RoutingID: c.rid, Stream: c.node.Name(), Transport: c.transport,
			Remote: c.nc.RemoteAddr().String(), Opened: time.Unix(c.opened, 0), Closing: closing})
	}
	slices.SortFunc(page, func(a, b SessionInfo) int { return cmp.Compare(a.RoutingID, b.RoutingID) })
	if len(page) > limit {
		page = page[:limit]
	}
	return page, counts
}
