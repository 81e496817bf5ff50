package meshnode

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/meshnode/meshnode/services"
	"github.com/meshnode/meshnode/topic"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/meshnode/meshnode/actor"
	"github.com/meshnode/meshnode/binding"
	"github.com/meshnode/meshnode/fault"
	"github.com/meshnode/meshnode/mesh"
	"github.com/meshnode/meshnode/session"
	"github.com/meshnode/meshnode/store"
	"github.com/meshnode/meshnode/store/boltstore"
	"github.com/meshnode/meshnode/store/pgstore"
)

// Config is everything one node is: its identity and mesh timing, its STREAM listeners
// and session, its Actor kinds and message types, and its bounds. A zero field means
// the default; the presets (DefaultLANConfig, DefaultLocalConfig, TestConfig) fill the
// common cases, like memberlist's.
type Config struct {
	// Identity and the mesh.

	// NodeID is the node's stable RID (default: its advertised mesh address).
	NodeID string
	// BindHost is the host every socket opens on (default 127.0.0.1); AdvertiseHost the
	// host peers and clients use (required with a wildcard BindHost).
	BindHost      string
	AdvertiseHost string
	// MeshPort (gossip) and RemotePort (records between nodes); 0: the OS chooses.
	MeshPort   int
	RemotePort int
	// Join lists mesh addresses (host:port) of nodes to join; retried with backoff.
	Join []string
	// AdminAddr is the host:port of this node's admin HTTP server, if it has one,
	// gossiped to the other members (mesh.Member.AdminAddr) so that any node's operator
	// dashboard can read every member's figures. It must be dialable by peers (not a
	// wildcard host). Empty: none is gossiped.
	AdminAddr string
	// Version is the build version this node announces to the other members
	// (mesh.Member.Versions). Empty: the main module's version from the binary's build
	// information.
	Version string
	// Revision is the VCS revision this node announces (empty: the build information's).
	Revision string
	// Timing is memberlist's timing: mesh.PresetLAN (default), PresetLocal, PresetTest.
	Timing mesh.Preset
	// PeerWindowRecords and PeerWindowBytes bound the records toward one peer node not
	// yet acknowledged by it (0: mesh's defaults).
	PeerWindowRecords int
	PeerWindowBytes   int64
	// NoRecordCoalescing sends each record toward a peer node as a message of its own
	// instead of coalescing the records queued at the same moment into one (the fast
	// path; off only to compare or to run the suites without it).
	NoRecordCoalescing bool

	// STREAM: clients connect here. Without Streams the node has no STREAM listener
	// (a node that only hosts Actors).

	// Streams are the listener endpoints: tcp://host:port, tls://, ws://host:port/path,
	// wss://. Port 0: the OS chooses (Node.Endpoints says which).
	Streams []string
	// StreamName names the stream node (default "gateway").
	StreamName string
	// Session returns the node's session type (a session.Mux's Type, typically); it is
	// given the node so that its handlers can bind sessions to Actors. Required with
	// Streams.
	Session func(n *Node) session.SessionType
	// TLSCertFile and TLSKeyFile serve tls:// and wss://; TLSClientCAFile, when set,
	// requires client certificates signed by it.
	TLSCertFile, TLSKeyFile, TLSClientCAFile string
	// MaxMessageSize caps an inbound message's header+payload (0: 64 KiB; negative: no
	// cap).
	MaxMessageSize int64
	// IdleTimeout closes sessions with no inbound frame for this long (0: never).
	IdleTimeout time.Duration
	// NoPacketReuse allocates every STREAM packet anew, even for a session type that
	// reuses its Send packets (session.HostOptions.NoPacketReuse): to rule reuse out
	// when diagnosing, and to run the suites without it.
	NoPacketReuse bool
	// Socket are the per-connection settings and bounds (session.SocketOptions).
	Socket session.SocketOptions
	// MaxConnections bounds the client connections held at once (0: the open-files
	// limit less a reserve; negative: no limit). JobQueue is the host-wide permit count
	// (0: 128 per processor). StallTimeout: session.HostOptions.StallTimeout.
	MaxConnections int
	JobQueue       int
	StallTimeout   time.Duration
	// WebSocketOrigins restricts the browser origins that may open ws:// and wss://
	// sessions (host patterns; empty: any).
	WebSocketOrigins []string

	// Actors.

	// Kinds are the Actor kinds this node hosts.
	Kinds []actor.Kind
	// Messages are the message types Actors exchange (actor.MessageOf).
	Messages []actor.MessageType
	// ActorIdleTimeout deactivates an Actor with no binding and no message for this
	// long (0: 5 minutes; negative: never).
	ActorIdleTimeout time.Duration
	// MaxMailbox, MaxMailboxBytes, MaxPanics and PanicWindow: actor.HostOptions.
	MaxMailbox      int
	MaxMailboxBytes int64
	MaxPanics       int
	PanicWindow     time.Duration

	// Actor state that survives a crash (docs/persistence.md).

	// Store keeps the state of the kinds that persist it (actor.Kind Persist). A Store
	// given here is the caller's: the node does not close it. When nil, StoreURL names
	// the store, or else DataDir holds an embedded one; with none of the three the node
	// has no store, and a kind that persists fails the start.
	Store store.Store
	// StoreURL is bolt:PATH (an embedded bbolt file), postgres://user:password@host:port/db
	// (PostgreSQL, for a fleet: every node the same URL) or memory: (this process only).
	StoreURL string
	// DataDir is the node's own directory: with no Store and no StoreURL, the embedded
	// store is DataDir/state.db (created when missing).
	DataDir string
	// StoreTimeout bounds one store operation (0: actor.DefaultStoreTimeout); a save
	// that takes longer fails with an unknown outcome. MaxStateSize is the largest state
	// a save writes to a store the node opens (0: store.DefaultMaxStateSize).
	StoreTimeout time.Duration
	MaxStateSize int

	// Plugin services.

	// Services returns the server facets of the node's services host: the server
	// services every STREAM client of the node reaches (when the session serves them:
	// Node.ServeServices) and the session workers on the node use. nil: no services
	// host unless ServiceWorker is set.
	Services func(n *Node) []services.Facet
	// ServiceWorker makes the Actors of its kind session workers: sessions are created
	// and removed with SessionManagement, presentations attach to one (any number at
	// once) and their session-service calls go to its worker, on any node. It also
	// registers the sessions directory's kind and the services' message types.
	ServiceWorker *ServiceWorker

	// Binding carries the bounds and timeouts of sessions bound to Actors (relay
	// timeout, relayed requests, relay window, bindings per session). Its Logger and
	// MeterProvider default to the node's.
	Binding binding.Options

	// Topics carries the bounds of topics (topics per session and per publisher, the
	// payload limit) and their timing (docs/topics.md). Its Codecs, Logger and
	// MeterProvider default to the node's.
	Topics topic.Options

	// Security of the mesh (docs/security.md). Without it a node binds only loopback
	// addresses (BindHost), unless InsecureMesh says otherwise.

	// MeshTLSCertFile, MeshTLSKeyFile and MeshTLSCAFile (all three, or none) make the
	// record transport between nodes mutual TLS: the node's certificate (PEM, with a
	// DNS SAN equal to NodeID, for both server and client authentication), its key,
	// and the fleet CA every peer's certificate must chain to. A peer whose records
	// claim a node id its certificate does not name is refused. The files are read
	// again when they change (ReloadInterval) and on Node.Reload: a renewed certificate
	// serves the next handshakes without a restart. Requires NodeID.
	MeshTLSCertFile, MeshTLSKeyFile, MeshTLSCAFile string
	// GossipKeys encrypt gossip (memberlist's keyring, AES-GCM): 16, 24 or 32 bytes
	// each, the first the primary. GossipKeyFile reads them from a file instead (one
	// base64 key per line, the first the primary), re-read as the certificates are, so
	// keys rotate without a restart. A node without the fleet's key cannot join.
	GossipKeys    [][]byte
	GossipKeyFile string
	// ClusterLabel is carried on every gossip packet and stream (authenticated with the
	// gossip key): a node refuses another label, so two fleets on one network never
	// merge. At most 255 bytes; empty: no label.
	ClusterLabel string
	// InsecureMesh lets a node bind a non-loopback BindHost without mesh TLS or gossip
	// encryption; Start logs a warning naming what is missing. Without it, such a
	// configuration fails the start.
	InsecureMesh bool
	// ReloadInterval is how often the node checks its certificate and gossip key files
	// for changes (0: DefaultReloadInterval; negative: never, only Node.Reload).
	ReloadInterval time.Duration

	// Logger and MeterProvider: nil means slog.Default() and otel's global provider.
	Logger        *slog.Logger
	MeterProvider metric.MeterProvider
	// TracerProvider traces STREAM packets end to end: a server span per packet, the
	// relay to a bound Actor and its turn, the reply, and the node's service calls
	// (docs/tracing.md). nil means tracing off (a no-op provider, not otel's global:
	// tracing is off unless configured); tracing.NewProviderFromEnv builds one from the
	// standard OTEL_* variables.
	TracerProvider trace.TracerProvider
}

// ServiceWorker is a session-worker Actor kind: each activation runs Facets (session
// facets); Authorize (nil: anyone) decides who may create, remove and attach to which
// session.
type ServiceWorker struct {
	Kind      string
	Facets    []services.Facet
	Authorize services.Authorize
}

// DefaultLANConfig is the production preset: memberlist's LAN timing, the binary's
// well-known ports on loopback (STREAM tcp 7400 and ws 7401, gossip 7946, records
// 8090). Set BindHost/AdvertiseHost to serve beyond the machine.
func DefaultLANConfig() Config {
	return Config{
		Timing:     mesh.PresetLAN,
		MeshPort:   7946,
		RemotePort: 8090,
		Streams:    []string{"tcp://127.0.0.1:7400", "ws://127.0.0.1:7401/"},
	}
}

// DefaultLocalConfig is for several nodes on one host: memberlist's local timing
// (faster failure detection), every port chosen by the OS.
func DefaultLocalConfig() Config {
	return Config{Timing: mesh.PresetLocal, Streams: []string{"tcp://127.0.0.1:0"}}
}

// TestConfig is for nodes started by tests in one process: the test timing (fast
// convergence and failure detection), every port chosen by the OS, no STREAM listener
// (add Streams and Session to serve clients).
func TestConfig() Config { return Config{Timing: mesh.PresetTest} }

// validate checks what Start cannot leave to the packages it wires; errors name the
// field.
func (c *Config) validate() error {
	switch c.Timing {
	case mesh.PresetLAN, mesh.PresetLocal, mesh.PresetTest:
	default:
		return configError("Timing", "unknown preset %d", c.Timing)
	}
	if len(c.Streams) > 0 && c.Session == nil {
		return configError("Session", "required when Streams lists endpoints")
	}
	if len(c.Streams) == 0 && c.Session != nil {
		return configError("Streams", "a Session is set but no endpoint to serve it")
	}
	if c.TLSClientCAFile != "" && (c.TLSCertFile == "" || c.TLSKeyFile == "") {
		return configError("TLSClientCAFile", "needs TLSCertFile and TLSKeyFile")
	}
	if (c.TLSCertFile == "") != (c.TLSKeyFile == "") {
		return configError("TLSCertFile", "TLSCertFile and TLSKeyFile go together")
	}
	if w := c.ServiceWorker; w != nil && (w.Kind == "" || len(w.Facets) == 0) {
		return configError("ServiceWorker", "needs a Kind and its session Facets")
	}
	if c.MeshPort < 0 || c.MeshPort > 65535 {
		return configError("MeshPort", "%d is not a port", c.MeshPort)
	}
	if c.RemotePort < 0 || c.RemotePort > 65535 {
		return configError("RemotePort", "%d is not a port", c.RemotePort)
	}
	if c.MeshPort != 0 && c.MeshPort == c.RemotePort {
		return configError("RemotePort", "the same port as MeshPort (%d)", c.MeshPort)
	}
	if c.Store == nil && c.StoreURL != "" {
		if _, err := store.ParseURL(c.StoreURL); err != nil {
			return configError("StoreURL", "%v", err)
		}
	}
	if c.MaxStateSize < 0 {
		return configError("MaxStateSize", "%d is negative", c.MaxStateSize)
	}
	return c.validateSecurity()
}

// ErrConfig is matched (errors.Is) by every configuration error of Start; it is of kind
// fault.NotConfigured.
var ErrConfig = fault.New(fault.NotConfigured, "meshnode: configuration error")

func configError(field, format string, args ...any) error {
	return fmt.Errorf("%w: Config.%s: %s", ErrConfig, field, fmt.Sprintf(format, args...))
}

// OpenStore opens the store cfg names: cfg.Store as it is (owned false: the caller
// closes it), else the store of cfg.StoreURL, else the embedded store in cfg.DataDir;
// nil when cfg names none. Errors name the Config field and match the store's typed
// errors (store.ErrBadURL, ErrUnavailable, ErrAccessDenied).
func OpenStore(ctx context.Context, cfg Config) (s store.Store, owned bool, err error) {
	if cfg.Store != nil {
		return cfg.Store, false, nil
	}
	field, url := "StoreURL", cfg.StoreURL
	if url == "" {
		if cfg.DataDir == "" {
			return nil, false, nil
		}
		field, url = "DataDir", "bolt:"+filepath.Join(cfg.DataDir, boltstore.FileName)
	}
	loc, err := store.ParseURL(url)
	if err != nil {
		return nil, false, fmt.Errorf("meshnode: Config.%s: %w", field, err)
	}
	switch loc.Scheme {
	case "bolt":
		s, err = boltstore.Open(loc.Path, boltstore.Options{MaxStateSize: cfg.MaxStateSize})
	case "postgres":
		s, err = pgstore.Open(ctx, loc.URL, pgstore.Options{MaxStateSize: cfg.MaxStateSize})
	default:
		s = store.NewMemory(cfg.MaxStateSize)
	}
	if err != nil {
		return nil, false, fmt.Errorf("meshnode: Config.%s: %w", field, err)
	}
	return s, true, nil
}
