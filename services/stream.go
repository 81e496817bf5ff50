package services

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshnode/meshnode/session"
	"github.com/meshnode/meshnode/session/connector"
	"github.com/meshnode/meshnode/session/wire"
)

// Service traffic over STREAM is ordinary packets with reserved names. The server
// reads only their names and metadata (the control fields); the payload is the call's
// JSON arguments or result, which only the service endpoint decodes. See
// docs/services.md.
const (
	// NameCatalogue: Request, empty payload → Response, JSON Catalogue.
	NameCatalogue = "$svc.catalogue"
	// NameCall: Request; metadata MetaService, MetaMember, MetaRequest and optionally
	// the W3C trace context; payload the JSON arguments → Response with the JSON result
	// (empty for none), or Error with a service code.
	NameCall = "$svc.call"
	// NameCancel: Send; metadata MetaRequest: cancel that call of this connection.
	NameCancel = "$svc.cancel"

	MetaService = "svc"
	MetaMember  = "member"
	MetaRequest = "rid"
	// MetaScope "session" sends a packet to the attached session worker instead of
	// the server's own services.
	MetaScope    = "scope"
	ScopeSession = "session"
)

// StreamServer serves a host's RPC-capable services to the clients of a STREAM node:
// one Endpoint per session, created on its first service packet and closed when the
// session ends (which cancels that session's calls, no one else's). With an Attacher,
// each session is also a presentation: its session-scoped packets go to the worker of
// the session it attached to, and what the Attacher pushes reaches it as Sends.
type StreamServer struct {
	h   *Host
	att *Attacher
	mu  sync.Mutex
	eps map[*session.Peer]*streamClient
}

type streamClient struct {
	ep *Endpoint
	pr *presenter
}

// NewStreamServer serves h; with att, packets of scope "session" go to the session
// worker each session is attached to (without att they are refused not_attached).
func NewStreamServer(h *Host, att *Attacher) *StreamServer {
	return &StreamServer{h: h, att: att, eps: map[*session.Peer]*streamClient{}}
}

// toSession reports whether p is session-scoped, and routes it if so.
func (s *StreamServer) toSession(ctx context.Context, p *session.Packet) (bool, error) {
	if scope, _ := p.Metadata.Get(MetaScope); scope != ScopeSession {
		return false, nil
	}
	fail := func(err error) (bool, error) {
		if !p.IsRequest() {
			return true, nil
		}
		svc, _ := p.Metadata.Get(MetaService)
		mem, _ := p.Metadata.Get(MetaMember)
		s.h.stats.served(svc, mem, s.clientID(p.Peer), wireError(err))
		return true, replyError(p, err)
	}
	if s.att == nil {
		return fail(&Error{Code: CodeNotAttached, Message: "this server has no session workers"})
	}
	pr := s.client(p.Peer).pr
	switch p.Name {
	case NameCall:
		call, rid, err := CallFromPacket(p)
		if err != nil {
			return fail(err)
		}
		s.att.call(pr, rid, call, func(raw json.RawMessage, err error) {
			if err != nil {
				s.h.stats.served(call.Service, call.Member, pr.id, wireError(err))
				_ = replyError(p, err)
				return
			}
			_ = p.Reply(wire.CodecJSON, raw)
		})
	case NameCancel:
		rid, _ := p.Metadata.Get(MetaRequest)
		s.att.cancel(pr, rid)
	case NameCatalogue:
		s.att.catalogueAsync(pr, func(raw json.RawMessage, err error) {
			if err != nil {
				_ = replyError(p, err)
				return
			}
			_ = p.Reply(wire.CodecJSON, raw)
		})
	default:
		return fail(&Error{Code: CodeInvalidArguments, Message: "not a session-scoped packet: " + p.Name})
	}
	return true, nil
}

// Routes adds the service packets to m.
func (s *StreamServer) Routes(m *session.Mux) *session.Mux {
	return m.Request(NameCatalogue, s.catalogue).Request(NameCall, s.call).Send(NameCancel, s.cancel).
		Request(NameSubscribe, s.subscribe).Send(NameUnsubscribe, s.unsubscribe)
}

func (s *StreamServer) subscribe(_ context.Context, p *session.Packet) error {
	a, err := subAddrFrom(p.Metadata.Get)
	var sid uint64
	if err == nil {
		sid, err = subIDFrom(p.Metadata.Get)
	}
	if err != nil {
		s.h.stats.served(a.svc, a.member, s.clientID(p.Peer), wireError(err))
		return replyError(p, err)
	}
	c := s.client(p.Peer)
	answer := func(raw json.RawMessage, err error) {
		if err != nil {
			s.h.stats.served(a.svc, a.member, c.pr.id, wireError(err))
			_ = replyError(p, err)
			return
		}
		_ = p.Reply(wire.CodecJSON, raw)
	}
	if scope, _ := p.Metadata.Get(MetaScope); scope == ScopeSession {
		if s.att == nil {
			answer(nil, &Error{Code: CodeNotAttached, Message: "this server has no session workers"})
			return nil
		}
		s.att.subscribeAsync(c.pr, a, sid, answer)
		return nil
	}
	peer := p.Peer
	answer(c.ep.subscribe(a, sid, func(d *delivery) bool {
		f, err := d.streamFrame(a)
		if err != nil {
			return true // cannot be encoded for STREAM: nothing to send (logged by the writer)
		}
		return !errors.Is(peer.SendFrame(f), session.ErrBehind)
	}))
	return nil
}

func (s *StreamServer) unsubscribe(_ context.Context, p *session.Packet) error {
	a, err := subAddrFrom(p.Metadata.Get)
	if err != nil {
		return nil
	}
	sid, err := subIDFrom(p.Metadata.Get)
	if err != nil {
		return nil
	}
	s.mu.Lock()
	c := s.eps[p.Peer]
	s.mu.Unlock()
	if c == nil {
		return nil
	}
	if scope, _ := p.Metadata.Get(MetaScope); scope == ScopeSession {
		if s.att != nil {
			s.att.unsubscribe(c.pr, a, sid)
		}
		return nil
	}
	c.ep.unsubscribe(a, sid)
	return nil
}

// Sessions returns how many sessions have a service endpoint open.
func (s *StreamServer) Sessions() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.eps)
}

// client returns the endpoint and presenter of p's session, making them on first use.
func (s *StreamServer) client(p *session.Peer) *streamClient {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.eps[p]; c != nil {
		return c
	}
	var (
		hookMu sync.Mutex
		hooks  []func()
		ended  bool // the disconnect ran: a hook registered later runs at once
	)
	pr := &presenter{
		id: s.clientID(p), transport: p.Transport(), key: "s" + strconv.FormatUint(uint64(p.RoutingID()), 10),
		ctx: p.Context(),
		push: func(f frame) error {
			return p.Send(context.Background(), f.name, wire.CodecJSON, f.payload, session.WithMetadata(f.md), session.NonBlocking())
		},
		sendFrame: p.SendFrame,
		onClose: func(fn func()) {
			hookMu.Lock()
			if ended {
				hookMu.Unlock()
				fn()
				return
			}
			hooks = append(hooks, fn)
			hookMu.Unlock()
		},
	}
	ep := s.h.Endpoint(context.WithValue(p.Context(), presenterKey{}, pr), Client{ID: pr.id, Transport: p.Transport()})
	c := &streamClient{ep: ep, pr: pr}
	s.eps[p] = c
	p.AfterDisconnect(func(context.Context, wire.CloseReason) {
		ep.Close()
		s.mu.Lock()
		delete(s.eps, p)
		s.mu.Unlock()
		hookMu.Lock()
		fns := hooks
		hooks, ended = nil, true
		hookMu.Unlock()
		for _, fn := range fns {
			fn()
		}
	})
	return c
}

// clientID is the identity of a STREAM session as this node accepted it: with an
// Attacher, the mesh node's RID and the routing id (unique in the fleet while the
// session lives); without, the stream node's name and the routing id.
func (s *StreamServer) clientID(p *session.Peer) string {
	node := p.Node()
	if s.att != nil {
		node = s.att.rid
	}
	return node + "/" + strconv.FormatUint(uint64(p.RoutingID()), 10)
}

func (s *StreamServer) catalogue(ctx context.Context, p *session.Packet) error {
	if routed, err := s.toSession(ctx, p); routed {
		return err
	}
	return p.ReplyValue(s.h.Catalogue())
}

func (s *StreamServer) call(ctx context.Context, p *session.Packet) error {
	if routed, err := s.toSession(ctx, p); routed {
		return err
	}
	call, rid, err := CallFromPacket(p)
	if err != nil {
		s.h.stats.served(call.Service, call.Member, s.clientID(p.Peer), wireError(err))
		return replyError(p, err)
	}
	s.client(p.Peer).ep.Serve(rid, call, func(raw json.RawMessage, err error) {
		if err != nil {
			_ = replyError(p, err)
			return
		}
		_ = p.Reply(wire.CodecJSON, raw)
	})
	return nil // answered when the call ends; the session goes on with its next packet
}

func (s *StreamServer) cancel(ctx context.Context, p *session.Packet) error {
	if routed, err := s.toSession(ctx, p); routed {
		return err
	}
	if rid, ok := p.Metadata.Get(MetaRequest); ok {
		s.mu.Lock()
		c := s.eps[p.Peer]
		s.mu.Unlock()
		if c != nil {
			c.ep.Cancel(rid)
		}
	}
	return nil
}

// CallFromPacket reads a NameCall packet's control fields: the call and the client's
// request id. Its payload is taken as the arguments, undecoded.
func CallFromPacket(p *session.Packet) (Call, string, error) {
	return callFromMetadata(p.Metadata.Get, p.Payload, p.Codec)
}

func callFromMetadata(get func(string) (string, bool), payload []byte, c wire.Codec) (Call, string, error) {
	svc, _ := get(MetaService)
	mem, _ := get(MetaMember)
	rid, _ := get(MetaRequest)
	switch {
	case svc == "" || mem == "" || rid == "":
		return Call{}, "", &Error{Code: CodeInvalidArguments, Message: "a service call needs the svc, member and rid metadata"}
	case c != wire.CodecJSON && c != wire.CodecRaw:
		return Call{}, "", &Error{Code: CodeInvalidArguments, Message: fmt.Sprintf("service calls carry JSON, not codec %d", c)}
	}
	call := Call{Service: svc, Member: mem, Args: payload}
	if key, ok := get(MetaKey); ok {
		g, _ := get(MetaGeneration)
		gen, err := strconv.ParseUint(g, 10, 64)
		if err != nil || key == "" || gen == 0 {
			return Call{}, "", &Error{Code: CodeInvalidArguments, Message: "an instance call names its key and generation (a number)"}
		}
		call.Key, call.Generation = key, gen
	}
	call.Ref, _ = get(MetaRef)
	for _, k := range []string{"traceparent", "tracestate"} {
		if v, ok := get(k); ok {
			if call.Trace == nil {
				call.Trace = map[string]string{}
			}
			call.Trace[k] = v
		}
	}
	return call, rid, nil
}

func replyError(p *session.Packet, err error) error {
	we := wireError(err)
	return p.ReplyError(we.Code, we.Message)
}

// StreamConnection is a Connection to the services of a meshnode over STREAM, through
// a Go connector (connected by the caller, who also closes it). It carries
// subscriptions too: state and events replicas of the hosts using it, hydrated again
// when the connector reconnects (a fresh snapshot replaces what was kept as stale
// display data meanwhile). After a reconnect it attaches again to the session it was
// attached to (the server saw a new connection, with nothing selected).
type StreamConnection struct {
	c    *connector.Connector
	seq  atomic.Uint64
	subs *clientSubs

	mu      sync.Mutex
	session string // the session to attach to again after a reconnect
	up      bool
	unwatch func()
	dialed  dialed // hosts Dial made on it
}

func (s *StreamConnection) own(h *Host)  { s.dialed.own(h) }
func (sc sessionConnection) own(h *Host) { sc.s.dialed.own(h) }

// NewStreamConnection uses c for service calls and subscriptions; it registers the
// connector's handlers of the service layer's pushes.
func NewStreamConnection(c *connector.Connector) *StreamConnection {
	s := &StreamConnection{c: c, up: c.State() == connector.StateConnected}
	s.subs = newClientSubs(streamTransport{s}, s.up)
	for _, name := range []string{NameUpdate, NameEvent, NameClosed} {
		c.Handle(name, s.onFrame)
	}
	c.Handle(NameAttachment, s.onAttachment)
	s.unwatch = c.WatchState(s.onState)
	return s
}

// Close ends the connection's subscriptions (their replicas keep their values, stale)
// and closes the hosts Dial made on it; the connector stays the caller's.
func (s *StreamConnection) Close() {
	s.dialed.close()
	s.unwatch()
	for _, name := range []string{NameUpdate, NameEvent, NameClosed, NameAttachment} {
		s.c.Handle(name, nil)
	}
	s.subs.setOnline(false)
	s.subs.close()
}

func (s *StreamConnection) subscriptions() (*clientSubs, bool) { return s.subs, false }

func (s *StreamConnection) onFrame(m connector.Message) {
	in, err := inboundFrom(m.Name, m.Metadata.Get, m.Payload)
	if err != nil {
		s.subs.stale.Add(1)
		return
	}
	s.subs.onInbound(in)
}

func (s *StreamConnection) onAttachment(m connector.Message) {
	var n attachmentNotice
	if json.Unmarshal(m.Payload, &n) != nil {
		return
	}
	s.mu.Lock()
	if n.State == AttachmentDetached {
		s.session = ""
	} else {
		s.session = n.Session
	}
	s.mu.Unlock()
	s.subs.setAttachment(n)
}

func (s *StreamConnection) onState(st connector.State) {
	up := st == connector.StateConnected
	s.mu.Lock()
	back := up && !s.up
	s.up = up
	session := s.session
	s.mu.Unlock()
	s.subs.setOnline(up)
	if !back || session == "" {
		return
	}
	// A new STREAM session: nothing is selected on the server. Attach again.
	s.subs.wg.Add(1)
	go func() {
		defer s.subs.wg.Done()
		ctx, cancel := context.WithTimeout(s.subs.ctx, connector.DefaultRequestTimeout)
		defer cancel()
		args, _ := json.Marshal(AttachArgs{Session: session})
		_, _ = s.call(ctx, Call{Service: SessionManagementToken.ID(), Member: "attach", Args: args})
	}()
}

// streamTransport subscribes over the STREAM connection.
type streamTransport struct{ s *StreamConnection }

func (t streamTransport) opts(session bool, a subAddr, sid uint64) []connector.CallOption {
	md := a.metadata(nil)
	opts := make([]connector.CallOption, 0, len(md)+2)
	for _, e := range md {
		opts = append(opts, connector.WithMetadata(e.Key, e.Value))
	}
	if session {
		opts = append(opts, connector.WithMetadata(MetaScope, ScopeSession))
	}
	if sid != 0 {
		opts = append(opts, connector.WithMetadata(MetaSubscription, strconv.FormatUint(sid, 10)))
	}
	return opts
}

func (t streamTransport) subscribeReq(ctx context.Context, session bool, a subAddr, sid uint64) (json.RawMessage, error) {
	r, err := t.s.c.RequestRaw(ctx, NameSubscribe, wire.CodecJSON, nil, t.opts(session, a, sid)...)
	if err != nil {
		return nil, fromConnector(ctx, err)
	}
	return json.RawMessage(r.Payload), nil
}

func (t streamTransport) unsubscribeReq(session bool, a subAddr, sid uint64) {
	ctx, cancel := context.WithTimeout(t.s.subs.ctx, 5*time.Second)
	defer cancel()
	_ = t.s.c.Send(ctx, NameUnsubscribe, nil, t.opts(session, a, sid)...)
}

// Session returns the connection to the session services of the worker this client
// attaches to (through SessionManagement): the same STREAM connection, its packets
// marked session-scoped. Until an attach its calls fail with ErrNotAttached, and a host
// assembling against it accepts its unresolved requirements provisionally.
func (s *StreamConnection) Session() Connection { return sessionConnection{s} }

type sessionConnection struct{ s *StreamConnection }

func (sc sessionConnection) provisional() bool { return true }

func (sc sessionConnection) subscriptions() (*clientSubs, bool) { return sc.s.subs, true }

func (sc sessionConnection) Catalogue(ctx context.Context) (Catalogue, error) {
	var cat Catalogue
	if err := sc.s.c.Request(ctx, NameCatalogue, nil, &cat, connector.WithMetadata(MetaScope, ScopeSession)); err != nil {
		return cat, fromConnector(ctx, err)
	}
	return cat, nil
}

func (sc sessionConnection) Call(ctx context.Context, call Call) (json.RawMessage, error) {
	return sc.s.call(ctx, call, connector.WithMetadata(MetaScope, ScopeSession))
}

// Catalogue implements Connection.
func (s *StreamConnection) Catalogue(ctx context.Context) (Catalogue, error) {
	var cat Catalogue
	if err := s.c.Request(ctx, NameCatalogue, nil, &cat); err != nil {
		return cat, fromConnector(ctx, err)
	}
	return cat, nil
}

// Call implements Connection. When ctx ends first, a NameCancel for this call follows.
func (s *StreamConnection) Call(ctx context.Context, call Call) (json.RawMessage, error) {
	return s.call(ctx, call)
}

func (s *StreamConnection) call(ctx context.Context, call Call, extra ...connector.CallOption) (json.RawMessage, error) {
	rid := strconv.FormatUint(s.seq.Add(1), 10)
	opts := []connector.CallOption{
		connector.WithMetadata(MetaService, call.Service),
		connector.WithMetadata(MetaMember, call.Member),
		connector.WithMetadata(MetaRequest, rid),
	}
	if call.Key != "" {
		opts = append(opts, connector.WithMetadata(MetaKey, call.Key), connector.WithMetadata(MetaGeneration, strconv.FormatUint(call.Generation, 10)))
	}
	if call.Ref != "" {
		opts = append(opts, connector.WithMetadata(MetaRef, call.Ref))
	}
	for k, v := range call.Trace {
		opts = append(opts, connector.WithMetadata(k, v))
	}
	opts = append(opts, extra...)
	r, err := s.c.RequestRaw(ctx, NameCall, wire.CodecJSON, call.Args, opts...)
	if err != nil {
		if ctx.Err() != nil {
			// Best effort: the provider stops this call; a lost cancel only means the
			// call runs to its end unobserved.
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), connector.DefaultRequestTimeout)
			_ = s.c.Send(cctx, NameCancel, nil, append([]connector.CallOption{connector.WithMetadata(MetaRequest, rid)}, extra...)...)
			cancel()
		}
		return nil, fromConnector(ctx, err)
	}
	return json.RawMessage(r.Payload), nil
}

// fromConnector maps a connector error to a service error.
func fromConnector(ctx context.Context, err error) error {
	var re *connector.RemoteError
	switch {
	case errors.As(err, &re):
		return &Error{Code: re.Code, Message: re.Message}
	case ctx.Err() != nil:
		return cancelled(ctx)
	default:
		return &Error{Code: CodeDisconnected, Message: err.Error()}
	}
}
