package session

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// DefaultMaxMessageSize is the inbound cap on header + payload (seed §9).
const DefaultMaxMessageSize = 64 << 10

// DefaultBindHost is the process default bind host (digest §11).
const DefaultBindHost = "127.0.0.1"

// SocketOptions are the per-node socket settings (the seed's ConfigureSocket).
type SocketOptions struct {
	// NoDelay disables Nagle on TCP sockets. Default true.
	NoDelay *bool
	// KeepAlive is the TCP keep-alive period; 0 keeps Go's default, negative disables.
	KeepAlive time.Duration
	// ReadBufferSize is the receive buffer a busy connection keeps between bursts (the
	// part of the receive pipe that lives in user space). Default 16 KiB. A connection
	// starts with 512 bytes and grows with what actually arrives; a frame larger than
	// the buffer grows it for that frame only. Every frame is in user space, whole,
	// before a permit is taken.
	ReadBufferSize int
	// MaxPendingWrite is the soft limit of the bytes queued for a connection's socket
	// (default 1 MiB). At it the session stops pulling packets and a push waits for
	// the writer (send-side backpressure) until its context ends. Replies to packets
	// already pulled may use up to twice this; a NonBlocking frame that finds the queue
	// at twice this closes the session as a slow consumer.
	MaxPendingWrite int
	// MaxPendingPackets bounds the Sends and Requests a session has pulled whose
	// callback has not started (default 16). At the bound its reader stops pulling and
	// only that client stalls in TCP. Packets queued behind a callback that does not
	// return within 10 ms give their host permits back, so a stalled session never
	// holds the permits other sessions wait for.
	MaxPendingPackets int
	// FrameTimeout bounds the time from a frame's first byte to its last (default
	// 10 s; negative disables): a client that trickles a frame is closed with reason
	// IdleTimeout, like net/http's ReadHeaderTimeout. Waiting for the first byte of the
	// next frame is idleness, bounded by the node's IdleTimeout.
	FrameTimeout time.Duration
	// SendTimeout bounds one socket write; expiry is a transport error. Default 10 s.
	SendTimeout time.Duration
	// HandshakeTimeout bounds the TLS or WebSocket handshake. Default 10 s.
	HandshakeTimeout time.Duration
}

func (o SocketOptions) withDefaults() SocketOptions {
	if o.NoDelay == nil {
		t := true
		o.NoDelay = &t
	}
	if o.ReadBufferSize <= 0 {
		o.ReadBufferSize = 16 << 10
	}
	if o.MaxPendingWrite <= 0 {
		o.MaxPendingWrite = 1 << 20
	}
	if o.MaxPendingPackets <= 0 {
		o.MaxPendingPackets = 16
	}
	if o.FrameTimeout == 0 {
		o.FrameTimeout = 10 * time.Second
	}
	if o.SendTimeout <= 0 {
		o.SendTimeout = 10 * time.Second
	}
	if o.HandshakeTimeout <= 0 {
		o.HandshakeTimeout = 10 * time.Second
	}
	return o
}

// NodeBuilder registers one stream node on a Host (seed §3). Its methods record
// settings; every rule is checked by Host.Start, which fails with a *ConfigError.
type NodeBuilder struct {
	name           string
	binds          []string
	bindHost       string
	advertiseHost  string
	maxMessageSize int64
	socket         SocketOptions
	tlsEnabled     bool
	certPath       string
	keyPath        string
	clientCAPath   string
	requireClient  bool
	sessions       []SessionType
	idleTimeout    time.Duration
	wsOrigins      []string
}

// Bind adds a listener endpoint: tcp://host:port, tls://host:port, ws://host:port/path
// or wss://host:port/path. A host of "" or "*" takes the node's bind host; port 0 asks
// the OS for one. Bind may be called several times (e.g. tcp and ws side by side).
func (b *NodeBuilder) Bind(endpoint string) *NodeBuilder {
	b.binds = append(b.binds, endpoint)
	return b
}

// BindPort adds a tcp:// listener on the node's bind host and port (0 = OS-assigned).
func (b *NodeBuilder) BindPort(port int) *NodeBuilder {
	return b.Bind("tcp://*:" + strconv.Itoa(port))
}

// BindHost sets the host the node's sockets open on (default 127.0.0.1).
func (b *NodeBuilder) BindHost(host string) *NodeBuilder { b.bindHost = host; return b }

// AdvertiseHost sets the host reported to clients (default: the bind host when it is
// not a wildcard; a wildcard bind host requires it).
func (b *NodeBuilder) AdvertiseHost(host string) *NodeBuilder { b.advertiseHost = host; return b }

// MaxMessageSize caps an inbound message's header + payload (default 64 KiB; 0 = no
// cap; negative fails start-up).
func (b *NodeBuilder) MaxMessageSize(n int64) *NodeBuilder { b.maxMessageSize = n; return b }

// Socket sets the socket options.
func (b *NodeBuilder) Socket(o SocketOptions) *NodeBuilder { b.socket = o; return b }

// TLSServer enables TLS with a PEM certificate chain and key.
func (b *NodeBuilder) TLSServer(certPath, keyPath string) *NodeBuilder {
	b.tlsEnabled, b.certPath, b.keyPath = true, certPath, keyPath
	return b
}

// RequireClientCertificate makes TLS connections present a client certificate signed
// by a CA in caPath (PEM); one that fails verification is rejected before a session
// exists. Requires TLSServer.
func (b *NodeBuilder) RequireClientCertificate(caPath string) *NodeBuilder {
	b.requireClient, b.clientCAPath = true, caPath
	return b
}

// Session registers the node's session type. Exactly one is allowed.
func (b *NodeBuilder) Session(t SessionType) *NodeBuilder {
	b.sessions = append(b.sessions, t)
	return b
}

// IdleTimeout closes a session with reason IdleTimeout when no frame arrived from its
// client for d. 0 (the default) disables it.
func (b *NodeBuilder) IdleTimeout(d time.Duration) *NodeBuilder { b.idleTimeout = d; return b }

// WebSocketOrigins restricts which browser origins may open ws:// and wss://
// connections (coder/websocket host patterns). By default any origin is accepted:
// STREAM authenticates in-band, not with ambient cookies.
func (b *NodeBuilder) WebSocketOrigins(patterns ...string) *NodeBuilder {
	b.wsOrigins = append(b.wsOrigins, patterns...)
	return b
}

// endpoint is one parsed bind endpoint.
type endpoint struct {
	scheme string // tcp, tls, ws, wss
	host   string // bind host, never empty after resolve
	port   int
	path   string // ws/wss only, default "/"
}

func (e endpoint) secure() bool { return e.scheme == "tls" || e.scheme == "wss" }

func parseEndpoint(s string) (endpoint, error) {
	u, err := url.Parse(s)
	if err != nil {
		return endpoint{}, fmt.Errorf("%w: %q: %v", ErrBadEndpoint, s, err)
	}
	var e endpoint
	switch u.Scheme {
	case "tcp", "tls", "ws", "wss":
		e.scheme = u.Scheme
	default:
		return endpoint{}, fmt.Errorf("%w: %q: scheme must be tcp, tls, ws or wss", ErrBadEndpoint, s)
	}
	host, portStr, err := net.SplitHostPort(u.Host)
	if err != nil {
		return endpoint{}, fmt.Errorf("%w: %q: %v", ErrBadEndpoint, s, err)
	}
	if portStr == "*" {
		portStr = "0"
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 0 || port > 65535 {
		return endpoint{}, fmt.Errorf("%w: %q: bad port", ErrBadEndpoint, s)
	}
	if host == "*" {
		host = ""
	}
	e.host, e.port = host, port
	if e.scheme == "ws" || e.scheme == "wss" {
		e.path = u.Path
		if e.path == "" {
			e.path = "/"
		}
	} else if u.Path != "" && u.Path != "/" {
		return endpoint{}, fmt.Errorf("%w: %q: %s endpoints take no path", ErrBadEndpoint, s, e.scheme)
	}
	return e, nil
}

func isWildcard(host string) bool { return host == "0.0.0.0" || host == "::" }

// validate checks the node's own rules (the host checks the cross-node ones).
func (b *NodeBuilder) validate() ([]endpoint, error) {
	if strings.TrimSpace(b.name) == "" {
		return nil, ErrEmptyNodeName
	}
	if len(b.binds) == 0 {
		return nil, ErrNoBindEndpoint
	}
	if len(b.sessions) > 1 {
		return nil, ErrMultipleSessionTypes
	}
	if len(b.sessions) == 0 {
		return nil, ErrNoSessionType
	}
	if check := b.sessions[0].check; check != nil {
		if err := check(); err != nil {
			return nil, err
		}
	}
	if b.tlsEnabled && b.certPath == "" {
		return nil, ErrTLSCertPathEmpty
	}
	if b.tlsEnabled && b.keyPath == "" {
		return nil, ErrTLSKeyPathEmpty
	}
	if b.requireClient && !b.tlsEnabled {
		return nil, ErrClientCertWithoutTLS
	}
	if b.maxMessageSize < 0 {
		return nil, ErrNegativeMaxMessageSize
	}
	bindHost := b.bindHost
	if bindHost == "" {
		bindHost = DefaultBindHost
	}
	eps := make([]endpoint, 0, len(b.binds))
	for _, s := range b.binds {
		e, err := parseEndpoint(s)
		if err != nil {
			return nil, err
		}
		if e.host == "" {
			e.host = bindHost
		}
		if e.secure() && !b.tlsEnabled {
			return nil, fmt.Errorf("%w: %s", ErrTLSEndpointWithoutTLS, s)
		}
		if isWildcard(e.host) && (b.advertiseHost == "" || isWildcard(b.advertiseHost)) {
			return nil, fmt.Errorf("%w: %s", ErrNoAdvertiseHost, s)
		}
		eps = append(eps, e)
	}
	return eps, nil
}
