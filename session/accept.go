package session

import (
	"bytes"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/meshnode/meshnode/session/wire"
)

// fallbackMaxConnections is the connection limit where the open-files limit is unknown.
const fallbackMaxConnections = 10000

// DefaultMaxConnections is the connection limit a Host uses when MaxConnections is 0:
// the open-files limit less a reserve of a tenth of it (at least 256 descriptors) for
// everything that is not a client connection.
func DefaultMaxConnections() int {
	n := openFilesLimit()
	if n <= 0 {
		return fallbackMaxConnections
	}
	reserve := max(n/10, 256)
	if n-reserve < 16 {
		return max(n/2, 1)
	}
	return n - reserve
}

// admitSocket counts an accepted socket against the connection limit. It returns the
// socket wrapped so that closing it gives its slot back, or nil when the limit is
// reached; the caller then refuses the connection.
func (h *Host) admitSocket(nc net.Conn) net.Conn {
	if h.maxConns > 0 && h.sockets.Add(1) > h.maxConns {
		h.sockets.Add(-1)
		return nil
	}
	if h.maxConns <= 0 {
		h.sockets.Add(1)
	}
	return &countedConn{Conn: nc, h: h}
}

// countedConn is an accepted socket that gives its slot in the connection limit back
// when it is closed, whoever closes it (the session teardown, a failed handshake, the
// WebSocket library after a hijack).
type countedConn struct {
	net.Conn
	h    *Host
	once sync.Once
}

func (c *countedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.h.sockets.Add(-1) })
	return err
}

// refuseTimeout bounds the write of a refusal: the socket buffer of a fresh connection
// takes it at once, and a refusal must never hold the accept loop.
const refuseTimeout = 100 * time.Millisecond

// maxRefusers bounds the WebSocket refusals in progress (each reads the upgrade request
// before it answers 503); past it a refused connection is closed without an answer.
const maxRefusers = 64

// refuse closes a connection accepted past the connection limit, telling the client
// why where the transport allows it before any handshake: a STREAM session-closing
// ServerDrain on tcp://, an HTTP 503 on ws:// (after its upgrade request, which HTTP
// clients expect to have sent first). A tls:// or wss:// client sees the close.
func (n *StreamNode) refuse(nc net.Conn, transport string) {
	switch transport {
	case "tcp":
		_ = nc.SetWriteDeadline(time.Now().Add(refuseTimeout))
		_, _ = nc.Write(appendSessionClosing(nil, wire.CloseServerDrain, "server at its connection limit"))
		_ = nc.Close()
	case "ws":
		if n.host.refusers.Add(1) > maxRefusers {
			n.host.refusers.Add(-1)
			_ = nc.Close()
			break
		}
		n.host.acceptWG.Add(1)
		go func() {
			defer n.host.acceptWG.Done()
			defer n.host.refusers.Add(-1)
			refuseHTTP(nc)
		}()
	default:
		_ = nc.Close()
	}
	n.host.metrics.refused(transport)
	n.host.ratelog.Log(n.host.log, slog.LevelWarn, "connection_limit", "stream connection refused: connection limit reached",
		"node", n.cfg.name, "transport", transport, "limit", n.host.maxConns)
}

// refuseHTTP reads an HTTP request head (briefly, boundedly) and answers 503.
func refuseHTTP(nc net.Conn) {
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(time.Second))
	var head [4096]byte
	n := 0
	for n < len(head) && !bytes.Contains(head[:n], []byte("\r\n\r\n")) {
		m, err := nc.Read(head[n:])
		n += m
		if err != nil {
			return
		}
	}
	_, _ = nc.Write([]byte("HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\nRetry-After: 1\r\n\r\n"))
}

// limitListener applies the connection limit to the listener of a ws:// or wss://
// node, whose accept loop belongs to net/http.
type limitListener struct {
	net.Listener
	n         *StreamNode
	transport string
}

func (l limitListener) Accept() (net.Conn, error) {
	for {
		nc, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if counted := l.n.host.admitSocket(nc); counted != nil {
			return counted, nil
		}
		l.n.refuse(nc, l.transport)
	}
}
