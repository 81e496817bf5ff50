package connector

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"

	"github.com/coder/websocket"
)

// transport is one dialed byte stream. For WebSocket endpoints it is websocket.NetConn:
// each Write is one binary message (the connector writes one or more whole frames per
// call) and inbound messages are read as a byte stream.
type transport struct {
	net.Conn
	ws *websocket.Conn // nil for tcp and tls
}

// shutdown ends the transport. graceful asks for the WebSocket close handshake (used
// for Close); every other drop closes at once, because the peer may be gone.
func (t *transport) shutdown(graceful bool) {
	if t.ws != nil && !graceful {
		_ = t.ws.CloseNow()
	}
	// For a WebSocket after CloseNow this only releases the NetConn's timers.
	_ = t.Conn.Close()
}

// dial makes one connect attempt bounded by ConnectTimeout, ctx and the connector's
// life (Close cancels it).
func (c *Connector) dial(ctx context.Context) (*transport, error) {
	dctx, cancel := context.WithTimeout(ctx, c.opts.ConnectTimeout)
	defer cancel()
	stop := context.AfterFunc(c.life, cancel)
	defer stop()

	t, err := c.dialTransport(dctx)
	if err == nil {
		return t, nil
	}
	switch {
	case c.life.Err() != nil:
		return nil, ErrClosed
	case ctx.Err() != nil:
		return nil, fmt.Errorf("connector: connect %s: %w", c.ep.raw, ctx.Err())
	case dctx.Err() != nil:
		return nil, fmt.Errorf("%w: %s after %v: %w", ErrConnectTimeout, c.ep.raw, c.opts.ConnectTimeout, err)
	case isTLSFailure(err):
		return nil, fmt.Errorf("%w: %s: %w", ErrTLSValidation, c.ep.raw, err)
	}
	return nil, fmt.Errorf("%w: connect %s: %w", ErrDisconnected, c.ep.raw, err)
}

func (c *Connector) dialTransport(ctx context.Context) (*transport, error) {
	d := c.opts.Dialer
	if d == nil {
		d = &net.Dialer{}
	}
	switch c.ep.scheme {
	case "tcp":
		nc, err := d.DialContext(ctx, "tcp", c.ep.addr)
		if err != nil {
			return nil, err
		}
		return &transport{Conn: nc}, nil
	case "tls":
		// tls.Dialer takes the server name from the address when the config has none,
		// and finishes the handshake within ctx.
		td := &tls.Dialer{NetDialer: d, Config: c.opts.TLS}
		nc, err := td.DialContext(ctx, "tcp", c.ep.addr)
		if err != nil {
			return nil, err
		}
		return &transport{Conn: nc}, nil
	}
	// A private transport per dial: no proxy from the environment, no pooled
	// connections to outlive the upgrade, the connector's dialer and TLS config.
	tr := &http.Transport{DialContext: d.DialContext}
	if c.opts.TLS != nil {
		tr.TLSClientConfig = c.opts.TLS.Clone()
	}
	defer tr.CloseIdleConnections()
	ws, _, err := websocket.Dial(ctx, c.ep.url, &websocket.DialOptions{
		HTTPClient: &http.Client{Transport: tr},
	})
	if err != nil {
		return nil, err
	}
	// The NetConn context is the connection's life, not the dial's: shutdown ends it.
	return &transport{Conn: websocket.NetConn(context.Background(), ws, websocket.MessageBinary), ws: ws}, nil
}

// isTLSFailure reports a certificate verification failure on either side of the
// handshake: ours, or the server's certificate alert rejecting our client certificate.
func isTLSFailure(err error) bool {
	var (
		verify    *tls.CertificateVerificationError
		authority x509.UnknownAuthorityError
		hostname  x509.HostnameError
		invalid   x509.CertificateInvalidError
		alert     tls.AlertError
	)
	if errors.As(err, &verify) || errors.As(err, &authority) || errors.As(err, &hostname) || errors.As(err, &invalid) {
		return true
	}
	if errors.As(err, &alert) {
		switch alert {
		case 42, 43, 44, 45, 46, 48, 116: // bad, unsupported, revoked, expired, unknown certificate; unknown CA; certificate required
			return true
		}
	}
	return false
}
