package services_test

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/meshnode/meshnode/internal/testkit"
	"github.com/meshnode/meshnode/services"
	"github.com/meshnode/meshnode/session"
	"github.com/meshnode/meshnode/session/connector"
	"github.com/meshnode/meshnode/session/wire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const wait = 10 * time.Second

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// The contract the tests use.

type SayArgs struct {
	Text string `json:"text"`
}

type SayReply struct {
	Text   string `json:"text"`
	By     string `json:"by"`
	Client string `json:"client,omitempty"`
}

type Bad struct {
	F float64 `json:"f"`
}

type Echo struct {
	Say     services.Method[SayArgs, SayReply]
	Hold    services.Method[SayArgs, struct{}]  // a Task: waits until its context ends or the test releases it
	BadIn   services.Method[Bad, struct{}]      // takes a float (NaN is not JSON)
	BadOut  services.Method[struct{}, Bad]      // answers a value that is not JSON (NaN)
	Unset   services.Method[struct{}, struct{}] // never implemented
	Context services.Method[struct{}, SayReply] // reports what the endpoint's context holds
}

var EchoToken = services.Define("test.echo", func(d *services.Describer, e *Echo) {
	services.DescribeMethod(d, "say", &e.Say)
	services.DescribeMethod(d, "hold", &e.Hold)
	services.DescribeMethod(d, "badIn", &e.BadIn)
	services.DescribeMethod(d, "badOut", &e.BadOut)
	services.DescribeMethod(d, "unset", &e.Unset)
	services.DescribeMethod(d, "context", &e.Context)
})

// SecretToken is process-local: never published.
var SecretToken = services.Define("test.secret", func(d *services.Describer, e *Echo) {
	services.DescribeMethod(d, "say", &e.Say)
}, services.LocalOnly())

type callerKey struct{}

// holds records what Hold calls saw: each call's context end, by the call's tag, and
// lets a test release them.
type holds struct {
	mu       sync.Mutex
	started  map[string]int
	ended    map[string]error
	release  chan struct{}
	startedC chan string
}

func newHolds() *holds {
	return &holds{started: map[string]int{}, ended: map[string]error{}, release: make(chan struct{}), startedC: make(chan string, 64)}
}

func (h *holds) endedWith(client string) (error, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	err, ok := h.ended[client]
	return err, ok
}

// echoImpl is a provider named by: its Say answers {text, by}.
func echoImpl(by string, hs *holds) *Echo {
	return &Echo{
		Say: services.Func(func(ctx context.Context, in SayArgs) (SayReply, error) {
			if in.Text == "fail" {
				return SayReply{}, services.Errorf("test_failure", "asked to fail")
			}
			if in.Text == "boom" {
				return SayReply{}, errors.New("open /secret/file: permission denied")
			}
			c, _ := services.ClientOf(ctx)
			return SayReply{Text: in.Text, By: by, Client: c.ID}, nil
		}),
		Hold: services.Task(func(ctx context.Context, in SayArgs) (struct{}, error) {
			c := struct{ ID string }{in.Text} // calls are told apart by their tag
			if hs != nil {
				hs.mu.Lock()
				hs.started[c.ID]++
				hs.mu.Unlock()
				hs.startedC <- c.ID
				select {
				case <-ctx.Done():
					hs.mu.Lock()
					hs.ended[c.ID] = ctx.Err()
					hs.mu.Unlock()
					return struct{}{}, ctx.Err()
				case <-hs.release:
				}
				hs.mu.Lock()
				hs.ended[c.ID] = nil
				hs.mu.Unlock()
			}
			return struct{}{}, nil
		}),
		BadIn:  services.Func(func(context.Context, Bad) (struct{}, error) { return struct{}{}, nil }),
		BadOut: services.Func(func(context.Context, struct{}) (Bad, error) { return Bad{F: math.NaN()}, nil }),
		Context: services.Func(func(ctx context.Context, _ struct{}) (SayReply, error) {
			c, ok := services.ClientOf(ctx)
			v, _ := ctx.Value(callerKey{}).(string)
			r := SayReply{Text: v, By: by}
			if ok {
				r.Client = c.ID
			}
			if _, has := ctx.Deadline(); has {
				r.Text += "+deadline"
			}
			return r, nil
		}),
	}
}

func providerFacet(by string, hs *holds) services.Facet {
	return services.Facet{ID: "echo-provider", Setup: func(env *services.Env) {
		services.Provide(env, EchoToken, echoImpl(by, hs))
	}}
}

// consumerFacet captures the facade it gets in setup into *out.
func consumerFacet(id string, out **Echo) services.Facet {
	return services.Facet{ID: id, Setup: func(env *services.Env) { *out = services.Use(env, EchoToken) }}
}

func newHost(t *testing.T, name string, conns []services.Connection, facets ...services.Facet) *services.Host {
	t.Helper()
	h, err := services.NewHost(context.Background(), services.HostOptions{Name: name, Connections: conns, Logger: quiet()}, facets...)
	if err != nil {
		t.Fatalf("host %s: %v", name, err)
	}
	t.Cleanup(func() { _ = h.Close(context.Background()) })
	return h
}

// transport is one way for a consumer host to reach a provider host.
type transport struct {
	name string
	// connectAs returns a connection to provider as a new client, its disconnect, and
	// the identity the provider authenticated it as.
	connectAs func(t *testing.T, provider *services.Host) (services.Connection, func(), string)
}

// connect returns a connection to provider as a new client, and its disconnect.
func (tr transport) connect(t *testing.T, provider *services.Host) (services.Connection, func()) {
	c, d, _ := tr.connectAs(t, provider)
	return c, d
}

var transports = []transport{
	{"loopback", func(t *testing.T, p *services.Host) (services.Connection, func(), string) {
		id := "loop-" + t.Name()
		l := services.NewLoopback(p, services.Client{ID: id, Transport: "loopback"})
		t.Cleanup(l.Close)
		return l, l.Close, id
	}},
	{"stream", connectStreamAs},
}

// streamServers serves each provider host once over a STREAM node.
var streamServers sync.Map // *services.Host → endpoint string

func connectStream(t *testing.T, p *services.Host) (services.Connection, func()) {
	c, d, _ := connectStreamAs(t, p)
	return c, d
}

func connectStreamAs(t *testing.T, p *services.Host) (services.Connection, func(), string) {
	t.Helper()
	ep, ok := streamServers.Load(p)
	if !ok {
		srv := services.NewStreamServer(p, nil)
		h := session.NewHost(session.HostOptions{Logger: quiet()})
		// whoami answers the identity the server authenticated the session as.
		mux := session.NewMux("svc").Request("whoami", func(_ context.Context, pk *session.Packet) error {
			return pk.ReplyValue(map[string]string{"id": pk.Peer.Node() + "/" + strconv.FormatUint(uint64(pk.Peer.RoutingID()), 10)})
		}).Request("bye", func(_ context.Context, pk *session.Packet) error {
			// The server drops the connection (a drain): the client reconnects.
			_ = pk.ReplyValue(map[string]string{})
			return pk.Peer.Close(wire.CloseServerDrain, "bye")
		})
		h.AddStreamNode("svc").Bind("tcp://127.0.0.1:0").Session(srv.Routes(mux).Type())
		if err := h.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = h.Close(); streamServers.Delete(p) })
		ep = h.Node("svc").Endpoints()[0]
		streamServers.Store(p, ep)
	}
	c, closeC := connectStreamTo(t, ep.(string))
	var who struct{ ID string }
	if err := c.Request(callCtx(t), "whoami", map[string]any{}, &who); err != nil {
		t.Fatal(err)
	}
	return services.NewStreamConnection(c), closeC, who.ID
}

// connectStreamTo dials a connector to endpoint; it closes with the test.
func connectStreamTo(t *testing.T, endpoint string) (*connector.Connector, func()) {
	t.Helper()
	c := testkit.DialConnector(t, endpoint, wait)
	t.Cleanup(func() { _ = c.Close() })
	return c, func() { _ = c.Close() }
}

// remotePair starts a provider host and a consumer host connected to it over tr; the
// consumer's facade of EchoToken is returned.
func remotePair(t *testing.T, tr transport, hs *holds) (provider, consumer *services.Host, echo *Echo, disconnect func()) {
	t.Helper()
	provider = newHost(t, "provider", nil, providerFacet("provider", hs))
	conn, disconnect := tr.connect(t, provider)
	consumer = newHost(t, "consumer", []services.Connection{conn}, consumerFacet("echo-user", &echo))
	return provider, consumer, echo, disconnect
}

func callCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	t.Cleanup(cancel)
	return ctx
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testkit.Eventually(t, wait, what, cond)
}
