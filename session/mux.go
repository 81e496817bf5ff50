package session

import (
	"context"
	"fmt"
	"strings"

	"github.com/meshnode/meshnode/fault"
	"github.com/meshnode/meshnode/session/wire"
)

// HandlerFunc handles one packet. A Request is answered with p.Reply* (now or later,
// from any goroutine); a returned error answers it instead, with the code of the error's
// fault kind (ErrorReply), so handlers return errors rather than map them.
type HandlerFunc func(ctx context.Context, p *Packet) error

// Mux is a packet router, the common way to write a session: handlers by packet name
// for Requests and for Sends, prefix routes, a fallback, and the connect and disconnect
// callbacks. Its Type is the session type to register on a stream node. A Mux is
// configured before the host starts and shared by every session of the node, so its
// handlers keep per-connection state (if any) elsewhere, keyed by the Peer.
//
//	mux := session.NewMux("chat")
//	mux.Request("echo", func(ctx context.Context, p *session.Packet) error {
//		return p.Reply(p.Codec, p.Payload)
//	})
//	host.AddStreamNode("gateway").Bind("tcp://127.0.0.1:7400").Session(mux.Type())
type Mux struct {
	name     string
	requests map[string]HandlerFunc
	sends    map[string]HandlerFunc
	prefixes []prefixRoute
	fallback HandlerFunc
	connect  func(ctx context.Context, peer *Peer)
	discon   func(ctx context.Context, peer *Peer, reason wire.CloseReason)
	errs     []error // registration errors, reported by Host.Start
}

type prefixRoute struct {
	prefix string
	h      HandlerFunc
}

// NewMux returns an empty router whose session type is named name (the seed's rules:
// one session type per stream node, a session type on one node only).
func NewMux(name string) *Mux {
	return &Mux{name: name, requests: map[string]HandlerFunc{}, sends: map[string]HandlerFunc{}}
}

// Request routes Requests named name to h.
func (m *Mux) Request(name string, h HandlerFunc) *Mux {
	m.add(m.requests, "Request", name, h)
	return m
}

// Send routes Sends named name to h.
func (m *Mux) Send(name string, h HandlerFunc) *Mux {
	m.add(m.sends, "Send", name, h)
	return m
}

// Prefix routes the Requests and Sends whose name starts with prefix, and that no exact
// route takes, to h. The longest matching prefix wins.
func (m *Mux) Prefix(prefix string, h HandlerFunc) *Mux {
	for _, r := range m.prefixes {
		if r.prefix == prefix {
			m.errs = append(m.errs, fmt.Errorf("%w: prefix %q routed twice", ErrDuplicateRoute, prefix))
			return m
		}
	}
	if prefix == "" || h == nil {
		m.errs = append(m.errs, fmt.Errorf("%w: Prefix(%q) needs a prefix and a handler", ErrDuplicateRoute, prefix))
		return m
	}
	m.prefixes = append(m.prefixes, prefixRoute{prefix: prefix, h: h})
	return m
}

// Fallback handles what no route takes. Without one, a Request gets an Error not_found
// and a Send is dropped.
func (m *Mux) Fallback(h HandlerFunc) *Mux {
	m.fallback = h
	return m
}

// OnConnect sets the connect callback (the first callback of every session).
func (m *Mux) OnConnect(fn func(ctx context.Context, peer *Peer)) *Mux {
	m.connect = fn
	return m
}

// OnDisconnect sets the disconnect callback (the last callback of every session).
func (m *Mux) OnDisconnect(fn func(ctx context.Context, peer *Peer, reason wire.CloseReason)) *Mux {
	m.discon = fn
	return m
}

func (m *Mux) add(routes map[string]HandlerFunc, kind, name string, h HandlerFunc) {
	switch {
	case name == "" || h == nil:
		m.errs = append(m.errs, fmt.Errorf("%w: %s(%q) needs a name and a handler", ErrDuplicateRoute, kind, name))
	case routes[name] != nil:
		m.errs = append(m.errs, fmt.Errorf("%w: %s %q routed twice", ErrDuplicateRoute, kind, name))
	default:
		routes[name] = h
	}
}

// Type returns the session type of the router, to register with NodeBuilder.Session.
// A route registered twice makes Host.Start fail (seed §3.2: a duplicate dispatch key
// is a start-up error).
func (m *Mux) Type() SessionType {
	return SessionType{
		name:       "mux:" + m.name,
		newSession: func() Session { return muxSession{m} },
		check: func() error {
			if len(m.errs) > 0 {
				return m.errs[0]
			}
			return nil
		},
	}
}

// Handler returns the handler the mux routes p to (the fallback, or nil).
func (m *Mux) Handler(p *Packet) HandlerFunc {
	routes := m.sends
	if p.Kind == wire.KindRequest {
		routes = m.requests
	}
	if h := routes[p.Name]; h != nil {
		return h
	}
	var best prefixRoute
	for _, r := range m.prefixes {
		if strings.HasPrefix(p.Name, r.prefix) && len(r.prefix) > len(best.prefix) {
			best = r
		}
	}
	if best.h != nil {
		return best.h
	}
	return m.fallback
}

// ServePacket routes p as the Mux's sessions do: to its handler, else a Request fails
// with not_found and a Send is dropped. For sessions that wrap a Mux.
func (m *Mux) ServePacket(ctx context.Context, p *Packet) error {
	if h := m.Handler(p); h != nil {
		return h(ctx, p)
	}
	if p.Kind == wire.KindRequest {
		return fault.Errorf(fault.NotFound, "no handler for packet %s", p.Name)
	}
	return nil
}

// muxSession is the Session of every connection of a Mux.
type muxSession struct{ m *Mux }

func (s muxSession) OnPacket(ctx context.Context, p *Packet) error { return s.m.ServePacket(ctx, p) }

func (s muxSession) OnConnect(ctx context.Context, peer *Peer) {
	if s.m.connect != nil {
		s.m.connect(ctx, peer)
	}
}

func (s muxSession) OnDisconnect(ctx context.Context, peer *Peer, reason wire.CloseReason) {
	if s.m.discon != nil {
		s.m.discon(ctx, peer, reason)
	}
}
