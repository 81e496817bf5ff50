package meshnode

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/meshnode/meshnode/services"

	"go.opentelemetry.io/otel"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/meshnode/meshnode/actor"
	"github.com/meshnode/meshnode/binding"
	"github.com/meshnode/meshnode/fault"
	"github.com/meshnode/meshnode/internal/nodert"
	"github.com/meshnode/meshnode/mesh"
	"github.com/meshnode/meshnode/meshtls"
	"github.com/meshnode/meshnode/session"
	"github.com/meshnode/meshnode/store"
	"github.com/meshnode/meshnode/topic"
)

// Node is one running meshnode: its place in the mesh, the Actors it hosts, the binding
// of sessions to Actors, and (when configured) its STREAM listeners.
type Node struct {
	cfg    Config
	log    *slog.Logger
	mesh   *mesh.Node
	actors *actor.Host
	binder *binding.Binder
	topics *topic.Hub
	stream *session.Host // nil without Streams
	store  store.Store   // nil without one
	// ownsStore: the node opened the store (StoreURL, DataDir) and closes it last.
	ownsStore bool

	services  *services.Host // nil without Services or ServiceWorker
	attacher  *services.Attacher
	svcStream *services.StreamServer

	// certs are the mesh TLS certificates (nil without); reload re-reads them and the
	// gossip key file (nil when there is nothing to reload).
	certs  *meshtls.Certs
	reload *reloader

	stopOnce sync.Once
	stopErr  error
}

// Start starts a node: it joins the mesh, hosts cfg's Actor kinds, runs the binding
// protocol, and serves cfg's session on cfg's STREAM endpoints. The Config's own
// combinations are checked before anything binds a port; each part then validates its
// settings as it starts (Actor kinds and message types, STREAM endpoints), and on an
// error every part already started is stopped: nothing keeps running. Errors name the
// Config field.
func Start(ctx context.Context, cfg Config) (*Node, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MeterProvider == nil {
		cfg.MeterProvider = otel.GetMeterProvider()
	}
	if cfg.TracerProvider == nil {
		cfg.TracerProvider = tracenoop.NewTracerProvider() // off unless configured
	}
	n := &Node{cfg: cfg, log: cfg.Logger}
	var err error
	// The store opens first: a store that cannot be opened (a URL that does not parse,
	// a server that refuses the credentials, a data directory in use) fails the start
	// before the node joins the mesh.
	// The certificates are checked before anything else opens: a file that cannot be
	// used fails the start naming its field.
	if n.certs, err = loadMeshTLS(cfg); err != nil {
		return nil, err
	}
	if n.store, n.ownsStore, err = OpenStore(ctx, cfg); err != nil {
		return nil, err
	}
	n.warnInsecure()
	n.mesh, err = mesh.Start(ctx, mesh.Config{
		RID: cfg.NodeID, BindHost: cfg.BindHost, AdvertiseHost: cfg.AdvertiseHost,
		MeshPort: cfg.MeshPort, RemotePort: cfg.RemotePort, Join: cfg.Join, Preset: cfg.Timing, AdminAddr: cfg.AdminAddr, Build: cfg.Version, Revision: cfg.Revision,
		PeerWindowRecords: cfg.PeerWindowRecords, PeerWindowBytes: cfg.PeerWindowBytes,
		Logger: cfg.Logger, MeterProvider: cfg.MeterProvider, NoCoalescing: cfg.NoRecordCoalescing,
		TLS: n.certs, GossipKeys: cfg.GossipKeys, GossipKeyFile: cfg.GossipKeyFile, ClusterLabel: cfg.ClusterLabel,
	})
	if err != nil {
		n.closeStore()
		return nil, fmt.Errorf("meshnode: mesh: %w", err)
	}
	messages := cfg.Messages
	if cfg.ServiceWorker != nil {
		// Session workers and the sessions directory talk with the node's Attacher.
		messages = append(slices.Clone(messages), services.MessageTypes()...)
	}
	n.actors, err = actor.NewHost(n.mesh, actor.HostOptions{
		Logger: cfg.Logger, MeterProvider: cfg.MeterProvider, Messages: messages,
		IdleTimeout: cfg.ActorIdleTimeout, MaxMailbox: cfg.MaxMailbox, MaxMailboxBytes: cfg.MaxMailboxBytes,
		MaxPanics: cfg.MaxPanics, PanicWindow: cfg.PanicWindow,
		Store: n.store, StoreTimeout: cfg.StoreTimeout,
	})
	if err != nil {
		n.leave()
		n.closeStore()
		return nil, fmt.Errorf("meshnode: Config: %w", err) // the error names Messages[i]
	}
	for i, k := range cfg.Kinds {
		if err := n.actors.Register(k); err != nil {
			n.actors.Close()
			n.leave()
			n.closeStore()
			return nil, fmt.Errorf("meshnode: Config.Kinds[%d]: %w", i, err)
		}
	}
	bo := cfg.Binding
	if bo.Logger == nil {
		bo.Logger = cfg.Logger
	}
	if bo.MeterProvider == nil {
		bo.MeterProvider = cfg.MeterProvider
	}
	if bo.TracerProvider == nil {
		bo.TracerProvider = cfg.TracerProvider
	}
	n.binder = binding.New(n.mesh, n.actors, bo)
	to := cfg.Topics
	if to.Logger == nil {
		to.Logger = cfg.Logger
	}
	if to.MeterProvider == nil {
		to.MeterProvider = cfg.MeterProvider
	}
	if to.Codecs == nil {
		to.Codecs = n.actors.Codecs()
	}
	if n.topics, err = topic.New(n.mesh, n.actors, n.binder, to); err != nil {
		n.binder.Stop()
		n.actors.Close()
		n.leave()
		n.closeStore()
		return nil, fmt.Errorf("meshnode: Config.Topics: %w", err)
	}
	if err := n.startServices(ctx); err != nil {
		n.topics.Stop()
		n.binder.Stop()
		n.actors.Close()
		n.leave()
		n.closeStore()
		return nil, err
	}
	if len(cfg.Streams) > 0 {
		if err := n.startStream(ctx); err != nil {
			n.stopAttacher()
			n.closeServices()
			n.topics.Stop()
			n.binder.Stop()
			n.actors.Close()
			n.leave()
			n.closeStore()
			return nil, err
		}
	}
	n.startReloader()
	return n, nil
}

// Topics returns the node's topics: its sessions' subscriptions, publishes, presence.
func (n *Node) Topics() *topic.Hub { return n.topics }

// startServices registers the session-worker kind and starts the server services host.
func (n *Node) startServices(ctx context.Context) error {
	cfg := n.cfg
	if w := cfg.ServiceWorker; w != nil {
		kind := services.WorkerKind(w.Kind, services.WorkerOptions{Server: n.Services, HostOptions: services.HostOptions{Logger: cfg.Logger, TracerProvider: cfg.TracerProvider, MeterProvider: cfg.MeterProvider}}, w.Facets...)
		if err := n.actors.Register(kind); err != nil {
			return fmt.Errorf("meshnode: Config.ServiceWorker: %w", err)
		}
		// The sessions directory keeps its records in the node's store when there is one.
		if err := n.actors.Register(services.NewDirectoryKind(n.store != nil)); err != nil {
			return fmt.Errorf("meshnode: Config.ServiceWorker: the sessions directory: %w", err)
		}
		n.attacher = services.NewAttacher(services.AttacherOptions{Actors: n.actors, Topics: n.topics, Kind: w.Kind,
			Authorize: w.Authorize, Timeout: cfg.Binding.RelayTimeout, Logger: cfg.Logger})
	}
	if cfg.Services == nil && n.attacher == nil {
		return nil
	}
	var facets []services.Facet
	if cfg.Services != nil {
		facets = cfg.Services(n)
	}
	if n.attacher != nil {
		facets = append(facets, n.attacher.Facet())
	}
	h, err := services.NewHost(ctx, services.HostOptions{Name: "server", Logger: cfg.Logger, TracerProvider: cfg.TracerProvider, MeterProvider: cfg.MeterProvider}, facets...)
	if err != nil {
		n.stopAttacher()
		return fmt.Errorf("meshnode: Config.Services: %w", err)
	}
	n.services = h
	n.svcStream = services.NewStreamServer(h, n.attacher)
	return nil
}

// stopAttacher ends the routes of the node's presentations (after its sessions closed,
// while the Actors still run: the workers are told the attachments ended).
func (n *Node) stopAttacher() {
	if n.attacher != nil {
		n.attacher.Stop()
	}
}

func (n *Node) closeServices() {
	if n.services != nil {
		_ = n.services.Close(context.Background())
	}
}

// Services returns the node's server services host (nil when the node has none).
func (n *Node) Services() *services.Host { return n.services }

// ServeServices adds the service packets to m, so that the session serves the node's
// server services and routes session-service calls to attached workers. Without a
// services host it returns m unchanged.
func (n *Node) ServeServices(m *session.Mux) *session.Mux {
	if n.svcStream == nil {
		return m
	}
	return n.svcStream.Routes(m)
}

func (n *Node) startStream(ctx context.Context) error {
	cfg := n.cfg
	h := session.NewHost(session.HostOptions{
		MaxQueuedApplicationJobs: cfg.JobQueue, MeterProvider: cfg.MeterProvider, Logger: cfg.Logger,
		MaxConnections: cfg.MaxConnections, StallTimeout: cfg.StallTimeout, TracerProvider: cfg.TracerProvider,
		NoPacketReuse: cfg.NoPacketReuse,
	})
	name := cfg.StreamName
	if name == "" {
		name = "gateway"
	}
	maxMsg := cfg.MaxMessageSize
	switch {
	case maxMsg == 0:
		maxMsg = session.DefaultMaxMessageSize
	case maxMsg < 0:
		maxMsg = 0 // no cap
	}
	b := h.AddStreamNode(name).MaxMessageSize(maxMsg).IdleTimeout(cfg.IdleTimeout).Socket(cfg.Socket).
		Session(cfg.Session(n))
	if cfg.BindHost != "" {
		b.BindHost(cfg.BindHost)
	}
	if cfg.AdvertiseHost != "" {
		b.AdvertiseHost(cfg.AdvertiseHost)
	}
	for _, ep := range cfg.Streams {
		b.Bind(ep)
	}
	if cfg.TLSCertFile != "" {
		b.TLSServer(cfg.TLSCertFile, cfg.TLSKeyFile)
	}
	if cfg.TLSClientCAFile != "" {
		b.RequireClientCertificate(cfg.TLSClientCAFile)
	}
	if len(cfg.WebSocketOrigins) > 0 {
		b.WebSocketOrigins(cfg.WebSocketOrigins...)
	}
	if err := h.Start(ctx); err != nil {
		return fmt.Errorf("meshnode: Config.Streams: %w", err)
	}
	n.stream = h
	return nil
}

// ID returns the node's identity (RID and lifecycle generation).
func (n *Node) ID() mesh.NodeID { return n.mesh.ID() }

// MeshAddr returns the node's gossip address as peers dial it: what another node's
// Config.Join takes (with port 0 in Config.MeshAddr, the port the OS chose).
func (n *Node) MeshAddr() string { return n.mesh.MeshAddr() }

// WaitMembers waits until at least count members of the mesh, this node included, are
// live in this node's view (a fleet being started waits for its nodes before it places
// Actors), or ctx ends.
func (n *Node) WaitMembers(ctx context.Context, count int) error {
	return n.mesh.Membership().WaitLive(ctx, count)
}

// Where returns the kind of the Actor id and where it lives (its route fence, whose
// Node is the node hosting it), from the directory, without activating it: an error
// matching actor.ErrNotFound when it has no activation.
func (n *Node) Where(ctx context.Context, id string) (kind string, at actor.RouteFence, err error) {
	return n.actors.Where(ctx, id)
}

// Mesh returns the node's place in the mesh.
func (n *Node) Mesh() *mesh.Node { return n.mesh }

// Membership returns the node's view of the mesh (Mesh().Membership()).
func (n *Node) Membership() *mesh.Membership { return n.mesh.Membership() }

// Records returns the node's record transport (Mesh().Records()).
func (n *Node) Records() *mesh.Records { return n.mesh.Records() }

// Actors returns the node's Actor host.
func (n *Node) Actors() *actor.Host { return n.actors }

// Binder returns the binding of the node's sessions to Actors.
func (n *Node) Binder() *binding.Binder { return n.binder }

// Stream returns the node's STREAM host (nil without Streams).
func (n *Node) Stream() *session.Host { return n.stream }

// Endpoints returns the STREAM endpoints clients connect to, with the real ports.
func (n *Node) Endpoints() []string {
	if n.stream == nil {
		return nil
	}
	var out []string
	for _, sn := range n.stream.Nodes() {
		out = append(out, sn.Endpoints()...)
	}
	return out
}

// Logger returns the node's logger.
func (n *Node) Logger() *slog.Logger { return n.log }

// Shutdown drains the node, in the order that loses nothing: the STREAM listeners stop
// accepting and every session gets session-closing ServerDrain (their bindings send
// their tombstones as they end); then the binding layer stops, the Actors stop (their
// Stopping turns run), and the node leaves the mesh (peers see it as left, not failed).
// When ctx ends first, the sessions still open are closed without waiting, and ctx's
// error is returned after the rest has stopped.
func (n *Node) Shutdown(ctx context.Context) error {
	n.stopOnce.Do(func() {
		n.stopReloader()
		var errs []error
		if n.stream != nil {
			if err := n.stream.Shutdown(ctx); err != nil {
				errs = append(errs, fmt.Errorf("meshnode: drain sessions: %w", err))
			}
		}
		n.stopAttacher()
		n.binder.Stop()
		n.actors.Close() // session workers close their hosts here
		n.topics.Stop()
		n.closeServices()
		lctx, cancel := context.WithTimeout(context.Background(), leaveTimeout)
		defer cancel()
		if err := n.mesh.Leave(lctx); err != nil {
			errs = append(errs, err)
		}
		n.closeStore()
		n.stopErr = errors.Join(errs...)
	})
	return n.stopErr
}

// DrainParallel is how many Actors Drain moves at once.
const DrainParallel = 8

// Drain takes the node out of the fleet without losing Actor state: it moves every
// Actor hosted here to the other members (Actor host Drain; from then on nothing new
// is placed here; a move that fails for a passing reason is tried again until ctx
// ends), then shuts down as Shutdown does (sessions get ServerDrain, the node leaves
// the mesh). It returns how many Actors moved.
//
// When an Actor could not move, Drain does not shut down: it returns an error naming
// each one and why (ErrDrainIncomplete), and the node keeps running and serving them,
// so that nothing is lost. The caller decides: Shutdown then stops the node, and the
// in-memory state of those Actors with it.
func (n *Node) Drain(ctx context.Context) (int, error) {
	moved, err := n.actors.Drain(ctx, DrainParallel)
	if err != nil {
		n.log.Error("meshnode: some Actors could not move off the draining node; it keeps running", "moved", moved, "err", err)
		return moved, fmt.Errorf("%w: %w", ErrDrainIncomplete, err)
	}
	return moved, n.Shutdown(ctx)
}

// ErrDrainIncomplete: Drain could not move every Actor off the node (kind
// Unavailable); the node is still running.
var ErrDrainIncomplete = fault.New(fault.Unavailable, "meshnode: drain incomplete: the node keeps the Actors that could not move")

// Close stops the node without draining: sessions are closed at once (no
// session-closing), then as Shutdown.
func (n *Node) Close() error {
	n.stopOnce.Do(func() {
		n.stopReloader()
		if n.stream != nil {
			_ = n.stream.Close()
		}
		n.stopAttacher()
		n.binder.Stop()
		n.actors.Close()
		n.topics.Stop()
		n.closeServices()
		n.stopErr = n.leave()
		n.closeStore()
	})
	return n.stopErr
}

// leaveTimeout bounds the graceful leave of the mesh.
const leaveTimeout = 5 * time.Second

func (n *Node) leave() error {
	ctx, cancel := context.WithTimeout(context.Background(), leaveTimeout)
	defer cancel()
	return n.mesh.Leave(ctx)
}

// kill stops the node as a crash would: its mesh lifecycle ends first, without a
// leave, so nothing it does afterwards reaches a peer; then its parts stop. Tests reach
// it through meshtest.
func (n *Node) kill() {
	n.stopOnce.Do(func() {
		n.stopReloader()
		nodert.Kill(n.mesh)
		if n.stream != nil {
			_ = n.stream.Close()
		}
		n.stopAttacher()
		n.binder.Stop()
		n.actors.Close()
		n.topics.Stop()
		n.closeServices()
		n.closeStore()
	})
}

// closeStore closes the store if the node opened it. It goes last on every path: the
// Actors' Stopping turns may still save.
func (n *Node) closeStore() {
	if n.ownsStore && n.store != nil {
		if err := n.store.Close(); err != nil {
			n.log.Warn("meshnode: closing the store", "err", err)
		}
	}
}

// Store returns the node's Actor state store (nil when it has none).
func (n *Node) Store() store.Store { return n.store }

func init() { nodert.KillNode = func(node any) { node.(*Node).kill() } }
