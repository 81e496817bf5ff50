package services

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

type facadeState uint32

const (
	stateDisconnected facadeState = iota // during setup
	stateBound                           // a provider is bound
	stateUnavailable                     // no provider bound (host closed, connection lost)
	stateStale                           // an instance facade whose instance is gone: for ever
)

// facade is the one stable consumer-side value of a token in a host: its members call
// whatever provider it is bound to at the moment of the call, so a facade (or a method
// value taken from it) obtained before a provider replacement calls the replacement.
type facade struct {
	host     *Host
	id       string
	key      string // an instance facade: its instance's key and generation
	gen      uint64
	ref      string     // a reference's facade: its handle at the provider
	localRef *refObject // a reference's facade in the provider's process
	st       atomic.Uint32
	local    atomic.Pointer[service]
	remote   atomic.Pointer[connBox]
	members  map[string]member
	value    any // the *T handed to consumers
}

type connBox struct{ c Connection }

func useFacade[T any](env *Env, t Token[T]) *T {
	h := env.host
	h.require(env, t.id, Singleton)
	h.mu.Lock()
	defer h.mu.Unlock()
	if f := h.facades[t.id]; f != nil {
		if v, ok := f.value.(*T); ok {
			return v
		}
		if env.err == nil {
			env.err = fmt.Errorf("%w: facet %q uses %q with a contract type other than the first user's", ErrAssembly, env.facet, t.id)
		}
		return new(T)
	}
	f := &facade{host: h, id: t.id}
	v := new(T)
	d := &Describer{mode: describeFacade, facade: f}
	t.describe(d, v)
	f.members, f.value = d.members, v
	h.facades[t.id] = f
	return v
}

func (f *facade) state() facadeState { return facadeState(f.st.Load()) }

func (f *facade) bindLocal(s *service) {
	f.local.Store(s)
	f.remote.Store(nil)
	f.st.Store(uint32(stateBound))
	for name, m := range f.members {
		if m.replica == nil {
			continue
		}
		if sl, err := s.slotFor(f.addr(name)); err == nil {
			m.replica.bind(slotSource{sl})
		} else {
			m.replica.bind(closedSource{err})
		}
	}
}

// addr is the address of the facade's member name.
func (f *facade) addr(name string) subAddr {
	return subAddr{svc: f.id, key: f.key, gen: f.gen, ref: f.ref, member: name}
}

// closedSource is a member that is not there (a closed instance's).
type closedSource struct{ err *Error }

func (c closedSource) watch(fn func(replicaDelivery)) func() {
	fn(replicaDelivery{op: rdClosed, err: c.err})
	return func() {}
}

func (f *facade) bindRemote(c Connection) {
	f.remote.Store(&connBox{c})
	f.local.Store(nil)
	f.st.Store(uint32(stateBound))
	sub, _ := c.(subscriber)
	for name, m := range f.members {
		if m.replica == nil {
			continue
		}
		if sub == nil {
			m.replica.bind(nil) // a connection that does not carry subscriptions
			continue
		}
		m.replica.bind(remoteSource{sub: sub, addr: f.addr(name), kind: m.kind})
	}
}

// retire makes an instance facade stale for ever (its instance is gone from the
// directory the facade came from).
func (f *facade) retire() {
	// Stale first: a call between the two must not find it unavailable.
	f.st.Store(uint32(stateStale))
	for _, m := range f.members {
		if m.replica != nil {
			m.replica.bind(nil)
		}
	}
}

func (f *facade) unbind() {
	f.st.Store(uint32(stateUnavailable))
	for _, m := range f.members {
		if m.replica != nil {
			m.replica.bind(nil)
		}
	}
}

// checkMembers validates the facade's members against the kinds a provider announced.
func (f *facade) checkMembers(e CatalogueEntry) error {
	for name, m := range f.members {
		if k, ok := e.Members[name]; ok && k != string(m.kind) {
			return fmt.Errorf("member %q is a %s here and a %s at the provider", name, m.kind, k)
		}
	}
	return nil
}

// call runs member name of the bound provider: in as a Go value to a local provider,
// enc()'s JSON to a remote one (the result then comes back as json.RawMessage).
func (f *facade) call(ctx context.Context, name string, in any, enc func() (json.RawMessage, error)) (any, error) {
	if ctx.Err() != nil {
		return nil, cancelled(ctx) // an invocation already aborted starts nothing
	}
	switch f.state() {
	case stateDisconnected:
		return nil, &Error{Code: CodeSetupPhase, Message: fmt.Sprintf("%s.%s called before the host assembled its services", f.id, name)}
	case stateUnavailable:
		return nil, &Error{Code: CodeUnavailable, Message: fmt.Sprintf("service %q has no provider bound", f.id)}
	case stateStale:
		if f.ref != "" || f.localRef != nil {
			return nil, &Error{Code: CodeStaleReference, Message: "the reference ended"}
		}
		return nil, &Error{Code: CodeStaleGeneration, Message: fmt.Sprintf("instance %q generation %d of %s is gone", f.key, f.gen, f.id)}
	}
	if o := f.localRef; o != nil {
		return callRef(ctx, o, name, in)
	}
	if svc := f.local.Load(); svc != nil {
		return callLocal(ctx, svc, f.key, f.gen, name, in)
	}
	box := f.remote.Load()
	if box == nil {
		return nil, &Error{Code: CodeUnavailable, Message: fmt.Sprintf("service %q has no provider bound", f.id)}
	}
	args, err := enc()
	if err != nil {
		return nil, &Error{Code: CodeInvalidArguments, Message: err.Error()}
	}
	if f.host.tracer == nil {
		return box.c.Call(ctx, Call{Service: f.id, Key: f.key, Generation: f.gen, Ref: f.ref, Member: name, Args: args})
	}
	ctx, span := f.host.tracer.Start(ctx, "rpc.client", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("rpc.system", "meshnode"), attribute.String("rpc.service", f.id), attribute.String("rpc.method", name)))
	defer span.End()
	carrier := propagation.MapCarrier{}
	f.host.prop.Inject(ctx, carrier)
	raw, err := box.c.Call(ctx, Call{Service: f.id, Key: f.key, Generation: f.gen, Ref: f.ref, Member: name, Args: args, Trace: carrier})
	if err != nil {
		span.SetStatus(codes.Error, errorCode(err))
		return nil, err
	}
	return raw, nil
}

// callLocal runs a call on a service of this process: through its actor (calls stay
// serial), with the caller's context.
func callLocal(ctx context.Context, svc *service, key string, gen uint64, name string, in any) (any, error) {
	type result struct {
		v   any
		err error
	}
	done := make(chan result, 1)
	svc.submit(&callMsg{ctx: ctx, key: key, gen: gen, member: name, local: true, in: in, reply: func(v any, err error) { done <- result{v, err} }})
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		return nil, cancelled(ctx)
	}
}

// cancelled is a call's error when the caller's context ended first.
func cancelled(ctx context.Context) *Error {
	return &Error{Code: CodeCancelled, Message: ctx.Err().Error()}
}

// errorCode returns err's service code (internal for an error of no code).
func errorCode(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInternal
}
