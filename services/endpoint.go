package services

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Client is the identity of a connected client as the serving host authenticated it
// (the STREAM session it came from, say). A provider reads it from the call's context
// with ClientOf; no argument of a call can set it.
type Client struct {
	ID        string
	Transport string
	// Attachment is, on a session worker, the presentation's attachment: one per attach
	// (a presentation that attaches again is another attachment of the same ID).
	Attachment string `json:",omitempty"`
}

// clientKey is unexported: only this package can put a Client in a context.
type clientKey struct{}

// ClientOf returns the authenticated client of a call (false for a call from the same
// host).
func ClientOf(ctx context.Context) (Client, bool) {
	c, ok := ctx.Value(clientKey{}).(Client)
	return c, ok
}

// Catalogue is what a host offers a connection: its RPC-capable services, their modes
// and their members' kinds.
type Catalogue struct {
	Host     string           `json:"host"`
	Services []CatalogueEntry `json:"services"`
}

// CatalogueEntry is one offered service.
type CatalogueEntry struct {
	ID      string            `json:"id"`
	Mode    string            `json:"mode"`
	Members map[string]string `json:"members"`
}

// Call is one service call as it crosses a connection: control fields, JSON arguments,
// and the W3C trace context of the caller's rpc.client span.
type Call struct {
	Service string
	// Key and Generation name the instance of a keyed service the call is for (a
	// generation the host gave it: a closed or replaced one is stale).
	Key        string
	Generation uint64
	// Ref names a private reference the caller holds (its handle).
	Ref    string
	Member string
	Args   json.RawMessage
	Trace  map[string]string
}

// Connection is a consumer host's link to a provider host: loopback (same process) or
// STREAM. Call maps its context's end to a cancel of that one call.
type Connection interface {
	Catalogue(ctx context.Context) (Catalogue, error)
	Call(ctx context.Context, call Call) (json.RawMessage, error)
}

// Catalogue returns the host's RPC-capable services (LocalOnly ones are never listed).
func (h *Host) Catalogue() Catalogue {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := Catalogue{Host: h.name}
	for id, s := range h.services {
		if !s.rpc {
			continue
		}
		e := CatalogueEntry{ID: id, Mode: s.mode.String(), Members: map[string]string{}}
		if t := s.table.Load(); t != nil {
			for name, m := range t.members {
				e.Members[name] = string(m.kind)
			}
		} else if s.pending != nil {
			for name, m := range s.pending.members {
				e.Members[name] = string(m.kind)
			}
		} else {
			for name, k := range s.kinds {
				e.Members[name] = string(k)
			}
		}
		c.Services = append(c.Services, e)
	}
	sort.Slice(c.Services, func(i, j int) bool { return c.Services[i].ID < c.Services[j].ID })
	return c
}

// Endpoint is the serving side of one client's connection: it runs the client's calls
// against the host's RPC-capable services with a fresh context per call (derived from
// the connection's, so a disconnect cancels them; the client identity under an
// unexported key; the caller's trace context as the parent of an rpc.server span), and
// keeps the client's calls in a table keyed by the client's request ids, so a client
// cancels only its own calls.
type Endpoint struct {
	h      *Host
	client Client
	ctx    context.Context
	stop   context.CancelFunc

	mu       sync.Mutex
	inflight map[string]context.CancelFunc
	subs     map[subAddr]*endSub   // the client's subscriptions
	refs     map[string]*refObject // the client's references, by handle
	closed   bool

	// notify pushes a control frame to the client (a subscription dropped); nil: none.
	notify func(frame) error
	// shared, on a session worker, watches published members for all its clients.
	shared *publisher
	// gone is the code of a call cut by the endpoint's end ("": disconnected; a
	// session worker's: session_unavailable).
	gone string
}

func (e *Endpoint) goneCode() string {
	if e.gone != "" {
		return e.gone
	}
	return CodeDisconnected
}

// Endpoint opens the serving side of a client's connection; ctx is the connection's
// lifetime (its end cancels the client's calls and ends its subscriptions, as Close
// does).
func (h *Host) Endpoint(ctx context.Context, client Client) *Endpoint {
	ctx, stop := context.WithCancel(ctx)
	e := &Endpoint{h: h, client: client, ctx: ctx, stop: stop, inflight: map[string]context.CancelFunc{}, subs: map[subAddr]*endSub{},
		refs: map[string]*refObject{}}
	if p, ok := presenterOf(ctx); ok {
		e.notify = p.push
	}
	context.AfterFunc(ctx, e.Close) // the connection's end (or Close) closes the endpoint
	return e
}

// MaxInflightPerClient bounds the calls one client may have in flight at once; past it
// a call fails with CodeUnavailable.
const MaxInflightPerClient = 1024

// Serve runs one call of the client, identified by the client's request id rid, and
// reports its result or error to done (once, from any goroutine).
func (e *Endpoint) Serve(rid string, call Call, done func(json.RawMessage, error)) {
	e.serve(rid, call, func(raw json.RawMessage, err error) {
		var we *Error
		if err != nil {
			we = wireError(err)
			err = we
		}
		e.h.stats.served(call.Service, call.Member, e.client.ID, we)
		done(raw, err)
	})
}

func (e *Endpoint) serve(rid string, call Call, done func(json.RawMessage, error)) {
	h := e.h
	h.mu.Lock()
	svc := h.services[call.Service]
	running := h.phase == phaseRunning
	h.mu.Unlock()
	if call.Ref != "" {
		if rid == "" {
			done(nil, &Error{Code: CodeInvalidArguments, Message: "a call needs a request id"})
			return
		}
		e.serveRefCall(rid, call, done)
		return
	}
	switch {
	case !running:
		done(nil, &Error{Code: CodeUnavailable, Message: "the host is not serving"})
		return
	case svc == nil || !svc.rpc:
		done(nil, &Error{Code: CodeUnknownService, Message: fmt.Sprintf("no service %q", call.Service)})
		return
	case svc.mode == Keyed && (call.Key == "" || call.Generation == 0):
		done(nil, &Error{Code: CodeInvalidArguments, Message: fmt.Sprintf("service %q is keyed: a call names the instance (key and generation)", call.Service)})
		return
	case svc.mode == Singleton && call.Key != "":
		done(nil, &Error{Code: CodeInvalidArguments, Message: fmt.Sprintf("service %q is not keyed", call.Service)})
		return
	case rid == "":
		done(nil, &Error{Code: CodeInvalidArguments, Message: "a call needs a request id"})
		return
	}
	e.admit(rid, call, done, func(ctx context.Context, reply func(any, error)) {
		svc.submit(&callMsg{ctx: ctx, key: call.Key, gen: call.Generation, member: call.Member, args: call.Args, reply: reply})
	})
}

// serveRefCall runs a call on one of the client's references.
func (e *Endpoint) serveRefCall(rid string, call Call, done func(json.RawMessage, error)) {
	e.admit(rid, call, done, func(ctx context.Context, reply func(any, error)) {
		e.serveRef(ctx, call, func(raw json.RawMessage, err error) { reply(raw, err) })
	})
}

// admit gives a call of the client its fresh context (the connection's, the client
// identity, this endpoint, the caller's trace as the parent of an rpc.server span) and
// its place in the request table, then runs it; done gets its result once.
func (e *Endpoint) admit(rid string, call Call, done func(json.RawMessage, error), run func(ctx context.Context, reply func(any, error))) {
	h := e.h
	cctx, cancel := context.WithCancel(context.WithValue(context.WithValue(e.ctx, clientKey{}, e.client), endpointKey{}, e))
	e.mu.Lock()
	switch {
	case e.closed:
		e.mu.Unlock()
		cancel()
		done(nil, &Error{Code: CodeDisconnected, Message: "the connection is closed"})
		return
	case e.inflight[rid] != nil:
		e.mu.Unlock()
		cancel()
		done(nil, &Error{Code: CodeDuplicateRequest, Message: fmt.Sprintf("request %q is already in flight", rid)})
		return
	case len(e.inflight) >= MaxInflightPerClient:
		e.mu.Unlock()
		cancel()
		done(nil, &Error{Code: CodeUnavailable, Message: fmt.Sprintf("call %s.%s: this connection has %d calls in flight (the bound)", call.Service, call.Member, MaxInflightPerClient)})
		return
	}
	e.inflight[rid] = cancel
	e.mu.Unlock()
	h.stats.inflight.Add(1)

	sctx, span := cctx, trace.Span(noop.Span{}) // tracing off: nothing to start or end
	if h.tracer != nil {
		pctx := h.prop.Extract(cctx, propagation.MapCarrier(call.Trace))
		sctx, span = h.tracer.Start(pctx, "rpc.server", trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(attribute.String("rpc.system", "meshnode"), attribute.String("rpc.service", call.Service),
				attribute.String("rpc.method", call.Member)))
	}
	var once atomic.Bool
	run(sctx, func(v any, err error) {
		if !once.CompareAndSwap(false, true) {
			return
		}
		e.mu.Lock()
		if e.inflight[rid] != nil {
			delete(e.inflight, rid)
		}
		e.mu.Unlock()
		h.stats.inflight.Add(-1)
		if cctx.Err() != nil && (err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
			// The call's context ended under it: the caller cancelled it, or the
			// connection or the provider went (a provider's own context error is
			// not an internal failure, and says nothing the caller can use).
			err = errCallCancelled
			if e.ctx.Err() != nil {
				err = &Error{Code: e.goneCode(), Message: "the call's connection or provider ended while it ran"}
			}
		}
		cancel()
		if err != nil {
			we := wireError(err)
			if we.Code == CodeInternal {
				h.log.Warn("services: call failed", "service", call.Service, "member", call.Member, "client", e.client.ID, "err", err)
			}
			span.SetStatus(codes.Error, we.Code)
			span.End()
			done(nil, we)
			return
		}
		span.End()
		raw, _ := v.(json.RawMessage)
		done(raw, nil)
	})
}

// Cancel cancels the client's call rid, if it is in flight (another client's ids are
// not in this table).
func (e *Endpoint) Cancel(rid string) {
	e.mu.Lock()
	cancel := e.inflight[rid]
	e.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// Inflight returns how many calls of the client are in flight.
func (e *Endpoint) Inflight() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.inflight)
}

// Close ends the connection: every call of the client still in flight is cancelled
// and its subscriptions end (only those: work a service owns is not this connection's
// to cancel).
func (e *Endpoint) Close() {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return
	}
	e.closed = true
	e.mu.Unlock()
	e.stop()
	e.closeSubs()
	e.closeRefs()
}

// Loopback is an in-process Connection to a provider host, with no sockets: the same
// endpoint, request table, cancellation and strict JSON as a remote connection. To the
// node's server host it is also a presentation: Session reaches the worker of the
// session it attaches to, as a STREAM client's session scope does.
type Loopback struct {
	h      *Host
	client Client
	seq    atomic.Uint64
	pr     *presenter
	subs   *clientSubs
	epMu   sync.Mutex
	ep     *Endpoint // the current connection (Reconnect makes another)

	stop   context.CancelFunc
	hookMu sync.Mutex
	hooks  []func()
	closed bool
	dialed dialed // hosts Dial made on it
}

func (l *Loopback) own(h *Host)       { l.dialed.own(h) }
func (s loopbackSession) own(h *Host) { s.l.dialed.own(h) }

// NewLoopback connects to provider as client.
func NewLoopback(provider *Host, client Client) *Loopback {
	ctx, stop := context.WithCancel(context.Background())
	if client.Transport == "" {
		client.Transport = "loopback"
	}
	l := &Loopback{h: provider, client: client, stop: stop}
	l.pr = &presenter{id: client.ID, transport: client.Transport, key: nextLoopbackKey(), ctx: ctx,
		push: l.receive, onClose: l.onClose}
	l.subs = newClientSubs(loopbackTransport{l}, true)
	l.ep = provider.Endpoint(context.WithValue(ctx, presenterKey{}, l.pr), client)
	return l
}

func (l *Loopback) endpoint() *Endpoint {
	l.epMu.Lock()
	defer l.epMu.Unlock()
	return l.ep
}

// Disconnect drops the connection as a network failure would: the provider cancels
// this client's calls in flight and ends its subscriptions, whose replicas keep their
// values as stale display data; calls fail disconnected until Reconnect. A
// presentation's attachment is the server's and stays.
func (l *Loopback) Disconnect() {
	l.epMu.Lock()
	ep := l.ep
	l.epMu.Unlock()
	l.subs.setOnline(false)
	ep.Close()
}

// Reconnect connects again to the same provider, as the same client: the
// subscriptions hydrate again, a fresh snapshot replacing each stale value.
func (l *Loopback) Reconnect() {
	l.epMu.Lock()
	if l.ep.ctx.Err() == nil {
		l.epMu.Unlock()
		return
	}
	l.ep = l.h.Endpoint(context.WithValue(l.pr.ctx, presenterKey{}, l.pr), l.client)
	l.epMu.Unlock()
	l.subs.setOnline(true)
}

func (l *Loopback) subscriptions() (*clientSubs, bool) { return l.subs, false }

// receive takes a frame the provider pushes to this connection (in process: it never
// waits, the replicas queue their listeners' calls).
func (l *Loopback) receive(f frame) error {
	if f.name == NameAttachment {
		var n attachmentNotice
		if json.Unmarshal(f.payload, &n) == nil {
			l.subs.setAttachment(n)
		}
		return nil
	}
	in, err := inboundFrom(f.name, f.md.Get, f.payload)
	if err != nil {
		l.subs.stale.Add(1)
		return nil
	}
	l.subs.onInbound(in)
	return nil
}

// loopbackTransport subscribes in process: the server scope at the provider's
// endpoint, the session scope through the provider's Attacher.
type loopbackTransport struct{ l *Loopback }

func (t loopbackTransport) subscribeReq(ctx context.Context, session bool, a subAddr, sid uint64) (json.RawMessage, error) {
	if session {
		att := t.l.h.attacher()
		if att == nil {
			return nil, &Error{Code: CodeNotAttached, Message: "the provider has no session workers"}
		}
		return att.subscribe(ctx, t.l.pr, a, sid)
	}
	subs := t.l.subs
	return t.l.endpoint().subscribe(a, sid, func(d *delivery) bool {
		subs.onInbound(inbound{addr: a, op: d.op, seq: d.seq, raw: d.raw, trace: d.trace, err: d.err})
		return true
	})
}

func (t loopbackTransport) unsubscribeReq(session bool, a subAddr, sid uint64) {
	if session {
		if att := t.l.h.attacher(); att != nil {
			att.unsubscribe(t.l.pr, a, sid)
		}
		return
	}
	t.l.endpoint().unsubscribe(a, sid)
}

func (l *Loopback) onClose(fn func()) {
	l.hookMu.Lock()
	if !l.closed {
		l.hooks = append(l.hooks, fn)
		l.hookMu.Unlock()
		return
	}
	l.hookMu.Unlock()
	fn()
}

// Catalogue implements Connection.
func (l *Loopback) Catalogue(context.Context) (Catalogue, error) { return l.h.Catalogue(), nil }

// Call implements Connection.
func (l *Loopback) Call(ctx context.Context, call Call) (json.RawMessage, error) {
	rid := strconv.FormatUint(l.seq.Add(1), 10)
	type result struct {
		raw json.RawMessage
		err error
	}
	done := make(chan result, 1)
	ep := l.endpoint()
	ep.Serve(rid, call, func(raw json.RawMessage, err error) { done <- result{raw, err} })
	select {
	case r := <-done:
		return r.raw, r.err
	case <-ctx.Done():
		ep.Cancel(rid)
		return nil, cancelled(ctx)
	}
}

// Session returns the connection to the session services of the worker this loopback
// presentation attaches to (SessionManagement on the provider, a node's server host):
// until an attach its calls fail with ErrNotAttached, and a host assembling against it
// accepts its unresolved requirements provisionally.
func (l *Loopback) Session() Connection { return loopbackSession{l} }

type loopbackSession struct{ l *Loopback }

func (s loopbackSession) provisional() bool { return true }

func (s loopbackSession) subscriptions() (*clientSubs, bool) { return s.l.subs, true }

func (s loopbackSession) Catalogue(ctx context.Context) (Catalogue, error) {
	var cat Catalogue
	att := s.l.h.attacher()
	if att == nil {
		return cat, &Error{Code: CodeNotAttached, Message: "the provider has no session workers"}
	}
	raw, err := att.catalogue(ctx, s.l.pr)
	if err != nil {
		return cat, err
	}
	if err := json.Unmarshal(raw, &cat); err != nil {
		return cat, &Error{Code: CodeInvalidResult, Message: "the session catalogue: " + err.Error()}
	}
	return cat, nil
}

func (s loopbackSession) Call(ctx context.Context, call Call) (json.RawMessage, error) {
	att := s.l.h.attacher()
	if att == nil {
		return nil, &Error{Code: CodeNotAttached, Message: "the provider has no session workers"}
	}
	rid := strconv.FormatUint(s.l.seq.Add(1), 10)
	type result struct {
		raw json.RawMessage
		err error
	}
	done := make(chan result, 1)
	att.call(s.l.pr, rid, call, func(raw json.RawMessage, err error) {
		if err != nil {
			// Counted at the presentation's server, as a STREAM presentation's are.
			s.l.h.stats.served(call.Service, call.Member, s.l.pr.id, wireError(err))
		}
		done <- result{raw, err}
	})
	select {
	case r := <-done:
		return r.raw, r.err
	case <-ctx.Done():
		att.cancel(s.l.pr, rid)
		return nil, cancelled(ctx)
	}
}

// Close disconnects: the provider cancels this client's calls in flight, and a
// presentation's attachment ends.
func (l *Loopback) Close() {
	l.hookMu.Lock()
	if l.closed {
		l.hookMu.Unlock()
		return
	}
	l.closed = true
	hooks := l.hooks
	l.hooks = nil
	l.hookMu.Unlock()
	l.dialed.close()
	l.subs.setOnline(false)
	l.endpoint().Close()
	l.stop()
	for _, fn := range hooks {
		fn()
	}
	l.subs.close()
}
