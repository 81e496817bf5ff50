package meshnode_test

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/meshnode/meshnode"
	"github.com/meshnode/meshnode/actor"
	"github.com/meshnode/meshnode/fault"
	"github.com/meshnode/meshnode/mesh"
	"github.com/meshnode/meshnode/session"
	"github.com/meshnode/meshnode/session/connector"
	"github.com/meshnode/meshnode/session/wire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const wait = 10 * time.Second

func quiet(cfg meshnode.Config) meshnode.Config {
	cfg.Logger = slog.New(slog.DiscardHandler)
	return cfg
}

func echoSession(*meshnode.Node) session.SessionType {
	return session.NewMux("echo").Request("echo", func(_ context.Context, p *session.Packet) error {
		return p.Reply(p.Codec, p.Payload)
	}).Type()
}

type answerer struct{}

func (answerer) Receive(ctx *actor.Context) {
	if m, ok := ctx.Message().(*actor.Message); ok {
		_ = ctx.Reply(&actor.Message{Name: "answer", ContentType: m.ContentType, Data: m.Data})
	}
}

// Construction validates: an impossible combination or a bad value fails Start with an
// error of kind InvalidConfiguration (or the kind of what is wrong) that names the
// field, and nothing keeps running (TestMain checks for leaked goroutines).
func TestStart_BadConfigNamesTheField(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	kind := actor.Kind{Name: "k", New: func() actor.Actor { return answerer{} }}
	for _, tc := range []struct {
		name   string
		adjust func(c *meshnode.Config)
		field  string
	}{
		{"UnknownTiming", func(c *meshnode.Config) { c.Timing = mesh.Preset(99) }, "Config.Timing"},
		{"StreamsWithoutSession", func(c *meshnode.Config) { c.Streams = []string{"tcp://127.0.0.1:0"} }, "Config.Session"},
		{"SessionWithoutStreams", func(c *meshnode.Config) { c.Session = echoSession }, "Config.Streams"},
		{"KeyWithoutCertificate", func(c *meshnode.Config) { c.TLSKeyFile = "key.pem" }, "Config.TLSCertFile"},
		{"ClientCAWithoutServerTLS", func(c *meshnode.Config) { c.TLSClientCAFile = "ca.pem" }, "Config.TLSClientCAFile"},
		{"MeshPortOutOfRange", func(c *meshnode.Config) { c.MeshPort = 70000 }, "Config.MeshPort"},
		{"SamePortTwice", func(c *meshnode.Config) { c.MeshPort, c.RemotePort = 7999, 7999 }, "Config.RemotePort"},
		{"KindRegisteredTwice", func(c *meshnode.Config) { c.Kinds = []actor.Kind{kind, kind} }, "Config.Kinds[1]"},
		{"KindWithoutFactory", func(c *meshnode.Config) { c.Kinds = []actor.Kind{{Name: "bare"}} }, "Config.Kinds[0]"},
		{"MessageTypeTwice", func(c *meshnode.Config) {
			c.Messages = []actor.MessageType{actor.MessageOf[struct{ A int }]("m"), actor.MessageOf[struct{ B int }]("m")}
		}, "Messages[1]"},
		{"MessageCodecMissing", func(c *meshnode.Config) {
			c.Messages = []actor.MessageType{actor.MessageOf[struct{ A int }]("m", wire.Codec(9))}
		}, "Messages[0]"},
		{"StreamEndpointBad", func(c *meshnode.Config) {
			c.Streams, c.Session = []string{"udp://127.0.0.1:0"}, echoSession
		}, "Config.Streams"},
		{"StreamPortTaken", func(c *meshnode.Config) {
			c.Streams, c.Session = []string{"tcp://" + taken.Addr().String()}, echoSession
		}, "Config.Streams"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := quiet(meshnode.TestConfig())
			tc.adjust(&cfg)
			n, err := meshnode.Start(context.Background(), cfg)
			if err == nil {
				_ = n.Close()
				t.Fatalf("Start accepted the configuration; want an error naming %s", tc.field)
			}
			if !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("Start: %v; want an error naming %s", err, tc.field)
			}
			if _, ok := fault.Of(err); !ok {
				t.Errorf("Start: %v has no fault kind", err)
			}
		})
	}
}

// A node is usable the moment Start returns: it is live in its own view, so Actors can
// be placed on it and requested at once (no wait loop in the caller).
func TestStart_NodeServesActorsAtOnce(t *testing.T) {
	for i := range 5 {
		cfg := quiet(meshnode.TestConfig())
		cfg.Kinds = []actor.Kind{{Name: "answer", New: func() actor.Actor { return answerer{} }}}
		n, err := meshnode.Start(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if !n.Membership().IsLive(n.ID()) {
			t.Errorf("start %d: the node is not live in its own view", i)
		}
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		v, err := n.Actors().Request(ctx, actor.Address{Kind: "answer", ID: "a"}, actor.Message{Name: "say", Data: []byte("hi")})
		cancel()
		if m, ok := v.(*actor.Message); err != nil || !ok || string(m.Data) != "hi" {
			t.Errorf("start %d: request right after Start: %v %v", i, v, err)
		}
		if err := n.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

// Shutdown drains in order: clients get a session-closing ServerDrain while the node is
// still a member, then the node leaves, and its peers see it as left (not failed).
func TestShutdown_DrainsSessionsThenLeaves(t *testing.T) {
	ctx := context.Background()
	first := quiet(meshnode.TestConfig())
	a, err := meshnode.Start(ctx, first)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	second := quiet(meshnode.TestConfig())
	second.Join = []string{a.Mesh().MeshAddr()}
	second.Streams, second.Session = []string{"tcp://127.0.0.1:0"}, echoSession
	b, err := meshnode.Start(ctx, second)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	until(t, "a sees b", func() bool { return a.Membership().IsLive(b.ID()) })

	// The client records whether b was still a member of a's view when its session
	// ended.
	type closed struct{ stillMember bool }
	got := make(chan closed, 1)
	c, err := connector.New(b.Endpoints()[0], connector.Options{
		Reconnect: connector.ReconnectPolicy{Disabled: true},
		OnStateChange: func(s connector.State) {
			if s == connector.StateClosed || s == connector.StateDisconnected {
				select {
				case got <- closed{stillMember: a.Membership().IsLive(b.ID())}:
				default:
				}
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if err := c.Connect(cctx); err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := c.Request(cctx, "echo", map[string]any{"x": 1}, &out); err != nil {
		t.Fatal(err)
	}

	if err := b.Shutdown(cctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	select {
	case ev := <-got:
		if !ev.stillMember {
			t.Error("the node left the mesh before its sessions were drained")
		}
	case <-time.After(wait):
		t.Fatal("the client was never disconnected")
	}
	until(t, "a sees b as left", func() bool {
		m, ok := a.Membership().Member(b.ID().RID)
		return ok && m.State == mesh.StateLeft
	})
	if err := c.Request(cctx, "echo", map[string]any{"x": 2}, &out); err == nil {
		t.Error("a request after Shutdown succeeded")
	}
}

func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
