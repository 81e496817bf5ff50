package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	ff "github.com/peterbourgon/ff/v3"
	"github.com/peterbourgon/ff/v3/fftoml"
	"github.com/peterbourgon/ff/v3/ffyaml"

	"go.opentelemetry.io/otel/metric"

	"github.com/meshnode/meshnode"
	"github.com/meshnode/meshnode/actor"
	"github.com/meshnode/meshnode/binding"
	"github.com/meshnode/meshnode/examples/sampleapp"
	"github.com/meshnode/meshnode/mesh"
	"github.com/meshnode/meshnode/services"
	"github.com/meshnode/meshnode/session"
	"github.com/meshnode/meshnode/store"
	"github.com/meshnode/meshnode/store/pgstore"
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
	// sources says where each flag's value came from (meshnode config).
	sources map[string]string

	// storeURL names the Actor state store (empty: the embedded store in dataDir);
	// dataDir is the node's own directory (defaulted from the node id).
	storeURL string
	dataDir  string
	// storeWhere and dataDirWhere name where the values came from, for errors.
	storeWhere, dataDirWhere string
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

// rawFlags holds the flag values that are checked and converted after parsing.
type rawFlags struct {
	streams, join, wsOrigins listFlag
	logLevel, preset, config string
}

// defineFlags declares the serve flags on fs, writing into cfg and raw.
func defineFlags(fs *flag.FlagSet, cfg *serveConfig, raw *rawFlags) {
	fs.Var(&raw.streams, "stream", "STREAM listener endpoint, repeatable: tcp://host:port, tls://host:port, ws://host:port/path, wss://host:port/path (default "+strings.Join(defaultStreams, " and ")+")")
	fs.StringVar(&cfg.tlsCert, "tls-cert", "", "PEM certificate chain for tls:// and wss:// listeners")
	fs.StringVar(&cfg.tlsKey, "tls-key", "", "PEM private key for tls:// and wss:// listeners")
	fs.StringVar(&cfg.tlsClientCA, "tls-client-ca", "", "PEM CA bundle; when set, TLS clients must present a certificate it signed")
	fs.Int64Var(&cfg.maxMessageSize, "max-message-size", session.DefaultMaxMessageSize, "inbound cap on header+payload bytes; 0 = no cap")
	fs.DurationVar(&cfg.idleTimeout, "idle-timeout", 0, "close sessions idle this long (0 = never)")
	fs.StringVar(&cfg.admin, "admin", defaultAdmin, "admin HTTP address serving the dashboard at /, the JSON admin API, /metrics, /healthz, /readyz (empty = off)")
	fs.BoolVar(&cfg.pprof, "pprof", false, "serve net/http/pprof under /debug/pprof/ on the admin address (off by default)")
	fs.DurationVar(&cfg.drainTimeout, "drain-timeout", 30*time.Second, "how long SIGINT/SIGTERM waits for sessions to drain")
	fs.BoolVar(&cfg.drainActors, "drain-actors", false, "on SIGINT/SIGTERM, move every Actor to the other members before draining sessions and leaving (as meshnode drain does)")
	fs.StringVar(&raw.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&cfg.nodeName, "node-name", "gateway", "name of the stream node")
	fs.StringVar(&cfg.nodeID, "node-id", "", "stable node RID (default: the advertised mesh address)")
	fs.StringVar(&cfg.meshAddr, "mesh", defaultMesh, "gossip (memberlist) bind address host:port; port 0 = OS-assigned")
	fs.StringVar(&cfg.remoteAddr, "remote", defaultRemote, "protoactor remote bind address host:port; same host as --mesh")
	fs.Var(&raw.join, "join", "mesh address host:port of a node to join, repeatable; a DNS name joins through every address it resolves to (resolved again while the join is retried; a name that does not resolve fails the start)")
	fs.StringVar(&cfg.advertiseHost, "advertise-host", "", "host peers and clients use to reach this node (default: the bind host; required with 0.0.0.0)")
	fs.StringVar(&raw.preset, "mesh-timing", "lan", "memberlist timing: lan (production), local (one host), test (fast, for tests)")
	fs.IntVar(&cfg.maxConnections, "max-connections", session.DefaultMaxConnections(), "client connections held at once; past it new ones are refused cleanly (default: the open-files limit less a reserve; -1 = no limit)")
	fs.DurationVar(&cfg.frameTimeout, "frame-timeout", 10*time.Second, "a frame begun must complete within this, or its connection is closed (-1s = off)")
	fs.DurationVar(&cfg.actorIdleTimeout, "actor-idle-timeout", actor.DefaultIdleTimeout, "deactivate an Actor with no binding and no message for this long (-1s = never)")
	fs.IntVar(&cfg.maxBindingsPerSession, "max-bindings-per-session", binding.DefaultMaxBindingsPerSession, "Actors one session may be bound to at once")
	fs.IntVar(&cfg.maxRelayedRequests, "max-relayed-requests", binding.DefaultMaxRelayedRequests, "relayed requests of one session awaiting replies; past it the session stops reading")
	fs.DurationVar(&cfg.relayTimeout, "relay-timeout", binding.DefaultRelayTimeout, "a relayed request without a reply fails with deadline_exceeded after this (-1s = never)")
	fs.Var(&raw.wsOrigins, "ws-origin", "browser origin host pattern allowed to open ws:// and wss:// sessions, repeatable (default: any origin; clients that send no Origin header are always allowed)")
	fs.StringVar(&cfg.storeURL, "store", "", "where Actors keep their state: bolt:PATH (embedded), postgres://user:password@host:port/db (PostgreSQL, shared by a fleet), memory: (lost at exit); default: the embedded store in --data-dir")
	fs.StringVar(&cfg.dataDir, "data-dir", "", "the node's own directory; the embedded store is DIR/state.db (default ./meshnode-data/<node id>)")
	fs.StringVar(&raw.config, "config", "", "configuration file, TOML or YAML (.yaml, .yml): keys are the flag names (a repeatable flag takes an array)")
}

// envPrefix prefixes the environment variable of each flag: MESHNODE_ + the flag's
// name in capitals with dashes as underscores (a repeatable flag takes a comma-separated
// list).
const envPrefix = "MESHNODE"

// configParser is the parser of the configuration file at path: YAML for a .yaml or
// .yml file, TOML otherwise.
func configParser(path string) ff.ConfigFileParser {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".yaml", ".yml":
		return ffyaml.Parser
	}
	return fftoml.Parser
}

// parseSources parses args, the environment and the configuration file into fs
// (precedence flag > env > file > default, peterbourgon/ff), and says where each flag's
// value came from: "flag", "env MESHNODE_X", "file PATH" or "default".
//
// A MESHNODE_* variable or a file key that names no flag is an error naming it (and
// the setting it most likely meant): a misspelt setting must not be ignored.
func parseSources(fs *flag.FlagSet, args []string) (map[string]string, error) {
	if err := checkEnvNames(fs, os.Environ()); err != nil {
		return nil, err
	}
	err := ff.Parse(fs, args, ff.WithEnvVarPrefix(envPrefix), ff.WithEnvVarSplit(","),
		ff.WithConfigFileFlag("config"), ff.WithConfigFileParser(func(r io.Reader, set func(name, value string) error) error {
			// ff reads the file once the command line and the environment are parsed:
			// --config holds its path by then.
			return configParser(fs.Lookup("config").Value.String())(r, func(name, value string) error {
				if fs.Lookup(name) == nil {
					return fmt.Errorf("key %q is not a meshnode setting%s", name, didYouMean(fs, name, func(s string) string { return s }))
				}
				return set(name, value)
			})
		}))
	if err != nil {
		if cf := fs.Lookup("config"); cf != nil && cf.Value.String() != "" && strings.Contains(err.Error(), "config") {
			return nil, fmt.Errorf("config file %s: %w", cf.Value.String(), err)
		}
		return nil, err
	}
	// Which flags the command line set: parse args again into a throw-away set.
	probe := flag.NewFlagSet("probe", flag.ContinueOnError)
	probe.SetOutput(io.Discard)
	defineFlags(probe, &serveConfig{}, &rawFlags{})
	_ = probe.Parse(args)
	sources := map[string]string{}
	probe.Visit(func(f *flag.Flag) { sources[f.Name] = "flag" })
	inFile := map[string]bool{}
	if path := fs.Lookup("config").Value.String(); path != "" {
		if f, err := os.Open(path); err == nil {
			_ = configParser(path)(f, func(name, _ string) error { inFile[name] = true; return nil })
			_ = f.Close()
		}
	}
	fs.VisitAll(func(f *flag.Flag) {
		if sources[f.Name] != "" {
			return
		}
		env := envName(f.Name)
		switch _, set := os.LookupEnv(env); {
		case set:
			sources[f.Name] = "env " + env
		case inFile[f.Name]:
			sources[f.Name] = "file " + fs.Lookup("config").Value.String()
		default:
			sources[f.Name] = "default"
		}
	})
	return sources, nil
}

func parseServeFlags(args []string, stderr io.Writer) (serveConfig, error) {
	cfg, _, err := parseServeConfig(args, stderr)
	return cfg, err
}

// parseServeConfig parses and checks the serve configuration; sources says where each
// value came from (errors about a value name it).
func parseServeConfig(args []string, stderr io.Writer) (serveConfig, map[string]string, error) {
	cfg := serveConfig{maxMessageSize: session.DefaultMaxMessageSize}
	fs := flag.NewFlagSet("meshnode", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var raw rawFlags
	defineFlags(fs, &cfg, &raw)
	sources, err := parseSources(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return cfg, nil, errHelped // the flag package printed the flags
		}
		if strings.HasPrefix(err.Error(), "error parsing commandline arguments") {
			return cfg, nil, errUsage
		}
		return cfg, nil, err
	}
	cfg.sources = sources
	// where names a value by its source, for error messages: the flag, the
	// environment variable or the configuration file's key.
	where := func(name string) string {
		switch src := sources[name]; {
		case strings.HasPrefix(src, "env "):
			return "environment variable " + strings.TrimPrefix(src, "env ")
		case strings.HasPrefix(src, "file "):
			return "config file " + strings.TrimPrefix(src, "file ") + " key " + name
		}
		return "flag --" + name
	}
	streams, join, wsOrigins, logLevel, preset := raw.streams, raw.join, raw.wsOrigins, raw.logLevel, raw.preset
	cfg.wsOrigins = wsOrigins
	if fs.NArg() > 0 {
		return cfg, nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
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
		return cfg, nil, fmt.Errorf("%s: %q is not lan, local or test", where("mesh-timing"), preset)
	}
	meshHost, _, err := splitHostPortFlag(where("mesh"), cfg.meshAddr)
	if err != nil {
		return cfg, nil, err
	}
	remoteHost, _, err := splitHostPortFlag(where("remote"), cfg.remoteAddr)
	if err != nil {
		return cfg, nil, err
	}
	if meshHost != remoteHost {
		return cfg, nil, fmt.Errorf("%s: host %q differs from --mesh host %q", where("remote"), remoteHost, meshHost)
	}
	for _, j := range cfg.join {
		if _, _, err := splitHostPortFlag(where("join"), j); err != nil {
			return cfg, nil, err
		}
	}
	if (meshHost == "0.0.0.0" || meshHost == "::") && cfg.advertiseHost == "" {
		return cfg, nil, fmt.Errorf("%s: required when --mesh binds a wildcard host", where("advertise-host"))
	}
	if len(cfg.streams) == 0 {
		cfg.streams = defaultStreams
	}
	if err := cfg.logLevel.UnmarshalText([]byte(logLevel)); err != nil {
		return cfg, nil, fmt.Errorf("%s: %w", where("log-level"), err)
	}
	if cfg.maxMessageSize < 0 {
		return cfg, nil, fmt.Errorf("%s: must be 0 (no cap) or positive", where("max-message-size"))
	}
	if cfg.idleTimeout < 0 {
		return cfg, nil, fmt.Errorf("%s: must not be negative", where("idle-timeout"))
	}
	if cfg.maxConnections == 0 || cfg.maxConnections < -1 {
		return cfg, nil, fmt.Errorf("%s: must be positive, or -1 for no limit", where("max-connections"))
	}
	if cfg.frameTimeout == 0 {
		return cfg, nil, fmt.Errorf("%s: must be positive, or negative to turn it off", where("frame-timeout"))
	}
	if cfg.actorIdleTimeout == 0 {
		return cfg, nil, fmt.Errorf("%s: must be positive, or negative for never", where("actor-idle-timeout"))
	}
	if cfg.maxBindingsPerSession <= 0 {
		return cfg, nil, fmt.Errorf("%s: must be positive", where("max-bindings-per-session"))
	}
	if cfg.maxRelayedRequests <= 0 {
		return cfg, nil, fmt.Errorf("%s: must be positive", where("max-relayed-requests"))
	}
	if cfg.relayTimeout == 0 {
		return cfg, nil, fmt.Errorf("%s: must be positive, or negative for never", where("relay-timeout"))
	}
	if cfg.admin != "" {
		if _, _, err := net.SplitHostPort(cfg.admin); err != nil {
			return cfg, nil, fmt.Errorf("%s: %w", where("admin"), err)
		}
	}
	secure := false
	for _, s := range cfg.streams {
		if strings.HasPrefix(s, "tls://") || strings.HasPrefix(s, "wss://") {
			secure = true
		}
	}
	if secure && (cfg.tlsCert == "" || cfg.tlsKey == "") {
		return cfg, nil, fmt.Errorf("%s: tls:// and wss:// endpoints need --tls-cert and --tls-key", where("stream"))
	}
	if cfg.tlsClientCA != "" && cfg.tlsCert == "" {
		return cfg, nil, fmt.Errorf("%s: needs --tls-cert and --tls-key", where("tls-client-ca"))
	}
	if err := checkListeners(cfg.streams, where("stream")); err != nil {
		return cfg, nil, err
	}
	if err := checkTLSFiles(cfg, where); err != nil {
		return cfg, nil, err
	}
	cfg.storeWhere, cfg.dataDirWhere = where("store"), where("data-dir")
	if cfg.storeURL != "" {
		loc, err := store.ParseURL(cfg.storeURL)
		if err == nil && loc.Scheme == "postgres" {
			_, err = pgstore.ParseURL(loc.URL)
		}
		if err != nil {
			return cfg, nil, fmt.Errorf("%s: %w", cfg.storeWhere, err)
		}
	}
	if cfg.dataDir == "" {
		cfg.dataDir = defaultDataDir(cfg.nodeID, cfg.meshAddr)
	}
	return cfg, sources, nil
}

// defaultDataDir is ./meshnode-data/ and the node's RID (its --node-id, else its mesh
// address) with every character outside [A-Za-z0-9._-] made '_'.
func defaultDataDir(nodeID, meshAddr string) string {
	id := nodeID
	if id == "" {
		id = meshAddr
	}
	b := []byte(id)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_') {
			b[i] = '_'
		}
	}
	name := string(b)
	if name == "" || name == "." || name == ".." {
		name = "node"
	}
	return filepath.Join("meshnode-data", name)
}

// checkListeners refuses a STREAM endpoint given twice, and two endpoints on the same
// host and fixed port (one listener per address), naming them.
func checkListeners(streams []string, where string) error {
	seen := map[string]string{} // endpoint or host:port -> the endpoint that took it
	for _, s := range streams {
		if prev, dup := seen[s]; dup {
			return fmt.Errorf("%s: listener %s is given twice", where, prev)
		}
		seen[s] = s
		u, err := url.Parse(s)
		if err != nil || u.Host == "" || u.Port() == "" || u.Port() == "0" {
			continue // a malformed endpoint fails at start, naming it; port 0 is the OS's pick
		}
		if prev, dup := seen["addr "+u.Host]; dup {
			return fmt.Errorf("%s: listeners %s and %s both listen on %s", where, prev, s, u.Host)
		}
		seen["addr "+u.Host] = s
	}
	return nil
}

// checkTLSFiles loads the TLS files as the listeners will, so that a missing, unreadable
// or malformed one fails the start naming it and where it was set.
func checkTLSFiles(cfg serveConfig, where func(string) string) error {
	if cfg.tlsCert == "" && cfg.tlsKey == "" {
		return nil
	}
	for _, f := range []struct{ name, path string }{{"tls-cert", cfg.tlsCert}, {"tls-key", cfg.tlsKey}, {"tls-client-ca", cfg.tlsClientCA}} {
		if f.path == "" {
			continue
		}
		if _, err := os.ReadFile(f.path); err != nil {
			return fmt.Errorf("%s: %w", where(f.name), err)
		}
	}
	if cfg.tlsCert == "" || cfg.tlsKey == "" {
		return nil // a lone --tls-cert or --tls-key is refused with the listeners
	}
	if _, err := tls.LoadX509KeyPair(cfg.tlsCert, cfg.tlsKey); err != nil {
		return fmt.Errorf("%s %s and %s %s: %w", where("tls-cert"), cfg.tlsCert, where("tls-key"), cfg.tlsKey, err)
	}
	if cfg.tlsClientCA != "" {
		pem, _ := os.ReadFile(cfg.tlsClientCA)
		if !x509.NewCertPool().AppendCertsFromPEM(pem) {
			return fmt.Errorf("%s: %s holds no PEM certificate", where("tls-client-ca"), cfg.tlsClientCA)
		}
	}
	return nil
}

// splitHostPortFlag parses a host:port value, naming where it came from (the flag, the
// environment variable or the configuration key) in its error.
func splitHostPortFlag(where, v string) (string, int, error) {
	host, portStr, err := net.SplitHostPort(v)
	if err != nil {
		return "", 0, fmt.Errorf("%s: %w", where, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("%s: bad port %q", where, portStr)
	}
	if host == "" {
		return "", 0, fmt.Errorf("%s: host missing in %q", where, v)
	}
	return host, port, nil
}

// nodeConfig is the node's configuration: the LAN preset with the flags applied, the
// sample app as the session and its Actor kinds.
func (c serveConfig) nodeConfig(log *slog.Logger, meters metric.MeterProvider) meshnode.Config {
	meshHost, meshPort, _ := splitHostPortFlag("flag --mesh", c.meshAddr)
	_, remotePort, _ := splitHostPortFlag("flag --remote", c.remoteAddr)
	nc := meshnode.DefaultLANConfig()
	nc.NodeID = c.nodeID
	nc.BindHost, nc.AdvertiseHost = meshHost, c.advertiseHost
	nc.MeshPort, nc.RemotePort = meshPort, remotePort
	nc.Join = c.join
	nc.Timing = c.meshPreset
	nc.Streams = c.streams
	nc.StreamName = c.nodeName
	// No route keeps a Send packet past its callback (the sample's copy what they send or
	// relay, Retain what a relay holds; the services' cancel only looks its id up), so
	// the session reuses them.
	nc.Session = func(n *meshnode.Node) session.SessionType {
		return n.ServeServices(sampleapp.Mux(n.Binder(), n.Topics())).Type().ReuseSendPackets()
	}
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
	nc.StoreURL, nc.DataDir = c.storeURL, c.dataDir
	return nc
}

// checkEnvNames refuses a MESHNODE_* variable of env that names no flag of fs.
func checkEnvNames(fs *flag.FlagSet, env []string) error {
	var bad []string
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, envPrefix+"_") {
			continue
		}
		flagName := strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(name, envPrefix+"_")), "_", "-")
		if fs.Lookup(flagName) == nil {
			bad = append(bad, fmt.Sprintf("environment variable %s is not a meshnode setting%s", name, didYouMean(fs, flagName, envName)))
		}
	}
	if len(bad) > 0 {
		slices.Sort(bad)
		return errors.New(strings.Join(bad, "; "))
	}
	return nil
}

// envName is the environment variable of flag name.
func envName(name string) string {
	return envPrefix + "_" + strings.ReplaceAll(strings.ToUpper(name), "-", "_")
}

// didYouMean suggests the flag of fs closest to name (at most a third of its letters
// apart), written as show writes it: " (did you mean X?)", or "".
func didYouMean(fs *flag.FlagSet, name string, show func(string) string) string {
	best, bestD := "", len(name)/3+1
	fs.VisitAll(func(f *flag.Flag) {
		if d := editDistance(name, f.Name); d < bestD {
			best, bestD = f.Name, d
		}
	})
	if best == "" {
		return ""
	}
	return " (did you mean " + show(best) + "?)"
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
