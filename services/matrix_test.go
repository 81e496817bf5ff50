package services_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/meshnode/meshnode/services"
	"github.com/meshnode/meshnode/session/connector"
	"github.com/meshnode/meshnode/session/wire"
)

// Rows of the plugin notes' supplementary test matrix that part 1 covers.

// One facade is shared by every consumer of a token in a host.
func TestMatrix_OneFacadeSharedByConsumers(t *testing.T) {
	var a, b *Echo
	newHost(t, "shared", nil, providerFacet("p", nil), consumerFacet("a", &a), consumerFacet("b", &b))
	if a != b {
		t.Fatal("two consumers of one token got two facades")
	}
}

// Activation runs only after assembly, providers before consumers (a consumer's
// OnActivate can call its provider), and disposal runs in reverse.
func TestMatrix_ActivationAfterAssemblyDisposalInReverse(t *testing.T) {
	var mu sync.Mutex
	var order []string
	note := func(s string) {
		mu.Lock()
		order = append(order, s)
		mu.Unlock()
	}
	consumer := services.Facet{ID: "consumer", Setup: func(env *services.Env) {
		echo := services.Use(env, EchoToken)
		env.OnActivate(func(ctx context.Context) error {
			r, err := echo.Say.Call(ctx, SayArgs{Text: "activated"})
			note("activate consumer " + r.Text)
			return err
		})
		env.OnDeactivate(func(context.Context) error { note("deactivate consumer"); return nil })
	}}
	provider := services.Facet{ID: "provider", Setup: func(env *services.Env) {
		services.Provide(env, EchoToken, echoImpl("p", nil))
		env.OnActivate(func(context.Context) error { note("activate provider"); return nil })
		env.OnDeactivate(func(context.Context) error { note("deactivate provider"); return nil })
	}}
	h, err := services.NewHost(context.Background(), services.HostOptions{Logger: quiet()}, consumer, provider) // consumer first in setup order
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := "activate provider|activate consumer activated|deactivate consumer|deactivate provider"
	if got := strings.Join(order, "|"); got != want {
		t.Fatalf("order %s, want %s", got, want)
	}
}

// A missing provider fails assembly naming the service and the facet.
func TestMatrix_MissingServiceFails(t *testing.T) {
	_, err := services.NewHost(context.Background(), services.HostOptions{Logger: quiet()},
		services.Facet{ID: "needy", Setup: func(env *services.Env) { services.Use(env, EchoToken) }})
	if !errors.Is(err, services.ErrAssembly) || !strings.Contains(err.Error(), "test.echo") || !strings.Contains(err.Error(), "needy") {
		t.Fatalf("missing provider: %v", err)
	}
}

// A void result crosses as a success with no result; an invocation already aborted
// starts nothing at the provider.
func TestMatrix_VoidResultAndAbortedInvocation(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			var calls atomic.Int64
			provider := newHost(t, "provider", nil, services.Facet{ID: "p", Setup: func(env *services.Env) {
				impl := echoImpl("p", nil)
				impl.Unset = services.Func(func(context.Context, struct{}) (struct{}, error) { calls.Add(1); return struct{}{}, nil })
				services.Provide(env, EchoToken, impl)
			}})
			conn, _ := tr.connect(t, provider)
			raw, err := conn.Call(callCtx(t), services.Call{Service: "test.echo", Member: "unset", Args: json.RawMessage(`{}`)})
			if err != nil || len(raw) != 0 {
				t.Fatalf("a void call: %q %v, want success with no result", raw, err)
			}
			var echo *Echo
			newHost(t, "consumer", []services.Connection{conn}, consumerFacet("c", &echo))
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			if _, err := echo.Unset.Call(ctx, struct{}{}); !errors.Is(err, services.ErrCancelled) {
				t.Fatalf("an aborted invocation: %v", err)
			}
			if n := calls.Load(); n != 1 {
				t.Fatalf("the provider ran %d times, want 1 (the aborted invocation must not start)", n)
			}
		})
	}
}

// Only JSON arguments and the W3C trace context cross: nothing of the caller's
// context, no callback, no telemetry object.
func TestMatrix_OnlyJSONAndTheTraceCarrierCross(t *testing.T) {
	provider := newHost(t, "provider", nil, providerFacet("p", nil))
	rec := &recordingConn{next: services.NewLoopback(provider, services.Client{ID: "rec"})}
	var echo *Echo
	newHost(t, "consumer", []services.Connection{rec}, consumerFacet("c", &echo))
	ctx := context.WithValue(callCtx(t), callerKey{}, "secret-value")
	if _, err := echo.Say.Call(ctx, SayArgs{Text: "x"}); err != nil {
		t.Fatal(err)
	}
	c := rec.last
	if string(c.Args) != `{"text":"x"}` || strings.Contains(string(c.Args), "secret") {
		t.Errorf("arguments on the wire: %s", c.Args)
	}
	for k := range c.Trace {
		if k != "traceparent" && k != "tracestate" {
			t.Errorf("carrier key %q crossed", k)
		}
	}
}

type recordingConn struct {
	next services.Connection
	last services.Call
}

func (r *recordingConn) Catalogue(ctx context.Context) (services.Catalogue, error) {
	return r.next.Catalogue(ctx)
}
func (r *recordingConn) Call(ctx context.Context, c services.Call) (json.RawMessage, error) {
	r.last = c
	return r.next.Call(ctx, c)
}

// A worker's node failing leaves the server's services healthy: the session call in
// flight fails session_unavailable, server calls go on, and the presentation is
// attached again to a replacement worker on a survivor (a fresh attachment, fresh
// state: nothing of the dead worker's memory survives).
func TestMatrix_WorkerFailureLeavesServerServicesHealthy(t *testing.T) {
	f := startSvcFleet(t, 3, nil)
	w := f.workerOn(t, 2, "doomed-")
	p := f.present(t, 0, "stream")
	p.create(t, w)
	first := p.attach(t, w)
	if _, err := p.counter.Add.Call(callCtx(t), AddArgs{N: 5}); err != nil {
		t.Fatal(err)
	}
	notices := make(chan string, 16)
	p.stream.Handle(services.NameAttachment, func(m connector.Message) {
		var n struct{ State, Attachment string }
		_ = json.Unmarshal(m.Payload, &n)
		notices <- n.State + " " + n.Attachment
	})
	held := make(chan error, 1)
	go func() { _, err := p.counter.Hold.Call(callCtx(t), SayArgs{Text: "doomed"}); held <- err }()
	waitStarted(t, f.hs, "doomed")
	f.Kill(2)
	if err := <-held; !errors.Is(err, services.ErrSessionUnavailable) {
		t.Fatalf("the call in flight on the dead worker: %v, want session_unavailable", err)
	}
	if d, err := p.info.Describe.Call(callCtx(t), struct{}{}); err != nil || d.Node != f.Node(0).ID().RID {
		t.Errorf("the server service after the worker's node died: %+v %v", d, err)
	}
	for {
		n := <-notices
		if strings.HasPrefix(n, services.AttachmentAttached+" ") {
			if n == services.AttachmentAttached+" "+first.Attachment {
				t.Fatal("the replacement reused the attachment id")
			}
			break
		}
	}
	if v, err := p.counter.Add.Call(callCtx(t), AddArgs{N: 1}); err != nil || v.Value != 1 {
		t.Fatalf("a call to the replacement worker: %+v %v, want a fresh count of 1", v, err)
	}
}

// A presentation's disconnect reaches the worker: its calls there are cancelled, and
// its attachment ends there (the worker's client-detach callback runs).
func TestMatrix_PresentationDisconnectReachesTheWorker(t *testing.T) {
	f := startSvcFleet(t, 2, nil)
	w := f.workerOn(t, 1, "left-")
	c, closeC := connectStreamTo(t, f.Node(0).Endpoints()[0])
	conn := services.NewStreamConnection(c)
	cr, _ := json.Marshal(services.CreateArgs{Session: w})
	if _, err := conn.Call(callCtx(t), services.Call{Service: "meshnode.session-management", Member: "create", Args: cr}); err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(services.AttachArgs{Session: w})
	if _, err := conn.Call(callCtx(t), services.Call{Service: "meshnode.session-management", Member: "attach", Args: a}); err != nil {
		t.Fatal(err)
	}
	go func() {
		_, _ = c.RequestRaw(callCtx(t), services.NameCall, wire.CodecJSON, []byte(`{"text":"gone"}`),
			withMeta("svc", "test.counter"), withMeta("member", "hold"), withMeta("rid", "7"), withMeta("scope", "session"))
	}()
	<-f.hs.startedC
	closeC()
	eventually(t, "the worker cancels the gone presentation's call", func() bool {
		err, ok := f.hs.endedWith("gone")
		return ok && errors.Is(err, context.Canceled)
	})
	eventually(t, "the worker's client-detach callback runs", func() bool { return f.clients.live(f.Node(1).ID().RID) == 0 })
}
