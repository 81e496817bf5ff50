package services

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/meshnode/meshnode/internal/logfloor"
	"github.com/meshnode/meshnode/internal/protoactor/actor"
	"github.com/meshnode/meshnode/internal/traceprop"
)

// HostOptions configures a host.
type HostOptions struct {
	// Name names the host in logs and errors ("server", "presentation", a worker's id).
	Name string
	// Connections are the providers this host may use besides its own facets: the
	// server of a presentation, say. Their catalogues are read at assembly.
	Connections []Connection
	// Logger: nil means slog.Default().
	Logger *slog.Logger
	// TracerProvider starts the rpc.client and rpc.server spans and carries their W3C
	// context with each call (docs/tracing.md). nil (the default) or otel's no-op
	// provider: no spans, no trace context sent or read, as for the STREAM host and the
	// connector.
	TracerProvider trace.TracerProvider
	// MeterProvider receives the call counters (nil: otel's global). The hosts of a
	// node's session workers share one set of instruments (WorkerKind).
	MeterProvider metric.MeterProvider
	// OnFailure is the host's failure policy for what fails outside any call: an
	// observer task that returned an error other than its context's end. nil: the
	// failure is logged at ERROR, and the rest of the host goes on.
	OnFailure func(facet string, err error)

	// metrics, when set, are the instruments this host counts into (WorkerKind's,
	// shared by every worker of the kind) instead of its own.
	metrics *callMetrics

	// beforeActivate runs after assembly, before the facets activate (a moved
	// worker's values are restored there).
	beforeActivate func(*Host) error
}

// Host assembles one process's facet graph: it runs every facet's setup, resolves each
// requirement to a local provision or exactly one connected provider, activates the
// facets providers first, publishes its RPC-capable services to the clients that
// connect to it (Endpoint), and disposes in reverse order on Close. Each provided
// service runs as an actor whose mailbox takes its calls and its provider
// replacement, so a provider needs no locks of its own.
type Host struct {
	name   string
	log    *slog.Logger
	tracer trace.Tracer // nil: tracing off
	prop   propagation.TextMapPropagator
	system *actor.ActorSystem
	stats  *callMetrics

	mu       sync.Mutex
	phase    hostPhase
	envs     []*Env // current generation of each facet, in setup order
	ledger   []LedgerEntry
	services map[string]*service     // provided here, by id
	facades  map[string]*facade      // used here, by id
	keyed    map[string]*keyedFacade // observed here, by id
	onFail   func(facet string, err error)
	conns    []Connection
	order    []*Env // activation order
	gen      uint64
	att      *Attacher // routes session scope for loopback presentations (the node's server host)

	deliveries sync.WaitGroup // replicas' listener goroutines running
}

type hostPhase uint8

const (
	phaseSetup hostPhase = iota
	phaseRunning
	phaseClosed
)

// NewHost runs the facets' setup in order, assembles the graph against the host's own
// provisions and the catalogues of opts.Connections, and activates the facets
// (providers first). An assembly error (missing, duplicate or mode-mismatched provider,
// a dependency cycle, a facet that misused its environment) names the service and the
// facets, matches ErrAssembly, and leaves nothing running.
func NewHost(ctx context.Context, opts HostOptions, facets ...Facet) (*Host, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Name == "" {
		opts.Name = "host"
	}
	h := &Host{
		name:     opts.Name,
		log:      opts.Logger.With("services_host", opts.Name),
		tracer:   traceprop.Tracer(opts.TracerProvider, "github.com/meshnode/meshnode/services"),
		prop:     propagation.TraceContext{},
		services: map[string]*service{},
		facades:  map[string]*facade{},
		keyed:    map[string]*keyedFacade{},
		conns:    opts.Connections,
		onFail:   opts.OnFailure,
	}
	if h.stats = opts.metrics; h.stats == nil {
		h.stats = newCallMetrics(opts.MeterProvider, "server", h.log)
	}
	for _, c := range opts.Connections {
		if s, ok := c.(subscriber); ok {
			cs, _ := s.subscriptions()
			cs.stats.CompareAndSwap(nil, h.stats) // the first host that uses it counts its bounds
		}
	}
	h.system = sharedSystem()
	seen := map[string]bool{}
	for _, f := range facets {
		if f.ID == "" || f.Setup == nil || seen[f.ID] {
			return nil, fmt.Errorf("%w: facet %q: needs a unique id and a Setup", ErrAssembly, f.ID)
		}
		seen[f.ID] = true
		h.runSetup(f)
	}
	if err := h.assemble(ctx); err != nil {
		h.stopServices()
		return nil, err
	}
	if opts.beforeActivate != nil {
		if err := opts.beforeActivate(h); err != nil {
			_ = h.Close(context.WithoutCancel(ctx))
			return nil, err
		}
	}
	if err := h.activate(ctx, h.order); err != nil {
		_ = h.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	return h, nil
}

// runSetup creates the next generation's environment of f and runs its setup.
func (h *Host) runSetup(f Facet) *Env {
	h.mu.Lock()
	h.gen++
	env := &Env{host: h, facet: f.ID, generation: h.gen, open: true, provides: map[string]*service{}, uses: map[string]Mode{}}
	h.mu.Unlock()
	func() {
		defer func() {
			if r := recover(); r != nil {
				env.fail(fmt.Errorf("%w: facet %q setup panicked: %v", ErrAssembly, f.ID, r))
			}
		}()
		f.Setup(env)
	}()
	h.mu.Lock()
	env.open = false
	h.envs = append(h.envs, env)
	h.mu.Unlock()
	return env
}

func (e *Env) fail(err error) {
	e.host.mu.Lock()
	defer e.host.mu.Unlock()
	if e.err == nil {
		e.err = err
	}
}

// provide records a provision of env and creates (or, for a reload, finds) its service.
func (h *Host) provide(env *Env, id string, rpc bool, mode Mode, tab *memberTable, describeErr error) *service {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ledger = append(h.ledger, LedgerEntry{Facet: env.facet, Generation: env.generation, Service: id, Mode: mode, Provides: true})
	if describeErr != nil && env.err == nil {
		env.err = fmt.Errorf("%w: facet %q provides %q: %v", ErrAssembly, env.facet, id, describeErr)
	}
	if _, dup := env.provides[id]; dup && env.err == nil {
		env.err = fmt.Errorf("%w: facet %q provides %q twice", ErrAssembly, env.facet, id)
	}
	if cur := h.services[id]; cur != nil && mode == Keyed && cur.mode == Keyed && h.phase == phaseRunning {
		// A reload of the owner of a keyed service: the new generation adds instances
		// to the same service (its instances closed with the old generation).
		env.provides[id] = cur
		return cur
	}
	svc := &service{host: h, id: id, rpc: rpc, mode: mode, owner: env, pending: tab}
	svc.makeSlots()
	env.provides[id] = svc
	return svc
}

// require records a requirement of env.
func (h *Host) require(env *Env, id string, mode Mode) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ledger = append(h.ledger, LedgerEntry{Facet: env.facet, Generation: env.generation, Service: id, Mode: mode, Provides: false})
	if prev, ok := env.uses[id]; ok && prev != mode && env.err == nil {
		env.err = fmt.Errorf("%w: facet %q requires %q both as %s and as %s", ErrAssembly, env.facet, id, prev, mode)
	}
	env.uses[id] = mode
}

// Ledger returns every provision and requirement recorded in setup, in order.
func (h *Host) Ledger() []LedgerEntry {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.ledger)
}

// assemble resolves every requirement and fixes the activation order.
func (h *Host) assemble(ctx context.Context) error {
	h.mu.Lock()
	envs := slices.Clone(h.envs)
	h.mu.Unlock()
	var errs []error
	for _, e := range envs {
		if e.err != nil {
			errs = append(errs, e.err)
		}
	}
	// Provisions: one owner per service, one mode per token.
	owners := map[string]*Env{}
	for _, e := range envs {
		for id, svc := range e.provides {
			if prev, dup := owners[id]; dup {
				errs = append(errs, fmt.Errorf("%w: service %q is provided by facets %q and %q", ErrAssembly, id, prev.facet, e.facet))
				continue
			}
			owners[id] = e
			h.services[id] = svc
		}
	}
	// Remote catalogues.
	type offer struct {
		conn  Connection
		entry CatalogueEntry
	}
	offers := map[string][]offer{}
	var provisional []Connection // selected-session connections with no attachment yet
	for i, c := range h.conns {
		cat, err := c.Catalogue(ctx)
		if err != nil {
			if p, ok := c.(interface{ provisional() bool }); ok && p.provisional() && errors.Is(err, ErrNotAttached) {
				provisional = append(provisional, c)
				continue
			}
			errs = append(errs, fmt.Errorf("%w: connection %d: catalogue: %w", ErrAssembly, i, err))
			continue
		}
		for _, ce := range cat.Services {
			offers[ce.ID] = append(offers[ce.ID], offer{c, ce})
		}
	}
	// Requirements: the local provision, else exactly one connected provider.
	edges := map[*Env][]*Env{} // consumer → local providers
	for _, e := range envs {
		ids := make([]string, 0, len(e.uses))
		for id := range e.uses {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		for _, id := range ids {
			mode := e.uses[id]
			if owner, ok := owners[id]; ok {
				if svc := h.services[id]; svc.mode != mode {
					errs = append(errs, fmt.Errorf("%w: service %q: facet %q uses it as %s, facet %q provides it as %s", ErrAssembly, id, e.facet, mode, owner.facet, svc.mode))
					continue
				}
				if owner != e {
					edges[e] = append(edges[e], owner)
				}
				if f := h.facades[id]; f != nil {
					f.bindLocal(h.services[id])
				}
				if kf := h.keyed[id]; kf != nil && mode == Keyed {
					kf.bindLocal(h.services[id])
				}
				continue
			}
			os := offers[id]
			if len(os) == 0 && len(provisional) == 1 {
				// Accepted provisionally: calls fail not_attached (and states stay cold,
				// observations empty) until the presentation attaches, then go to the
				// worker it selected.
				if f := h.facades[id]; f != nil && mode == Singleton {
					f.bindRemote(provisional[0])
				}
				if kf := h.keyed[id]; kf != nil && mode == Keyed {
					kf.bindRemote(provisional[0])
				}
				continue
			}
			switch {
			case len(os) == 0:
				errs = append(errs, fmt.Errorf("%w: service %q required by facet %q has no provider (none of this host's facets provides it, no connection offers it)", ErrAssembly, id, e.facet))
				continue
			case len(os) > 1:
				errs = append(errs, fmt.Errorf("%w: service %q required by facet %q is offered by %d connections", ErrAssembly, id, e.facet, len(os)))
				continue
			}
			if os[0].entry.Mode != mode.String() {
				errs = append(errs, fmt.Errorf("%w: service %q: facet %q uses it as %s, its connected provider offers it as %s", ErrAssembly, id, e.facet, mode, os[0].entry.Mode))
				continue
			}
			if f := h.facades[id]; f != nil && mode == Singleton {
				if err := f.checkMembers(os[0].entry); err != nil {
					errs = append(errs, fmt.Errorf("%w: service %q: %w", ErrAssembly, id, err))
					continue
				}
				f.bindRemote(os[0].conn)
			}
			if kf := h.keyed[id]; kf != nil && mode == Keyed {
				if err := kf.checkMembers(os[0].entry); err != nil {
					errs = append(errs, fmt.Errorf("%w: service %q: %w", ErrAssembly, id, err))
					continue
				}
				kf.bindRemote(os[0].conn)
			}
		}
	}
	order, err := topoOrder(envs, edges)
	if err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	for _, svc := range h.services {
		svc.start()
	}
	h.mu.Lock()
	h.order = order
	h.phase = phaseRunning
	h.mu.Unlock()
	return nil
}

// topoOrder orders envs so that every local provider comes before its consumers.
func topoOrder(envs []*Env, edges map[*Env][]*Env) ([]*Env, error) {
	const (
		unseen = iota
		visiting
		done
	)
	state := map[*Env]int{}
	var order []*Env
	var visit func(e *Env, path []string) error
	visit = func(e *Env, path []string) error {
		switch state[e] {
		case done:
			return nil
		case visiting:
			return fmt.Errorf("%w: dependency cycle between facets %s", ErrAssembly, strings.Join(append(path, e.facet), " → "))
		}
		state[e] = visiting
		for _, p := range edges[e] {
			if err := visit(p, append(path, e.facet)); err != nil {
				return err
			}
		}
		state[e] = done
		order = append(order, e)
		return nil
	}
	for _, e := range envs {
		if err := visit(e, nil); err != nil {
			return nil, err
		}
	}
	return order, nil
}

// activate runs the OnActivate callbacks of envs, in order.
func (h *Host) activate(ctx context.Context, envs []*Env) error {
	for _, e := range envs {
		for _, fn := range e.activate {
			if err := fn(ctx); err != nil {
				return fmt.Errorf("services: activate facet %q: %w", e.facet, err)
			}
		}
	}
	return nil
}

// dispose deactivates envs and releases what they own, in the reverse of their order.
func (h *Host) dispose(ctx context.Context, envs []*Env) error {
	var errs []error
	for i := len(envs) - 1; i >= 0; i-- {
		e := envs[i]
		for j := len(e.deactivate) - 1; j >= 0; j-- {
			if err := e.deactivate[j](ctx); err != nil {
				errs = append(errs, fmt.Errorf("services: deactivate facet %q: %w", e.facet, err))
			}
		}
		h.mu.Lock()
		owned := slices.Clone(e.owned)
		h.mu.Unlock()
		for j := len(owned) - 1; j >= 0; j-- {
			if err := owned[j](ctx); err != nil {
				errs = append(errs, fmt.Errorf("services: dispose facet %q: %w", e.facet, err))
			}
		}
	}
	return errors.Join(errs...)
}

// clientEvent runs the facets' OnClient callbacks (a session worker's presentation
// attached or detached), in facet order.
func (h *Host) clientEvent(ctx context.Context, c Client, attached bool) {
	h.mu.Lock()
	order := slices.Clone(h.order)
	h.mu.Unlock()
	for _, e := range order {
		for _, fn := range e.clients {
			func() {
				defer func() {
					if r := recover(); r != nil {
						h.log.Error("services: an OnClient callback panicked", "facet", e.facet, "panic", fmt.Sprint(r))
					}
				}()
				fn(ctx, c, attached)
			}()
		}
	}
}

// failure applies the host's failure policy to err, a failure of facet's.
func (h *Host) failure(facet string, err error) {
	if h.onFail != nil {
		h.onFail(facet, err)
		return
	}
	h.log.Error("services: a facet failed", "facet", facet, "err", err)
}

// attacher returns the Attacher serving this host's presentations, if any.
func (h *Host) attacher() *Attacher {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.att
}

// Close deactivates and disposes every facet (consumers before providers), fails the
// calls still in flight and stops the service actors.
func (h *Host) Close(ctx context.Context) error {
	h.mu.Lock()
	if h.phase == phaseClosed {
		h.mu.Unlock()
		return nil
	}
	h.phase = phaseClosed
	order := h.order
	h.mu.Unlock()
	for _, f := range h.facadeList() {
		f.unbind()
	}
	err := h.dispose(ctx, order)
	for _, s := range h.serviceList() {
		if s.mode == Keyed {
			s.closeInstances() // its observers elsewhere end their tasks
		}
	}
	h.stopServices()
	h.mu.Lock()
	keyed := make([]*keyedFacade, 0, len(h.keyed))
	for _, kf := range h.keyed {
		keyed = append(keyed, kf)
	}
	h.mu.Unlock()
	for _, kf := range keyed {
		kf.unbind()
	}
	waitBounded(&h.deliveries, taskStopWait)
	return err
}

func (h *Host) serviceList() []*service {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]*service, 0, len(h.services))
	for _, s := range h.services {
		out = append(out, s)
	}
	return out
}

func (h *Host) facadeList() []*facade {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]*facade, 0, len(h.facades))
	for _, f := range h.facades {
		out = append(out, f)
	}
	return out
}

func (h *Host) stopServices() {
	h.mu.Lock()
	svcs := make([]*service, 0, len(h.services))
	for _, s := range h.services {
		svcs = append(svcs, s)
	}
	h.mu.Unlock()
	for _, s := range svcs {
		s.stop()
	}
}

// Reload replaces the running facet f.ID with a new generation of it (f's setup), in
// place: the services the old generation provided are withdrawn (calls fail with
// ErrUnavailable, nothing is queued), the old generation is deactivated and disposed,
// the new one sets up, and its implementations are installed into the same services,
// so every facade obtained before, local or remote, calls the replacement. A reload
// must keep the facet's shape: the same provisions, and requirements the graph already
// resolves.
func (h *Host) Reload(ctx context.Context, f Facet) error {
	h.mu.Lock()
	if h.phase != phaseRunning {
		h.mu.Unlock()
		return fmt.Errorf("services: reload %q: the host is not running", f.ID)
	}
	var old *Env
	idx := -1
	for i, e := range h.envs {
		if e.facet == f.ID {
			old, idx = e, i
		}
	}
	h.mu.Unlock()
	if old == nil {
		return fmt.Errorf("%w: reload: no facet %q", ErrAssembly, f.ID)
	}
	for _, svc := range old.provides {
		if svc.mode == Keyed {
			// The retiring generation's instances close with it; its replacement
			// adds its own (new generations).
			svc.closeInstances()
			continue
		}
		svc.withdraw()
	}
	derr := h.dispose(ctx, []*Env{old})
	h.mu.Lock()
	h.envs = slices.Delete(h.envs, idx, idx+1)
	h.mu.Unlock()
	next := h.runSetup(f)
	if err := h.checkReload(old, next); err != nil {
		return errors.Join(derr, err)
	}
	h.mu.Lock()
	for id, svc := range next.provides {
		cur := h.services[id]
		if cur.mode == Keyed {
			cur.owner = next
			continue
		}
		cur.replace(cur.pending, svc.pending)
		cur.owner, cur.pending = next, svc.pending
		next.provides[id] = cur
	}
	for i, e := range h.order {
		if e == old {
			h.order[i] = next
		}
	}
	h.mu.Unlock()
	return errors.Join(derr, h.activate(ctx, []*Env{next}))
}

// checkReload verifies that next has old's shape.
func (h *Host) checkReload(old, next *Env) error {
	if next.err != nil {
		return next.err
	}
	for id := range old.provides {
		if _, ok := next.provides[id]; !ok {
			return fmt.Errorf("%w: reload of facet %q drops its provision of %q", ErrAssembly, old.facet, id)
		}
	}
	for id, svc := range next.provides {
		prev, ok := old.provides[id]
		if !ok || prev.mode != svc.mode {
			return fmt.Errorf("%w: reload of facet %q changes its provision of %q", ErrAssembly, old.facet, id)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for id := range next.uses {
		if h.facades[id] == nil || h.facades[id].state() == stateDisconnected {
			return fmt.Errorf("%w: reload of facet %q adds the requirement %q", ErrAssembly, old.facet, id)
		}
	}
	return nil
}

// sharedSystem is the process's actor system for service actors, created on first use
// and shared by every host (a session worker's host is one per Actor activation: a
// system each would cost tens of thousands of allocations). Service actors run on the
// goroutine that submits a call (synchronized dispatch), so the system holds no
// goroutine of its own while idle; each host stops its own actors on Close.
var sharedSystem = sync.OnceValue(func() *actor.ActorSystem {
	return actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(logfloor.New(slog.Default().Handler(), slog.LevelWarn))
	}), actor.WithDeadLetterThrottleInterval(100*time.Millisecond))
})
