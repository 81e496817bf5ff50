package session

import (
	"context"
	"crypto/tls"
	"errors"
	"log"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/meshnode/meshnode/fault"
)

// StreamNode is a started stream node: its listeners and the sessions they accept.
type StreamNode struct {
	host      *Host
	cfg       *NodeBuilder
	socket    SocketOptions
	tlsConfig *tls.Config
	sessType  SessionType
	maxMsg    int // 0 = no cap

	listeners []*listener
	closeOnce sync.Once
}

// listener is one bound endpoint of a node.
type listener struct {
	ep        endpoint
	ln        net.Listener
	http      *http.Server // ws/wss only
	advertise string       // scheme://host:port[/path] with the real port
	bound     string       // host:port actually bound
}

func newStreamNode(h *Host, b *NodeBuilder, tlsCfg *tls.Config) *StreamNode {
	return &StreamNode{
		host:      h,
		cfg:       b,
		socket:    b.socket.withDefaults(),
		tlsConfig: tlsCfg,
		sessType:  b.sessions[0],
		maxMsg:    int(b.maxMessageSize),
	}
}

// Name returns the node's name.
func (n *StreamNode) Name() string { return n.cfg.name }

// Endpoints returns the advertised endpoints, with the real ports (digest §11).
func (n *StreamNode) Endpoints() []string {
	out := make([]string, len(n.listeners))
	for i, l := range n.listeners {
		out[i] = l.advertise
	}
	return out
}

// BindAddrs returns the host:port each listener is bound to.
func (n *StreamNode) BindAddrs() []string {
	out := make([]string, len(n.listeners))
	for i, l := range n.listeners {
		out[i] = l.bound
	}
	return out
}

func (n *StreamNode) listen(ctx context.Context, eps []endpoint) error {
	var lc net.ListenConfig
	for _, ep := range eps {
		addr := net.JoinHostPort(ep.host, strconv.Itoa(ep.port))
		ln, err := lc.Listen(ctx, "tcp", addr)
		if err != nil {
			return fault.Errorf(fault.Unavailable, "stream node %q: listen %s://%s: %w", n.cfg.name, ep.scheme, addr, err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		adv := n.cfg.advertiseHost
		if adv == "" {
			adv = ep.host
		}
		l := &listener{ep: ep, ln: ln, bound: ln.Addr().String()}
		l.advertise = ep.scheme + "://" + net.JoinHostPort(adv, strconv.Itoa(port))
		if ep.path != "" {
			l.advertise += ep.path
		}
		n.listeners = append(n.listeners, l)
	}
	return nil
}

func (n *StreamNode) serve() {
	for _, l := range n.listeners {
		n.host.acceptWG.Add(1)
		switch l.ep.scheme {
		case "tcp", "tls":
			go n.acceptLoop(l)
		case "ws", "wss":
			l.http = n.newWebSocketServer(l)
			go n.serveWebSocket(l)
		}
	}
}

func (n *StreamNode) closeListeners() {
	n.closeOnce.Do(func() {
		for _, l := range n.listeners {
			if l.http != nil {
				// Close stops the accept loop; hijacked WebSocket connections are
				// sessions and are closed by the host, not here.
				_ = l.http.Close()
			} else {
				_ = l.ln.Close()
			}
		}
	})
}

// acceptLoop owns one tcp:// or tls:// listener.
func (n *StreamNode) acceptLoop(l *listener) {
	defer n.host.acceptWG.Done()
	var delay time.Duration
	for {
		nc, err := l.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// A socket-level error belongs to no session: monitoring only (seed §7).
			n.host.metrics.socketError(l.ep.scheme)
			n.host.log.Warn("stream accept failed", "node", n.cfg.name, "endpoint", l.advertise, "err", err)
			delay = min(max(delay*2, 5*time.Millisecond), time.Second)
			time.Sleep(delay)
			continue
		}
		delay = 0
		counted := n.host.admitSocket(nc)
		if counted == nil {
			n.refuse(nc, l.ep.scheme)
			continue
		}
		n.tuneTCP(nc)
		if l.ep.scheme == "tls" {
			n.host.acceptWG.Add(1)
			go n.handshakeTLS(l, counted)
			continue
		}
		n.startConn(counted, nil, l.ep.scheme, nil)
	}
}

func (n *StreamNode) tuneTCP(nc net.Conn) {
	tc, ok := nc.(*net.TCPConn)
	if !ok {
		return
	}
	_ = tc.SetNoDelay(*n.socket.NoDelay)
	switch {
	case n.socket.KeepAlive < 0:
		_ = tc.SetKeepAlive(false)
	case n.socket.KeepAlive > 0:
		_ = tc.SetKeepAlive(true)
		_ = tc.SetKeepAlivePeriod(n.socket.KeepAlive)
	}
}

// handshakeTLS completes the TLS handshake before any session exists: a failure is a
// handshake failure, recorded in monitoring only (seed §7).
func (n *StreamNode) handshakeTLS(l *listener, raw net.Conn) {
	defer n.host.acceptWG.Done()
	tc := tls.Server(raw, n.tlsConfig)
	ctx, cancel := context.WithTimeout(n.host.acceptCtx, n.socket.HandshakeTimeout)
	err := tc.HandshakeContext(ctx)
	cancel()
	if err != nil {
		n.host.metrics.handshakeFailure("tls")
		n.host.log.Debug("stream TLS handshake failed", "node", n.cfg.name, "remote", raw.RemoteAddr().String(), "err", err)
		_ = raw.Close()
		return
	}
	n.startConn(tc, nil, "tls", nil)
}

// newWebSocketServer returns the HTTP server of one ws:// or wss:// listener: its
// handler upgrades the request and then runs the session over the WebSocket byte stream.
func (n *StreamNode) newWebSocketServer(l *listener) *http.Server {
	transport := l.ep.scheme
	mux := http.NewServeMux()
	mux.HandleFunc(l.ep.path, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != l.ep.path {
			http.NotFound(w, r)
			return
		}
		opts := &websocket.AcceptOptions{
			OriginPatterns:     n.cfg.wsOrigins,
			InsecureSkipVerify: len(n.cfg.wsOrigins) == 0,
		}
		wc, err := websocket.Accept(w, r, opts)
		if err != nil {
			n.host.metrics.handshakeFailure(transport)
			n.host.log.Debug("stream WebSocket handshake failed", "node", n.cfg.name, "remote", r.RemoteAddr, "err", err)
			return
		}
		// The byte stream lives as long as the session, not the HTTP request.
		nc := websocket.NetConn(n.host.baseCtx, wc, websocket.MessageBinary)
		raw, _ := r.Context().Value(rawConnKey{}).(net.Conn)
		done := make(chan struct{})
		if c := n.startConn(nc, &wsTransport{conn: wc, raw: raw}, transport, done); c == nil {
			return
		}
		<-done
	})
	srv := &http.Server{
		Handler: mux,
		// The session needs the socket under the WebSocket to bound its close handshake.
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, rawConnKey{}, c)
		},
		// The upgrade request must arrive within the handshake timeout, and a
		// connection that never upgrades is not kept alive past it either.
		ReadHeaderTimeout: n.socket.HandshakeTimeout,
		IdleTimeout:       n.socket.HandshakeTimeout,
		// net/http reports TLS handshake failures only through its error log: count
		// them as handshake failures (monitoring only, seed §7) instead of printing.
		ErrorLog: log.New(httpErrorLog{n: n, transport: transport}, "", 0),
	}
	if transport == "wss" {
		srv.TLSConfig = n.tlsConfig
	}
	return srv
}

// rawConnKey keys the accepted socket in a WebSocket request's context.
type rawConnKey struct{}

// wsTransport is what a WebSocket session keeps of its transport beyond the byte
// stream: the WebSocket connection (for the close handshake) and the socket under it
// (to end a handshake the client does not answer).
type wsTransport struct {
	conn *websocket.Conn
	raw  net.Conn
}

type httpErrorLog struct {
	n         *StreamNode
	transport string
}

func (w httpErrorLog) Write(p []byte) (int, error) {
	msg := strings.TrimSpace(string(p))
	if strings.Contains(msg, "TLS handshake error") {
		w.n.host.metrics.handshakeFailure(w.transport)
	} else {
		w.n.host.metrics.socketError(w.transport)
	}
	w.n.host.log.Debug("stream WebSocket listener", "node", w.n.cfg.name, "msg", msg)
	return len(p), nil
}

// serveWebSocket owns one ws:// or wss:// listener.
func (n *StreamNode) serveWebSocket(l *listener) {
	defer n.host.acceptWG.Done()
	var err error
	limited := limitListener{Listener: l.ln, n: n, transport: l.ep.scheme}
	if l.ep.scheme == "wss" {
		err = l.http.Serve(tls.NewListener(limited, n.tlsConfig))
	} else {
		err = l.http.Serve(limited)
	}
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		n.host.log.Warn("stream WebSocket listener stopped", "node", n.cfg.name, "endpoint", l.advertise, "err", err)
	}
}
