package stream_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/coder/websocket"

	"github.com/meshnode/meshnode/session"
)

// WebSocketOrigins is a security control: a browser page served from another origin
// must not open a session on a node that lists the origins it trusts (cross-site
// WebSocket hijacking). Browsers send the page's origin in the Origin header of the
// upgrade request; these tests send it as a browser would.

func originHeader(origin string) *websocket.DialOptions {
	h := http.Header{}
	h.Set("Origin", origin)
	return &websocket.DialOptions{HTTPHeader: h}
}

func startWithOrigins(t *testing.T, patterns ...string) *testHost {
	t.Helper()
	return startHost(t, nil, session.HostOptions{}, func(b *session.NodeBuilder) {
		b.Bind("ws://127.0.0.1:0/stream")
		if len(patterns) > 0 {
			b.WebSocketOrigins(patterns...)
		}
	})
}

// A page from an origin the node does not list is refused at the handshake (HTTP 403):
// no session is created, no callback runs, and the refusal is counted as a handshake
// failure.
func TestWebSocketOrigins_OtherOriginRefused(t *testing.T) {
	th := startWithOrigins(t, "app.example.com")
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	c, resp, err := websocket.Dial(ctx, th.endpoint(t, "ws"), originHeader("https://evil.example.net"))
	if err == nil {
		_ = c.CloseNow()
		t.Fatal("a page from an unlisted origin opened a session")
	}
	if resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("refusal: %v (response %+v), want HTTP 403", err, resp)
	}
	th.waitMetric(t, mHandshake, 1, tr("ws"))
	if evs := th.rec.snapshot(); len(evs) != 0 {
		t.Errorf("session callbacks ran for a refused origin: %s", describe(evs))
	}
	if v := th.metric(t, mOpened); v != 0 {
		t.Errorf("sessions opened = %d, want 0", v)
	}
}

// A page from a listed origin (exact host or a pattern) opens a session that works.
func TestWebSocketOrigins_ListedOriginAccepted(t *testing.T) {
	th := startWithOrigins(t, "app.example.com", "*.trusted.example")
	for i, origin := range []string{"https://app.example.com", "https://ui.trusted.example"} {
		w := dialWS(t, th.endpoint(t, "ws"), originHeader(origin))
		seq := uint64(i + 1)
		w.writeMsg(request(seq, "echo", `{"ok":true}`))
		w.expectEcho(seq, `{"ok":true}`)
	}
}

// A client that is not a browser sends no Origin header (the Go connector, a game
// client): the origin check does not apply to it, as it has no ambient credentials to
// abuse; STREAM authenticates in-band.
func TestWebSocketOrigins_NonBrowserClientAccepted(t *testing.T) {
	th := startWithOrigins(t, "app.example.com")
	w := dialWS(t, th.endpoint(t, "ws"), nil)
	w.writeMsg(request(1, "echo", `{}`))
	w.expectEcho(1, `{}`)
}

// Without WebSocketOrigins any origin is accepted (documented default): sessions
// authenticate in-band, not with cookies a foreign page could ride on.
func TestWebSocketOrigins_DefaultAcceptsAnyOrigin(t *testing.T) {
	th := startWithOrigins(t)
	w := dialWS(t, th.endpoint(t, "ws"), originHeader("https://elsewhere.example.org"))
	w.writeMsg(request(1, "echo", `{}`))
	w.expectEcho(1, `{}`)
}
