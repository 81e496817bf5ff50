package services

import (
	"context"
	"fmt"
	"slices"
)

// Facet is a plugin's part in one host: an id and a synchronous Setup that declares,
// through the environment, what the facet provides and uses. Setup must not block or
// call services: facades are disconnected until the host has assembled its graph.
type Facet struct {
	ID    string
	Setup func(env *Env)
}

// Env is the environment a host creates for one generation of one facet. Its owner
// identity cannot be forged (it is this pointer, created by the host), and every
// provision, requirement and resource registered through it belongs to that facet
// generation.
type Env struct {
	host       *Host
	facet      string
	generation uint64
	open       bool // setup in progress: the only time acquisition is allowed

	activate   []func(context.Context) error
	deactivate []func(context.Context) error
	owned      []func(context.Context) error
	clients    []func(context.Context, Client, bool)

	provides map[string]*service // services this facet generation provides
	uses     map[string]Mode     // service id → mode of its requirements
	err      error               // first misuse found during setup
}

// Facet returns the facet id the environment belongs to.
func (e *Env) Facet() string { return e.facet }

// HostName returns the name of the host the facet runs in: a session worker's is its
// session's id (a facet keys its durable records with it).
func (e *Env) HostName() string { return e.host.name }

// OnActivate registers fn to run when the host activates the facet (providers before
// their consumers): the place to start effects and make the first calls.
func (e *Env) OnActivate(fn func(ctx context.Context) error) {
	e.mustBeOpen("OnActivate")
	e.activate = append(e.activate, fn)
}

// OnDeactivate registers fn to run when the facet is deactivated (consumers before
// their providers).
func (e *Env) OnDeactivate(fn func(ctx context.Context) error) {
	e.mustBeOpen("OnDeactivate")
	e.deactivate = append(e.deactivate, fn)
}

// OnClient registers fn to run when a presentation attaches to the session worker the
// facet runs in (attached true) or its attachment ends (false: it detached, switched,
// disconnected, or its node left). It runs in the worker's turn; outside session
// workers it is never called. A presentation that goes away does not end the session's
// work: what it started keeps running under the facet's own policy.
func (e *Env) OnClient(fn func(ctx context.Context, c Client, attached bool)) {
	e.mustBeOpen("OnClient")
	e.clients = append(e.clients, fn)
}

// Own registers a resource to release when the facet is disposed, in reverse order.
func (e *Env) Own(release func(ctx context.Context) error) {
	e.host.mu.Lock()
	defer e.host.mu.Unlock()
	e.owned = append(e.owned, release)
}

func (e *Env) mustBeOpen(op string) {
	e.host.mu.Lock()
	open := e.open
	e.host.mu.Unlock()
	if !open {
		panic(fmt.Sprintf("services: %s by facet %q after its setup: acquisition and provision happen only in Setup (%v)", op, e.facet, ErrAssembly))
	}
}

// LedgerEntry is one provision or requirement a facet generation recorded in setup.
type LedgerEntry struct {
	Facet      string
	Generation uint64
	Service    string
	Mode       Mode
	Provides   bool
}

func (l LedgerEntry) String() string {
	verb := "requires"
	if l.Provides {
		verb = "provides"
	}
	return fmt.Sprintf("%s#%d %s %s/%s", l.Facet, l.Generation, verb, l.Service, l.Mode)
}

// Provide records that the facet provides the singleton service of t, implemented by
// impl (its Method fields set with Func or Task; an unset member answers
// service_not_implemented). It panics after setup.
func Provide[T any](env *Env, t Token[T], impl *T) {
	env.mustBeOpen("Provide(" + t.id + ")")
	members, order, err := table(t.describe, impl)
	env.host.provide(env, t.id, t.rpc, Singleton, &memberTable{members: members, order: order}, err)
}

// Use records that the facet requires the singleton service of t and returns its
// facade: one stable value per token per host, shared by every facet that uses it.
// During setup the facade is disconnected (a call fails with ErrSetupPhase); after
// assembly it calls the local provider or the one connected provider. It panics after
// setup.
func Use[T any](env *Env, t Token[T]) *T {
	env.mustBeOpen("Use(" + t.id + ")")
	return useFacade(env, t)
}

// Instances is the capability to add instances of a keyed service: ProvideMany returns
// it to the owning facet only.
type Instances[T any] struct {
	svc *service
	env *Env
	t   Token[T]
}

// ProvideMany records that the facet owns the keyed service of t and returns the only
// handle that can add its instances. It panics after setup.
func ProvideMany[T any](env *Env, t Token[T]) *Instances[T] {
	env.mustBeOpen("ProvideMany(" + t.id + ")")
	svc := env.host.provide(env, t.id, t.rpc, Keyed, nil, nil)
	env.host.mu.Lock()
	if svc.kinds == nil {
		svc.kinds = kinds(t.describe)
	}
	env.host.mu.Unlock()
	return &Instances[T]{svc: svc, env: env, t: t}
}

// Add publishes the instance key, implemented by impl, and returns its idempotent
// close. A key must be unique among live instances; a closed key added again gets a
// new generation.
func (s *Instances[T]) Add(key string, impl *T) (closeInstance func(), err error) {
	s.env.host.mu.Lock()
	owner := s.svc.owner == s.env
	s.env.host.mu.Unlock()
	if !owner {
		return nil, fmt.Errorf("services: %s: this handle's facet generation (%s#%d) no longer owns the service", s.svc.id, s.env.facet, s.env.generation)
	}
	members, order, err := table(s.t.describe, impl)
	if err != nil {
		return nil, err
	}
	return s.svc.addInstance(key, &memberTable{members: members, order: order})
}

// Observe records that the facet requires the keyed service of t and observes its
// instances: handler runs once per live instance, as the instance's task, with a fresh
// context that ends when the instance closes (or is replaced by the same key under a
// new generation), when the observation ends, or when the selected session switches;
// svc is the instance's facade, its state members hydrated before handler starts.
// Returning because the context ended is normal; any other error goes to the host's
// failure policy (HostOptions.OnFailure). The observation ends with the facet's
// generation (or stop). It panics after setup.
func Observe[T any](env *Env, t Token[T], handler func(ctx context.Context, key string, svc *T) error) (stop func()) {
	env.mustBeOpen("Observe(" + t.id + ")")
	env.host.require(env, t.id, Keyed)
	kf := keyedFacadeOf(env.host, t)
	reg := &observeReg{kf: kf, facet: env.facet, live: map[string]*observed{},
		handler: func(ctx context.Context, key string, v any) error { return handler(ctx, key, v.(*T)) }}
	kf.mu.Lock()
	kf.regs = append(kf.regs, reg)
	kf.mu.Unlock()
	stop = func() {
		reg.stop()
		kf.mu.Lock()
		kf.regs = slices.DeleteFunc(kf.regs, func(x *observeReg) bool { return x == reg })
		kf.mu.Unlock()
	}
	env.Own(func(context.Context) error { stop(); return nil })
	return stop
}
