package stream_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/meshnode/meshnode/fault"
	"github.com/meshnode/meshnode/session"
	"github.com/meshnode/meshnode/session/connector"
	"github.com/meshnode/meshnode/session/wire"
)

// The seed §10 items that need the Stream Connector, run against the real server.

// authApp is a session behaviour that authenticates in-band (digest §4.8: there is no
// framework handshake; the session callback authenticates from ordinary packets).
type authApp struct {
	mu    sync.Mutex
	users map[session.RoutingID]string // authenticated user per connection
	held  map[string]*session.Packet   // requests parked without a reply, by name
	seen  chan *session.Packet         // every packet, for the test
}

func newAuthApp() *authApp {
	return &authApp{users: map[session.RoutingID]string{}, held: map[string]*session.Packet{}, seen: make(chan *session.Packet, 256)}
}

type authReq struct {
	User  string `json:"user"`
	Token string `json:"token"`
}

type whoami struct {
	User string `json:"user"`
	RID  uint32 `json:"rid"`
	Node string `json:"node"`
}

func (a *authApp) onPacket(ctx context.Context, p *session.Packet) error {
	a.seen <- p
	a.mu.Lock()
	user := a.users[p.RoutingID()]
	a.mu.Unlock()
	switch p.Name {
	case "auth":
		var r authReq
		if err := p.Decode(&r); err != nil {
			return session.Errorf(fault.TypeMismatch.Code(), "bad auth payload")
		}
		if r.Token != "secret-"+r.User {
			return session.Errorf(fault.Rejected.Code(), "bad credentials")
		}
		a.mu.Lock()
		a.users[p.RoutingID()] = r.User
		a.mu.Unlock()
		return p.ReplyValue(whoami{User: r.User, RID: uint32(p.RoutingID()), Node: p.Peer.Node()})
	}
	if user == "" {
		if p.IsRequest() {
			return session.Errorf(fault.Rejected.Code(), "authenticate first")
		}
		return nil
	}
	switch p.Name {
	case "whoami":
		return p.ReplyValue(whoami{User: user, RID: uint32(p.RoutingID()), Node: p.Peer.Node()})
	case "note":
		return p.Peer.SendValue(ctx, "noted", wire.CodecJSON, map[string]string{"by": user, "note": string(p.Payload)})
	case "hang":
		a.mu.Lock()
		a.held[p.Name] = p
		a.mu.Unlock()
		return nil
	}
	return echo(ctx, p)
}

func (a *authApp) waitPacket(t testing.TB, name string) *session.Packet {
	t.Helper()
	timeout := time.After(waitLong)
	for {
		select {
		case p := <-a.seen:
			if p.Name == name {
				return p
			}
		case <-timeout:
			t.Fatalf("packet %q never reached the session", name)
			return nil
		}
	}
}

func newConnector(t testing.TB, endpoint string, opts connector.Options) *connector.Connector {
	t.Helper()
	opts.NoCallerReads = opts.NoCallerReads || slowPaths()
	c, err := connector.New(endpoint, opts)
	mustNotErr(t, err, "connector.New")
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	mustNotErr(t, c.Connect(ctx), "Connect "+endpoint)
	return c
}

// Seed §10 "When the connector authenticates and sends a packet, authentication and
// packet dispatch complete on the session node." Over every transport.
func TestSeed10_ConnectorAuthenticatesAndDispatchesOnSessionNode(t *testing.T) {
	p := testPKI(t)
	_, cert, key := tlsFiles(t)
	app := newAuthApp()
	rec := newRecorder()
	rec.onPacket = app.onPacket
	th := startHost(t, rec, session.HostOptions{}, func(b *session.NodeBuilder) {
		b.Bind("tcp://127.0.0.1:0").Bind("ws://127.0.0.1:0/s").Bind("tls://127.0.0.1:0").Bind("wss://127.0.0.1:0/s").TLSServer(cert, key)
	})
	tlsCfg := &tls.Config{RootCAs: certPool(t, p.CACert), ServerName: "127.0.0.1"}
	for _, scheme := range []string{"tcp", "ws", "tls", "wss"} {
		t.Run(scheme, func(t *testing.T) {
			opts := connector.Options{
				Heartbeat: connector.HeartbeatOptions{Interval: 20 * time.Millisecond, Timeout: waitLong},
				Reconnect: connector.ReconnectPolicy{Disabled: true},
			}
			if scheme == "tls" || scheme == "wss" {
				opts.TLS = tlsCfg
			}
			notes := make(chan connector.Message, 1)
			c := newConnector(t, th.endpoint(t, scheme), opts)
			c.Handle("noted", func(m connector.Message) { notes <- m })
			ctx, cancel := context.WithTimeout(context.Background(), waitLong)
			defer cancel()

			// Before authentication the session refuses.
			var remote *connector.RemoteError
			if err := c.Request(ctx, "whoami", struct{}{}, nil); !errors.As(err, &remote) || remote.Code != fault.Rejected.Code() {
				t.Fatalf("whoami before auth: %v", err)
			}
			if err := c.Request(ctx, "auth", authReq{User: "ana", Token: "wrong"}, nil); !errors.As(err, &remote) || remote.Code != fault.Rejected.Code() {
				t.Fatalf("auth with a bad token: %v", err)
			}
			app.waitPacket(t, "auth") // the refused one
			var me whoami
			mustNotErr(t, c.Request(ctx, "auth", authReq{User: "ana", Token: "secret-ana"}, &me, connector.WithMetadata("client", "go")), "auth")
			authPkt := app.waitPacket(t, "auth")
			if me.User != "ana" || me.Node != "gw" || me.RID != uint32(authPkt.RoutingID()) {
				t.Errorf("auth reply %+v; dispatched on node %q rid %d", me, authPkt.Peer.Node(), authPkt.RoutingID())
			}
			if authPkt.Peer.Transport() != scheme {
				t.Errorf("auth dispatched over %q", authPkt.Peer.Transport())
			}
			// The connector's request header reached the dispatch context whole.
			if v, _ := authPkt.Metadata.Get("client"); v != "go" || authPkt.CorrelationID == "" ||
				authPkt.FlowOrigin != wire.FlowApplication || len(authPkt.FlowID) != 36 || authPkt.RequestSeq == 0 {
				t.Errorf("auth dispatch context: md %v corr %q flow %q/%d seq %d",
					authPkt.Metadata, authPkt.CorrelationID, authPkt.FlowID, authPkt.FlowOrigin, authPkt.RequestSeq)
			}

			// Dispatch after authentication completes on the same session.
			var again whoami
			mustNotErr(t, c.Request(ctx, "whoami", struct{}{}, &again), "whoami")
			if again != me {
				t.Errorf("whoami %+v, want %+v", again, me)
			}
			mustNotErr(t, c.Send(ctx, "note", "hello"), "Send note")
			select {
			case m := <-notes:
				var got map[string]string
				mustNotErr(t, m.Decode(&got), "decode noted")
				if got["by"] != "ana" || got["note"] != `"hello"` {
					t.Errorf("noted push %v", got)
				}
			case <-time.After(waitLong):
				t.Fatal("no push after the note")
			}
			if n := app.waitPacket(t, "note"); n.RoutingID() != authPkt.RoutingID() || n.Kind != wire.KindSend {
				t.Errorf("note dispatched on rid %d (%s), auth on %d", n.RoutingID(), kindName(n.Kind), authPkt.RoutingID())
			}
		})
	}
}

// Seed §10 "Terminating the stream fails a pending request, and messaging resumes after
// authenticating and binding on a new session."
func TestSeed10_StreamTerminationFailsPendingAndNewSessionResumes(t *testing.T) {
	app := newAuthApp()
	rec := newRecorder()
	rec.onPacket = app.onPacket
	th := startHost(t, rec, session.HostOptions{}, nil)
	states := make(chan connector.State, 64)
	c := newConnector(t, th.endpoint(t, "tcp"), connector.Options{
		Heartbeat:     connector.HeartbeatOptions{Disabled: true},
		Reconnect:     connector.ReconnectPolicy{InitialDelay: 20 * time.Millisecond, MaxDelay: 100 * time.Millisecond},
		OnStateChange: func(s connector.State) { states <- s },
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*waitLong)
	defer cancel()
	var first whoami
	mustNotErr(t, c.Request(ctx, "auth", authReq{User: "bo", Token: "secret-bo"}, &first), "auth")

	pending := make(chan error, 1)
	go func() { pending <- c.Request(ctx, "hang", struct{}{}, nil) }()
	hang := app.waitPacket(t, "hang")

	// The server terminates the stream.
	mustNotErr(t, hang.Peer.Close(wire.CloseServerDrain, "terminated by test"), "Peer.Close")
	var err error
	select {
	case err = <-pending:
	case <-time.After(waitLong):
		t.Fatal("the pending request did not fail when the stream ended")
	}
	var ce *connector.CloseError
	if !errors.Is(err, connector.ErrDisconnected) || !errors.As(err, &ce) || ce.Reason != wire.CloseServerDrain {
		t.Fatalf("pending request: %v; want a CloseError(ServerDrain)", err)
	}
	if ce.Diagnostic != "terminated by test" {
		t.Errorf("diagnostic %q", ce.Diagnostic)
	}
	// A reply to the old request, if the app still sent one, goes nowhere.
	if err := hang.Reply(wire.CodecJSON, []byte(`{}`)); !errors.Is(err, session.ErrSessionClosed) {
		t.Errorf("reply on the terminated session: %v", err)
	}
	th.rec.waitFor(t, waitLong, "disconnect", func(evs []event) bool {
		return count(evs, evDisconnect, hang.RoutingID()) == 1
	})

	// The connector reconnects on its own: a brand-new session.
	waitConnState(t, states, connector.StateReconnecting)
	waitConnState(t, states, connector.StateConnected)
	var remote *connector.RemoteError
	if err := c.Request(ctx, "whoami", struct{}{}, nil); !errors.As(err, &remote) || remote.Code != fault.Rejected.Code() {
		t.Fatalf("whoami on the new session before auth: %v (the old authentication must not carry over)", err)
	}
	var second whoami
	mustNotErr(t, c.Request(ctx, "auth", authReq{User: "bo", Token: "secret-bo"}, &second), "re-auth")
	if second.RID == first.RID {
		t.Errorf("new session reuses routing id %d", first.RID)
	}
	var me whoami
	mustNotErr(t, c.Request(ctx, "whoami", struct{}{}, &me), "whoami after re-auth")
	if me != second {
		t.Errorf("whoami %+v, want %+v", me, second)
	}
	reply, err := c.RequestRaw(ctx, "echo", wire.CodecJSON, []byte(`{"resumed":true}`))
	mustNotErr(t, err, "echo")
	if string(reply.Payload) != `{"resumed":true}` {
		t.Errorf("echo %q", reply.Payload)
	}
	// The pending request was never resent.
	if n := len(packetsNamed(th.rec.snapshot(), "hang")); n != 1 {
		t.Errorf("hang reached the server %d times; a failed request must not be resent", n)
	}
}

func waitConnState(t testing.TB, states <-chan connector.State, want connector.State) {
	t.Helper()
	timeout := time.After(waitLong)
	for {
		select {
		case s := <-states:
			if s == want {
				return
			}
		case <-timeout:
			t.Fatalf("connector never reached %v", want)
		}
	}
}

// Connector and server agree on compression in both directions, and on server pushes.
func TestConnector_CompressionAndPush(t *testing.T) {
	rec := newRecorder()
	rec.onPacket = func(ctx context.Context, p *session.Packet) error {
		switch p.Name {
		case "zip":
			return p.Reply(p.Codec, p.Payload, session.Compressed())
		case "push-me":
			return p.Peer.Send(ctx, "pushed", p.Codec, p.Payload, session.Compressed())
		}
		return echo(ctx, p)
	}
	th := startHost(t, rec, session.HostOptions{}, nil)
	c := newConnector(t, th.endpoint(t, "tcp"), connector.Options{
		Heartbeat: connector.HeartbeatOptions{Disabled: true},
		Reconnect: connector.ReconnectPolicy{Disabled: true},
	})
	pushed := make(chan connector.Message, 1)
	c.Handle("pushed", func(m connector.Message) { pushed <- m })
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	plain := bytes.Repeat([]byte("abcdefgh"), 2000)
	reply, err := c.RequestRaw(ctx, "zip", wire.CodecRaw, plain, connector.WithCompression())
	mustNotErr(t, err, "zip")
	if !bytes.Equal(reply.Payload, plain) {
		t.Errorf("zip reply %d bytes", len(reply.Payload))
	}
	evs := rec.waitFor(t, waitLong, "zip packet", func(evs []event) bool { return len(packetsNamed(evs, "zip")) == 1 })
	if got := packetsNamed(evs, "zip")[0].pkt.Payload; !bytes.Equal(got, plain) {
		t.Errorf("server saw %d bytes, want the decompressed %d", len(got), len(plain))
	}
	mustNotErr(t, c.SendRaw(ctx, "push-me", wire.CodecRaw, plain, connector.WithCompression()), "push-me")
	select {
	case m := <-pushed:
		if !bytes.Equal(m.Payload, plain) {
			t.Errorf("push %d bytes", len(m.Payload))
		}
	case <-time.After(waitLong):
		t.Fatal("no push")
	}
}

// Host.Shutdown reaches the connector as session-closing ServerDrain: its pending
// requests fail with that reason and CloseReason reports it.
func TestConnector_ShutdownIsServerDrain(t *testing.T) {
	app := newAuthApp()
	rec := newRecorder()
	rec.onPacket = app.onPacket
	th := startHost(t, rec, session.HostOptions{}, nil)
	c := newConnector(t, th.endpoint(t, "tcp"), connector.Options{
		Heartbeat: connector.HeartbeatOptions{Disabled: true},
		Reconnect: connector.ReconnectPolicy{Disabled: true},
	})
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	mustNotErr(t, c.Request(ctx, "auth", authReq{User: "cy", Token: "secret-cy"}, nil), "auth")
	pending := make(chan error, 1)
	go func() { pending <- c.Request(ctx, "hang", struct{}{}, nil) }()
	app.waitPacket(t, "hang")
	mustNotErr(t, th.h.Shutdown(ctx), "Shutdown")
	err := <-pending
	var ce *connector.CloseError
	if !errors.As(err, &ce) || ce.Reason != wire.CloseServerDrain {
		t.Fatalf("pending request after Shutdown: %v, want CloseError(ServerDrain)", err)
	}
	if !eventually(waitLong, func() bool {
		return c.CloseReason() == wire.CloseServerDrain && c.State() == connector.StateDisconnected
	}) {
		t.Errorf("connector state %v reason %v", c.State(), c.CloseReason())
	}
}
