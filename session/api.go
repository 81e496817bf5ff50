package session

import (
	"context"
	"reflect"

	"github.com/meshnode/meshnode/session/wire"
)

// Session is the application's per-connection callback object. A new one is made for
// every accepted connection; its methods run one at a time, in packet order, inside the
// connection's session-owner actor, so they need no locks for their own state.
//
// OnPacket receives every Send and Request. For a Request, reply with pkt.Reply* now or
// later from any goroutine; if OnPacket returns an error (or panics) before a reply was
// made, the client gets an Error reply (code from a *CodedError, else internal_failure)
// and the error is logged; the transport-error callback is never involved.
type Session interface {
	OnPacket(ctx context.Context, pkt *Packet) error
}

// ConnectHandler is implemented by sessions that want the connect callback. It runs
// first, before any packet of the connection.
type ConnectHandler interface {
	OnConnect(ctx context.Context, peer *Peer)
}

// DisconnectHandler is implemented by sessions that want the disconnect callback. It is
// the last callback of a session; none runs after it.
type DisconnectHandler interface {
	OnDisconnect(ctx context.Context, peer *Peer, reason wire.CloseReason)
}

// TransportErrorHandler is implemented by sessions that want transport errors
// attributed to their connection (seed §7). It runs before the disconnect callback.
type TransportErrorHandler interface {
	OnTransportError(ctx context.Context, peer *Peer, err error)
}

// SessionType names a session implementation and makes its instances. The name is the
// Go type, which is the key of the "one session type per node, one node per session
// type" rules of seed §3.2.
type SessionType struct {
	name       string
	newSession func() Session
	check      func() error // registration errors of the type (a Mux's duplicate routes)
	reuseSends bool
}

// NewSessionType returns the session type of T, made by newSession.
func NewSessionType[T Session](newSession func() T) SessionType {
	return SessionType{
		name:       reflect.TypeFor[T]().String(),
		newSession: func() Session { return newSession() },
	}
}

// Name returns the session type's name (its Go type).
func (t SessionType) Name() string { return t.name }

// ReuseSendPackets returns the session type with Send packet reuse on. Its sessions
// promise not to keep a Send packet past OnPacket: when OnPacket returns, the runtime
// takes the packet back and reads the next Sends into the same memory, so a pipelining
// client's Sends cost no allocation and no garbage collection work.
//
// Borrowed until OnPacket returns, then overwritten: the *Packet itself, its Payload,
// Metadata, CorrelationID and FlowID. Name stays valid (it is a string of its own).
// To keep any of the rest, copy it (bytes.Clone, strings.Clone) or call pkt.Retain
// during OnPacket; a relay through a binding does that itself when it must hold a
// packet. Requests are never reused: they may be answered later, from any goroutine.
// Frames over 120 bytes (header and payload) are allocated as before.
//
// HostOptions.NoPacketReuse turns reuse off for the whole host.
func (t SessionType) ReuseSendPackets() SessionType {
	t.reuseSends = true
	return t
}

// ReusesSendPackets reports whether the session type reuses Send packets.
func (t SessionType) ReusesSendPackets() bool { return t.reuseSends }

// RoutingID is the connection-local peer identity (4 bytes, digest §11): unique among
// the live connections of a host and delivered unchanged to every callback.
type RoutingID uint32
