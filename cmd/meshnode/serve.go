package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/meshnode/meshnode"
	"github.com/meshnode/meshnode/mesh"
)

// serve runs the node until ctx ends, then drains.
func serve(ctx context.Context, cfg serveConfig, stdout, stderr io.Writer) error {
	started := time.Now()
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: cfg.logLevel}))
	// SIGHUP reloads the certificates, gossip keys and admin tokens (reloadLoop) instead
	// of ending the process, its default: taken over before anything starts.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	bi := build()
	met, err := newMetrics(bi)
	if err != nil {
		return err
	}
	defer func() { _ = met.meters.Shutdown(context.Background()) }()

	tracer, stopTracing, err := startTracing(ctx, cfg, log, met.meters, stdout)
	if err != nil {
		return err
	}
	defer stopTracing() // after the node stopped: its last spans are flushed
	// The admin listener opens before the node starts: with port 0 its real port is
	// part of the address the node gossips (the dashboard of any member reads this
	// node's figures there).
	var adminLn net.Listener
	nodeCfg := cfg.nodeConfig(log, met.meters)
	nodeCfg.Version, nodeCfg.Revision = bi.Version, bi.ShortRevision()
	nodeCfg.TracerProvider = tracer
	st, err := openStore(ctx, cfg, nodeCfg, stdout)
	if err != nil {
		return err
	}
	defer func() { _ = st.Close() }() // after the node stopped: its Actors' last turns may save
	nodeCfg.Store = st
	if cfg.admin != "" {
		if adminLn, err = net.Listen("tcp", cfg.admin); err != nil {
			return fmt.Errorf("flag --admin: %w", err)
		}
		nodeCfg.AdminAddr = advertisedAdmin(adminLn.Addr(), cfg)
	}
	node, err := meshnode.Start(ctx, nodeCfg)
	if err != nil {
		if adminLn != nil {
			_ = adminLn.Close()
		}
		return err
	}
	sec, err := newAdminSecurity(cfg, node, log, met.meters)
	if err != nil {
		_ = node.Close()
		if adminLn != nil {
			_ = adminLn.Close()
		}
		return err
	}
	defer sec.auth.close()
	stopReload := make(chan struct{})
	waitReload := reloadLoop(node, sec, log, hup, stopReload)
	defer func() { close(stopReload); waitReload() }()
	id := node.Mesh().ID()
	met.nodeStarted(id)
	fmt.Fprintf(stdout, "meshnode: node %s generation %d, mesh %s, remote %s\n", id.RID, id.Generation, node.Mesh().MeshAddr(), node.Mesh().RemoteAddr())
	printProtections(stdout, log, cfg)

	ready := newReadiness()
	seeds := strings.Join(cfg.join, ", ")
	if len(cfg.join) > 0 {
		// Ready once a seed answered: a node that serves before it has joined places
		// Actors as if it were alone. Said before the admin address answers.
		ready.notReady("joining the mesh through " + seeds + ": no seed has answered yet")
	}
	// The dashboard's series: sampled until the node stops (stopSeries), by a
	// goroutine this function owns.
	ser := newSeries(met.reader, log)
	seriesCtx, cancelSeries := context.WithCancel(context.Background())
	seriesDone := make(chan struct{})
	go func() { defer close(seriesDone); ser.run(seriesCtx) }()
	stopSeries := func() { cancelSeries(); <-seriesDone }
	defer stopSeries()
	// POST /v1/drain asks for a drain with Actors moved away, as --drain-actors does
	// for SIGTERM.
	drainAsked := make(chan struct{})
	var drainOnce sync.Once
	askDrain := func() (first bool) {
		drainOnce.Do(func() { close(drainAsked); first = true })
		return first
	}
	var admin *http.Server
	var adminDone chan error
	if adminLn != nil {
		admin = &http.Server{Handler: sec.auth.wrap(adminMux(adminConfig{registry: met.registry, ready: ready, node: node, pprof: cfg.pprof,
			drain: askDrain, self: nodeCfg.AdminAddr, started: started, series: ser, sec: sec})), ReadHeaderTimeout: 5 * time.Second}
		adminDone = make(chan error, 1)
		ln := sec.listener(adminLn)
		go func() { adminDone <- admin.Serve(ln) }()
		also := ""
		if cfg.adminTLS {
			also = "; https:// on the same port, credentials over TLS only"
		}
		fmt.Fprintf(stdout, "meshnode: admin http://%s (dashboard at /, /metrics /healthz /readyz%s)\n", adminLn.Addr(), also)
	}
	stopAdmin := func() {
		if admin == nil {
			return
		}
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = admin.Shutdown(sctx)
		if err := <-adminDone; err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("admin server stopped", "err", err)
		}
	}
	for _, ep := range node.Endpoints() {
		fmt.Fprintf(stdout, "meshnode: stream %s\n", ep)
	}
	if len(cfg.join) > 0 {
		fmt.Fprintf(stdout, "meshnode: joining the mesh through %s\n", seeds)
		at, err := node.Membership().WaitJoined(ctx)
		switch {
		case errors.Is(err, mesh.ErrDuplicateRID):
			// Refused: the mesh keeps the live member. Stop without a leave (the mesh
			// sends none for a refused node) and say why.
			_ = node.Close()
			stopAdmin()
			return err
		case err == nil:
			fmt.Fprintf(stdout, "meshnode: joined the mesh through %s after %s: %d members alive\n",
				seeds, at.Sub(started).Round(time.Millisecond), len(node.Membership().Live()))
			log.Info("joined the mesh", "seeds", seeds, "after", at.Sub(started).Round(time.Millisecond))
		}
	}
	if ctx.Err() == nil {
		// /readyz first: whoever reads "ready" in the output may probe at once.
		ready.ready()
		fmt.Fprintln(stdout, "meshnode: ready (SIGINT or SIGTERM drains and stops)")
	}

	moveActors := cfg.drainActors
	select {
	case <-ctx.Done():
		askDrain() // a late POST /v1/drain is refused
	case <-drainAsked:
		moveActors = true
	}
	ready.notReady("draining")
	dctx, cancel := context.WithTimeout(context.Background(), cfg.drainTimeout)
	defer cancel()
	if moveActors {
		log.Info("draining: moving Actors to the other members, then sessions", "timeout", cfg.drainTimeout)
		var moved int
		moved, err = node.Drain(dctx)
		fmt.Fprintf(stdout, "meshnode: moved %d Actors to other members\n", moved)
		if errors.Is(err, meshnode.ErrDrainIncomplete) {
			// The process must end; what could not move is lost with it, loudly.
			log.Error("drain: stopping with Actors that could not move; their in-memory state is lost", "err", err)
			sctx, scancel := context.WithTimeout(context.Background(), cfg.drainTimeout)
			err = errors.Join(err, node.Shutdown(sctx))
			scancel()
		}
	} else {
		log.Info("draining sessions", "timeout", cfg.drainTimeout)
		err = node.Shutdown(dctx)
	}
	stopAdmin()
	if err != nil {
		return fmt.Errorf("drain: %w", err)
	}
	fmt.Fprintln(stdout, "meshnode: stopped")
	return nil
}

// memberJSON is one row of GET /v1/members. Generations and the other 64-bit ids of
// the admin API are JSON strings: they exceed 2^53, which JavaScript (and jq) round.
type memberJSON struct {
	RID        string `json:"rid"`
	Generation uint64 `json:"generation,string"`
	Address    string `json:"address"`
	State      string `json:"state"`
	// Since is when the answering node saw the member enter its state.
	Since time.Time `json:"since,omitzero"`
	// Versions is what the member announces of its build and wire formats; absent for
	// a member of a build before node metadata version 3 (docs/upgrading.md).
	Versions *mesh.Versions `json:"versions,omitempty"`
}

// memberOf is the admin API's view of a member.
func memberOf(m mesh.Member) memberJSON {
	mj := memberJSON{RID: m.ID.RID, Generation: m.ID.Generation, Address: m.MeshAddr, State: string(m.State), Since: m.Since.UTC()}
	if !m.Versions.IsZero() {
		v := m.Versions
		mj.Versions = &v
	}
	return mj
}

// advertisedAdmin is the admin address peers use: the listener's, with the advertised
// host (else the mesh host) in place of a wildcard host.
func advertisedAdmin(addr net.Addr, cfg serveConfig) string {
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return addr.String()
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = cfg.advertiseHost
		if host == "" {
			host, _, _ = net.SplitHostPort(cfg.meshAddr)
		}
	}
	return net.JoinHostPort(host, port)
}

// adminConfig is what the admin API serves.
type adminConfig struct {
	registry *prometheus.Registry
	ready    *readiness
	node     *meshnode.Node
	pprof    bool        // serve net/http/pprof
	drain    func() bool // asks the serve loop to drain the node
	self     string      // this node's admin address as gossiped (empty: none)
	started  time.Time   // when the process started
	series   *series     // the dashboard's series
	sec      *adminSecurity
}

func adminMux(c adminConfig) *http.ServeMux {
	mux := http.NewServeMux()
	node, ready := c.node, c.ready
	adminActors(mux, node, c.drain)
	adminSessions(mux, node)
	adminTopics(mux, node)
	adminDashboard(mux, node, c.self, ready, c.started, c.series, c.sec)
	if c.pprof {
		// net/http/pprof on the admin address only, and only when asked (--pprof): a
		// profile costs CPU and shows internals.
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	mux.HandleFunc("GET /v1/members", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		out := []memberJSON{}
		for _, m := range node.Mesh().Membership().Members(ctx) {
			out = append(out, memberOf(m))
		}
		writeJSON(w, out)
	})
	mux.HandleFunc("GET /v1/actors", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, activeJSON(listed(node.Actors().Active(), withSystem(r))))
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(c.registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if ready.why() == "" {
			// Ready as a member; not while its Actor state store cannot be reached.
			if h := storeHealth(r.Context(), node.Store()); !h.OK {
				http.Error(w, "not ready: "+h.notReady(), http.StatusServiceUnavailable)
				return
			}
		}
		// A certificate that expired makes the node useless to its peers; one that
		// expires soon is said while the node is still ready (every node's would fail
		// its probe at once otherwise).
		var warnings []string
		if ready.why() == "" {
			var notReady string
			if notReady, warnings = securityReadiness(node, time.Now()); notReady != "" {
				http.Error(w, "not ready: "+notReady, http.StatusServiceUnavailable)
				return
			}
		}
		ready.serveHTTP(w, r)
		for _, warn := range warnings {
			_, _ = io.WriteString(w, "warning: "+warn+"\n")
		}
	})
	return mux
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
