package stream_test

import (
	"context"
	"errors"
	"testing"

	"github.com/meshnode/meshnode/fault"
	"github.com/meshnode/meshnode/session"
	"github.com/meshnode/meshnode/session/wire"
)

// startMux starts a host whose node serves mux.
func startMux(t *testing.T, mux *session.Mux) *testHost {
	t.Helper()
	mp, reader := newMeter(t)
	h := newHost(session.HostOptions{MeterProvider: mp, Logger: quietLogger()})
	h.AddStreamNode("gw").Bind("tcp://127.0.0.1:0").Session(mux.Type())
	if err := h.Start(context.Background()); err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() { _ = h.Close() })
	return &testHost{h: h, reader: reader, node: h.Node("gw"), rec: newRecorder()}
}

// The packet router: exact routes by kind, the longest prefix, the fallback, and
// handler errors answered with the code of their fault kind.
func TestMux_RoutesAndErrorCodes(t *testing.T) {
	sent := make(chan string, 4)
	mux := session.NewMux("router").
		Request("echo", func(_ context.Context, p *session.Packet) error { return p.Reply(p.Codec, p.Payload) }).
		Send("echo", func(ctx context.Context, p *session.Packet) error {
			return p.Peer.Send(ctx, "echoed", p.Codec, p.Payload)
		}).
		Request("busy", func(context.Context, *session.Packet) error {
			return fault.Errorf(fault.CapacityExceeded, "too busy")
		}).
		Request("plain", func(context.Context, *session.Packet) error { return errors.New("secret detail") }).
		Prefix("room.", func(_ context.Context, p *session.Packet) error {
			if p.IsRequest() {
				return p.ReplyValue(map[string]string{"route": "room."})
			}
			sent <- p.Name
			return nil
		}).
		Prefix("room.vip.", func(_ context.Context, p *session.Packet) error {
			return p.ReplyValue(map[string]string{"route": "room.vip."})
		})
	th := startMux(t, mux)
	c := th.dial(t)

	write(t, c, request(1, "echo", `{"a":1}`))
	if f := readFrame(t, c); f.Header.Kind != wire.KindResponse || string(f.Payload) != `{"a":1}` {
		t.Fatalf("echo: %s %s", kindName(f.Header.Kind), f.Payload)
	}
	write(t, c, send("echo", `{"b":2}`))
	if f := readFrame(t, c); f.Header.Kind != wire.KindSend || f.Header.Name != "echoed" {
		t.Fatalf("send echo: %s %q", kindName(f.Header.Kind), f.Header.Name)
	}
	for _, tc := range []struct {
		name, code, msg string
	}{
		{"busy", "capacity_exceeded", "too busy"},
		{"plain", "internal_failure", "internal failure"},
		{"nobody", "not_found", "no handler for packet nobody"},
	} {
		write(t, c, request(2, tc.name, `{}`))
		f := readFrame(t, c)
		if f.Header.Kind != wire.KindError || string(f.Payload) != `{"code":"`+tc.code+`","message":"`+tc.msg+`"}` {
			t.Errorf("%s: %s %s", tc.name, kindName(f.Header.Kind), f.Payload)
		}
	}
	write(t, c, request(3, "room.vip.x", `{}`))
	if f := readFrame(t, c); string(f.Payload) != `{"route":"room.vip."}` {
		t.Errorf("longest prefix: %s", f.Payload)
	}
	write(t, c, request(4, "room.x", `{}`))
	if f := readFrame(t, c); string(f.Payload) != `{"route":"room."}` {
		t.Errorf("prefix: %s", f.Payload)
	}
	write(t, c, send("room.say", `{}`))
	if got := <-sent; got != "room.say" {
		t.Errorf("prefix Send: %q", got)
	}
}

// Seed §3.2: a duplicate dispatch key (stream node, session type, packet name) is a
// start-up error; nothing is bound.
func TestMux_DuplicateRouteFailsStartup(t *testing.T) {
	h := func(context.Context, *session.Packet) error { return nil }
	for _, mux := range []*session.Mux{
		session.NewMux("dup").Request("x", h).Request("x", h),
		session.NewMux("dup").Send("x", h).Send("x", h),
		session.NewMux("dup").Prefix("p.", h).Prefix("p.", h),
	} {
		host := newHost(session.HostOptions{Logger: quietLogger()})
		host.AddStreamNode("gw").Bind("tcp://127.0.0.1:0").Session(mux.Type())
		err := host.Start(context.Background())
		_ = host.Close()
		if !errors.Is(err, session.ErrDuplicateRoute) || !errors.Is(err, session.ErrConfiguration) {
			t.Errorf("start with a duplicate route: %v", err)
		}
	}
	// The same name as a Request and as a Send are two dispatch keys.
	ok := session.NewMux("ok").Request("x", h).Send("x", h)
	host := newHost(session.HostOptions{Logger: quietLogger()})
	host.AddStreamNode("gw").Bind("tcp://127.0.0.1:0").Session(ok.Type())
	if err := host.Start(context.Background()); err != nil {
		t.Errorf("Request x and Send x: %v", err)
	}
	_ = host.Close()
}
