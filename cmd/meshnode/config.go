package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/meshnode/meshnode"
	"github.com/meshnode/meshnode/actor"
	"github.com/meshnode/meshnode/binding"
	"github.com/meshnode/meshnode/examples/sampleapp"
	"github.com/meshnode/meshnode/mesh"
	"github.com/meshnode/meshnode/services"
	"github.com/meshnode/meshnode/session"
)

// serveConfig is the binary's configuration, from flags.
type serveConfig struct {
	streams        []string
	tlsCert        string
	tlsKey         string
	tlsClientCA    string
	maxMessageSize int64
	idleTimeout    time.Duration
	admin          string
	drainTimeout   time.Duration
	logLevel       slog.Level
	nodeName       string

	nodeID        string
	meshAddr      string
	remoteAddr    string
	join          []string
	advertiseHost string
	meshPreset    mesh.Preset

	// Bounds and timeouts (one client must never hurt the others).
	maxConnections        int
	frameTimeout          time.Duration
	actorIdleTimeout      time.Duration
	maxBindingsPerSession int
	maxRelayedRequests    int
	relayTimeout          time.Duration

	// wsOrigins lists the browser origins that may open ws:// and wss:// sessions.
	wsOrigins []string
	// pprof serves net/http/pprof on the admin address.
	pprof bool
	// drainActors makes SIGINT/SIGTERM move the node's Actors to other members before
	// the sessions drain.
	drainActors bool
}

// Defaults of a bare `meshnode`: loopback only, nothing external.
var defaultStreams = []string{"tcp://127.0.0.1:7400", "ws://127.0.0.1:7401/"}

const (
	defaultAdmin  = "127.0.0.1:9464"
	defaultMesh   = "127.0.0.1:7946"
	defaultRemote = "127.0.0.1:8090"
)

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func parseServeFlags(args []string, stderr io.Writer) (serveConfig, error) {
	cfg := serveConfig{maxMessageSize: session.DefaultMaxMessageSize}
	defaultMaxConns := session.DefaultMaxConnections()
	fs := flag.NewFlagSet("meshnode", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var streams listFlag
	var logLevel string
	fs.Var(&streams, "stream", "STREAM listener endpoint, repeatable: tcp://host:port, tls://host:port, ws://host:port/path, wss://host:port/path (default "+strings.Join(defaultStreams, " and ")+")")
	fs.StringVar(&cfg.tlsCert, "tls-cert", "", "PEM certificate chain for tls:// and wss:// listeners")
	fs.StringVar(&cfg.tlsKey, "tls-key", "", "PEM private key for tls:// and wss:// listeners")
	fs.StringVar(&cfg.tlsClientCA, "tls-client-ca", "", "PEM CA bundle; when set, TLS clients must present a certificate it signed")
	fs.Int64Var(&cfg.maxMessageSize, "max-message-size", session.DefaultMaxMessageSize, "inbound cap on header+payload bytes; 0 = no cap")
	fs.DurationVar(&cfg.idleTimeout, "idle-timeout", 0, "close sessions idle this long (0 = never)")
	fs.StringVar(&cfg.admin, "admin", defaultAdmin, "admin HTTP address serving /metrics, /healthz, /readyz (empty = off)")
	fs.BoolVar(&cfg.pprof, "pprof", false, "serve net/http/pprof under /debug/pprof/ on the admin address (off by default)")
	fs.DurationVar(&cfg.drainTimeout, "drain-timeout", 30*time.Second, "how long SIGINT/SIGTERM waits for sessions to drain")
	fs.BoolVar(&cfg.drainActors, "drain-actors", false, "on SIGINT/SIGTERM, move every Actor to the other members before draining sessions and leaving (as `meshnode drain` does)")
	fs.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&cfg.nodeName, "node-name", "gateway", "name of the stream node")
	var join listFlag
	var preset string
	fs.StringVar(&cfg.nodeID, "node-id", "", "stable node RID (default: the advertised mesh address)")
	fs.StringVar(&cfg.meshAddr, "mesh", defaultMesh, "gossip (memberlist) bind address host:port; port 0 = OS-assigned")
	fs.StringVar(&cfg.remoteAddr, "remote", defaultRemote, "protoactor remote bind address host:port; same host as --mesh")
	fs.Var(&join, "join", "mesh address host:port of a node to join, repeatable")
	fs.StringVar(&cfg.advertiseHost, "advertise-host", "", "host peers and clients use to reach this node (default: the bind host; required with 0.0.0.0)")
	fs.StringVar(&preset, "mesh-timing", "lan", "memberlist timing: lan (production), local (one host), test (fast, for tests)")
	fs.IntVar(&cfg.maxConnections, "max-connections", defaultMaxConns, "client connections held at once; past it new ones are refused cleanly (default: the open-files limit less a reserve; -1 = no limit)")
	fs.DurationVar(&cfg.frameTimeout, "frame-timeout", 10*time.Second, "a frame begun must complete within this, or its connection is closed (-1s = off)")
	fs.DurationVar(&cfg.actorIdleTimeout, "actor-idle-timeout", actor.DefaultIdleTimeout, "deactivate an Actor with no binding and no message for this long (-1s = never)")
	fs.IntVar(&cfg.maxBindingsPerSession, "max-bindings-per-session", binding.DefaultMaxBindingsPerSession, "Actors one session may be bound to at once")
	fs.IntVar(&cfg.maxRelayedRequests, "max-relayed-requests", binding.DefaultMaxRelayedRequests, "relayed requests of one session awaiting replies; past it the session stops reading")
	fs.DurationVar(&cfg.relayTimeout, "relay-timeout", binding.DefaultRelayTimeout, "a relayed request without a reply fails with deadline_exceeded after this (-1s = never)")
	var wsOrigins listFlag
	fs.Var(&wsOrigins, "ws-origin", "browser origin host pattern allowed to open ws:// and wss:// sessions, repeatable (default: any origin; clients that send no Origin header are always allowed)")
	if err := fs.Parse(args); err != nil {
		return cfg, errUsage
	}
	cfg.wsOrigins = wsOrigins
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	cfg.streams = streams
	cfg.join = join
	switch preset {
	case "lan":
		cfg.meshPreset = mesh.PresetLAN
	case "local":
		cfg.meshPreset = mesh.PresetLocal
	case "test":
		cfg.meshPreset = mesh.PresetTest
	default:
		return cfg, fmt.Errorf("flag --mesh-timing: %q is not lan, local or test", preset)
	}
	meshHost, _, err := splitHostPortFlag("--mesh", cfg.meshAddr)
	if err != nil {
		return cfg, err
	}
	remoteHost, _, err := splitHostPortFlag("--remote", cfg.remoteAddr)
	if err != nil {
		return cfg, err
	}
	if meshHost != remoteHost {
		return cfg, fmt.Errorf("flag --remote: host %q differs from --mesh host %q", remoteHost, meshHost)
	}
	for _, j := range cfg.join {
		if _, _, err := splitHostPortFlag("--join", j); err != nil {
			return cfg, err
		}
	}
	if (meshHost == "0.0.0.0" || meshHost == "::") && cfg.advertiseHost == "" {
		return cfg, errors.New("flag --advertise-host: required when --mesh binds a wildcard host")
	}
	if len(cfg.streams) == 0 {
		cfg.streams = defaultStreams
	}
	if err := cfg.logLevel.UnmarshalText([]byte(logLevel)); err != nil {
		return cfg, fmt.Errorf("flag --log-level: %w", err)
	}
	if cfg.maxMessageSize < 0 {
		return cfg, errors.New("flag --max-message-size: must be 0 (no cap) or positive")
	}
	if cfg.idleTimeout < 0 {
		return cfg, errors.New("flag --idle-timeout: must not be negative")
	}
	if cfg.maxConnections == 0 || cfg.maxConnections < -1 {
		return cfg, errors.New("flag --max-connections: must be positive, or -1 for no limit")
	}
	if cfg.frameTimeout == 0 {
		return cfg, errors.New("flag --frame-timeout: must be positive, or negative to turn it off")
	}
	if cfg.actorIdleTimeout == 0 {
		return cfg, errors.New("flag --actor-idle-timeout: must be positive, or negative for never")
	}
	if cfg.maxBindingsPerSession <= 0 {
		return cfg, errors.New("flag --max-bindings-per-session: must be positive")
	}
	if cfg.maxRelayedRequests <= 0 {
		return cfg, errors.New("flag --max-relayed-requests: must be positive")
	}
	if cfg.relayTimeout == 0 {
		return cfg, errors.New("flag --relay-timeout: must be positive, or negative for never")
	}
	if cfg.admin != "" {
		if _, _, err := net.SplitHostPort(cfg.admin); err != nil {
			return cfg, fmt.Errorf("flag --admin: %w", err)
		}
	}
	secure := false
	for _, s := range cfg.streams {
		if strings.HasPrefix(s, "tls://") || strings.HasPrefix(s, "wss://") {
			secure = true
		}
	}
	if secure && (cfg.tlsCert == "" || cfg.tlsKey == "") {
		return cfg, errors.New("flag --stream: tls:// and wss:// endpoints need --tls-cert and --tls-key")
	}
	if cfg.tlsClientCA != "" && cfg.tlsCert == "" {
		return cfg, errors.New("flag --tls-client-ca: needs --tls-cert and --tls-key")
	}
	return cfg, nil
}

// splitHostPortFlag parses a host:port flag value, naming the flag in its error.
func splitHostPortFlag(flagName, v string) (string, int, error) {
	host, portStr, err := net.SplitHostPort(v)
	if err != nil {
		return "", 0, fmt.Errorf("flag %s: %w", flagName, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("flag %s: bad port %q", flagName, portStr)
	}
	if host == "" {
		return "", 0, fmt.Errorf("flag %s: host missing in %q", flagName, v)
	}
	return host, port, nil
}

// nodeConfig is the node's configuration: the LAN preset with the flags applied, the
// sample app as the session and its Actor kinds.
func (c serveConfig) nodeConfig(log *slog.Logger, meters metric.MeterProvider) meshnode.Config {
	meshHost, meshPort, _ := splitHostPortFlag("--mesh", c.meshAddr)
	_, remotePort, _ := splitHostPortFlag("--remote", c.remoteAddr)
	nc := meshnode.DefaultLANConfig()
	nc.NodeID = c.nodeID
	nc.BindHost, nc.AdvertiseHost = meshHost, c.advertiseHost
	nc.MeshPort, nc.RemotePort = meshPort, remotePort
	nc.Join = c.join
	nc.Timing = c.meshPreset
	nc.Streams = c.streams
	nc.StreamName = c.nodeName
	nc.Session = func(n *meshnode.Node) session.SessionType { return n.ServeServices(sampleapp.Mux(n.Binder())).Type() }
	nc.Kinds = sampleapp.Kinds()
	nc.Services = func(n *meshnode.Node) []services.Facet {
		return []services.Facet{sampleapp.NodeInfoFacet(func() string { return n.ID().RID }, func() int { return len(n.Membership().Live()) })}
	}
	nc.ServiceWorker = &meshnode.ServiceWorker{Kind: sampleapp.WorkerKind, Facets: []services.Facet{sampleapp.CounterFacet()}}
	nc.TLSCertFile, nc.TLSKeyFile, nc.TLSClientCAFile = c.tlsCert, c.tlsKey, c.tlsClientCA
	nc.MaxMessageSize = c.maxMessageSize
	if nc.MaxMessageSize == 0 {
		nc.MaxMessageSize = -1 // the flag's 0 means no cap
	}
	nc.IdleTimeout = c.idleTimeout
	nc.WebSocketOrigins = c.wsOrigins
	nc.Socket.FrameTimeout = c.frameTimeout
	nc.MaxConnections = c.maxConnections
	nc.ActorIdleTimeout = c.actorIdleTimeout
	nc.Binding = binding.Options{RelayTimeout: c.relayTimeout, MaxBindingsPerSession: c.maxBindingsPerSession,
		MaxRelayedRequests: c.maxRelayedRequests}
	nc.Logger, nc.MeterProvider = log, meters
	return nc
}
