package services_test

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/meshnode/meshnode/services"
)

// R11: strict JSON at the boundary, both ways: a non-JSON argument fails at the caller,
// a non-JSON result at the provider, trailing data and the wrong shape are
// invalid_arguments, unknown fields are ignored (contracts stay compatible across
// versions).
func TestR11_StrictJSONBoundaries(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			provider, _, echo, _ := remotePair(t, tr, nil)
			if _, err := echo.BadIn.Call(callCtx(t), Bad{F: math.Inf(1)}); !errors.Is(err, services.ErrInvalidArguments) {
				t.Errorf("a non-JSON argument: %v, want invalid_arguments", err)
			}
			if _, err := echo.BadOut.Call(callCtx(t), struct{}{}); !errors.Is(err, services.ErrInvalidResult) {
				t.Errorf("a non-JSON result: %v, want invalid_result", err)
			}
			conn, _ := tr.connect(t, provider)
			for args, want := range map[string]error{
				`{"text":"a"} {"text":"b"}`:   services.ErrInvalidArguments, // trailing data
				`{"text":5}`:                  services.ErrInvalidArguments, // the wrong shape
				`{text`:                       services.ErrInvalidArguments, // not JSON
				`{"text":"a","unknown":true}`: nil,                          // lenient on fields
			} {
				raw, err := conn.Call(callCtx(t), services.Call{Service: "test.echo", Member: "say", Args: json.RawMessage(args)})
				if want == nil {
					if err != nil || !strings.Contains(string(raw), `"text":"a"`) {
						t.Errorf("args %s: %s %v", args, raw, err)
					}
					continue
				}
				if !errors.Is(err, want) {
					t.Errorf("args %s: %v, want %v", args, err, want)
				}
			}
			if _, err := conn.Call(callCtx(t), services.Call{Service: "test.echo", Member: "nope", Args: json.RawMessage(`{}`)}); !errors.Is(err, services.ErrUnknownMember) {
				t.Errorf("an unknown member: %v", err)
			}
			if _, err := conn.Call(callCtx(t), services.Call{Service: "test.nope", Member: "say"}); !errors.Is(err, services.ErrUnknownService) {
				t.Errorf("an unknown service: %v", err)
			}
			// None of that disturbed the provider.
			if r, err := echo.Say.Call(callCtx(t), SayArgs{Text: "still"}); err != nil || r.Text != "still" {
				t.Errorf("after the bad calls: %+v %v", r, err)
			}
		})
	}
}

// R12: the provider gets a fresh context: none of the caller's values or deadline,
// exactly the client identity the serving host authenticated (under a key no caller
// can write), and a cancellation of its own, which ends the call's context and no
// other.
func TestR12_MethodContextIsReconstructed(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			hs := newHolds()
			provider := newHost(t, "provider", nil, providerFacet("provider", hs))
			conn, _, id := tr.connectAs(t, provider)
			var echo *Echo
			newHost(t, "consumer", []services.Connection{conn}, consumerFacet("c", &echo))
			ctx := context.WithValue(callCtx(t), callerKey{}, "from-caller")
			r, err := echo.Context.Call(ctx, struct{}{})
			if err != nil {
				t.Fatal(err)
			}
			if r.Text != "" {
				t.Errorf("the provider saw the caller's context (values or deadline): %q", r.Text)
			}
			if r.Client != id || id == "" {
				t.Errorf("the provider saw client %q, want the identity the server authenticated, %q", r.Client, id)
			}
			// The call's own cancellation: the caller's cancel ends it at the provider.
			cctx, cancel := context.WithCancel(callCtx(t))
			done := make(chan error, 1)
			go func() { _, err := echo.Hold.Call(cctx, SayArgs{Text: "mine"}); done <- err }()
			<-hs.startedC
			cancel()
			eventually(t, "the call's context ends at the provider", func() bool {
				err, ok := hs.endedWith("mine")
				return ok && errors.Is(err, context.Canceled)
			})
			<-done
		})
	}
}

// R13: cancellation is per request: cancelling one call ends that call's context
// only; a disconnect cancels that connection's calls only; neither touches another
// client's calls.
func TestR13_RequestCancellationIsolated(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			hs := newHolds()
			provider := newHost(t, "provider", nil, providerFacet("provider", hs))
			connA, disconnectA := tr.connect(t, provider)
			connB, _ := tr.connect(t, provider)
			var a, b *Echo
			newHost(t, "a", []services.Connection{connA}, consumerFacet("a", &a))
			newHost(t, "b", []services.Connection{connB}, consumerFacet("b", &b))

			ctxA1, cancelA1 := context.WithCancel(callCtx(t))
			results := make(chan error, 3)
			go func() { _, err := a.Hold.Call(ctxA1, SayArgs{Text: "a1"}); results <- err }()
			go func() { _, err := a.Hold.Call(callCtx(t), SayArgs{Text: "a2"}); results <- err }()
			go func() { _, err := b.Hold.Call(callCtx(t), SayArgs{Text: "b1"}); results <- err }()
			for range 3 {
				<-hs.startedC
			}
			cancelA1()
			if err := <-results; !errors.Is(err, services.ErrCancelled) {
				t.Fatalf("the cancelled call: %v", err)
			}
			eventually(t, "a1's provider context ends", func() bool { err, ok := hs.endedWith("a1"); return ok && errors.Is(err, context.Canceled) })
			if _, ok := hs.endedWith("a2"); ok {
				t.Fatal("cancelling a1 ended a2")
			}
			disconnectA()
			eventually(t, "a disconnect ends a2", func() bool { _, ok := hs.endedWith("a2"); return ok })
			if _, ok := hs.endedWith("b1"); ok {
				t.Fatal("client a's disconnect ended client b's call")
			}
			<-results // a2 failed with its connection
			close(hs.release)
			if err := <-results; err != nil {
				t.Fatalf("b1 after release: %v", err)
			}
			if err, _ := hs.endedWith("b1"); err != nil {
				t.Fatalf("b1 ended with %v", err)
			}
		})
	}
}

// R14: the trace crosses as a W3C carrier in the call frame: the provider's rpc.server
// span is a child of the caller's rpc.client span (same trace); no context value is
// serialised; a malformed carrier gives a root span and the call still succeeds.
func TestR14_TracePropagationWithoutSerialisingContext(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			rec := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
			t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
			provider, err := services.NewHost(context.Background(), services.HostOptions{Name: "provider", Logger: quiet(), TracerProvider: tp}, providerFacet("p", nil))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = provider.Close(context.Background()) })
			conn, _ := tr.connect(t, provider)
			var echo *Echo
			consumer, err := services.NewHost(context.Background(), services.HostOptions{Name: "consumer", Connections: []services.Connection{conn}, Logger: quiet(), TracerProvider: tp}, consumerFacet("c", &echo))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = consumer.Close(context.Background()) })

			ctx, caller := tp.Tracer("test").Start(callCtx(t), "caller")
			if _, err := echo.Say.Call(ctx, SayArgs{Text: "traced"}); err != nil {
				t.Fatal(err)
			}
			caller.End()
			spans := map[string]sdktrace.ReadOnlySpan{}
			for _, s := range rec.Ended() {
				spans[s.Name()] = s
			}
			client, server := spans["rpc.client"], spans["rpc.server"]
			if client == nil || server == nil {
				t.Fatalf("spans %v", spanNames(rec.Ended()))
			}
			if client.Parent().SpanID() != caller.SpanContext().SpanID() {
				t.Error("rpc.client is not a child of the caller's span")
			}
			if server.Parent().SpanID() != client.SpanContext().SpanID() || server.SpanContext().TraceID() != caller.SpanContext().TraceID() {
				t.Error("rpc.server is not a child of rpc.client in the caller's trace")
			}
			if server.SpanKind() != trace.SpanKindServer || client.SpanKind() != trace.SpanKindClient {
				t.Error("span kinds")
			}

			rec2 := len(rec.Ended())
			raw, err := conn.Call(callCtx(t), services.Call{Service: "test.echo", Member: "say", Args: json.RawMessage(`{"text":"x"}`),
				Trace: map[string]string{"traceparent": "00-not-a-trace-context"}})
			if err != nil || !strings.Contains(string(raw), `"x"`) {
				t.Fatalf("a call with a malformed carrier: %s %v", raw, err)
			}
			ended := rec.Ended()[rec2:]
			if len(ended) != 1 || ended[0].Name() != "rpc.server" || ended[0].Parent().IsValid() {
				t.Errorf("after a malformed carrier: %v, want one root rpc.server span", spanNames(ended))
			}
		})
	}
}

// With no TracerProvider (or otel's no-op one) hosts trace nothing and send no trace
// context, even when otel's global provider records: tracing is off unless a host is
// given a provider, as for the STREAM host and the connector.
func TestHost_NoTracerProviderTracesNothingEvenWithAGlobalProvider(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	t.Cleanup(func() { otel.SetTracerProvider(prev) })

	for _, off := range []trace.TracerProvider{nil, tracenoop.NewTracerProvider()} {
		var seen map[string]string
		provider, err := services.NewHost(context.Background(), services.HostOptions{Name: "provider", Logger: quiet(), TracerProvider: off}, providerFacet("p", nil))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = provider.Close(context.Background()) })
		loop := services.NewLoopback(provider, services.Client{ID: "c"})
		t.Cleanup(loop.Close)
		conn := &spyConnection{Connection: loop, trace: &seen}
		var echo *Echo
		consumer, err := services.NewHost(context.Background(), services.HostOptions{Name: "consumer", Connections: []services.Connection{conn}, Logger: quiet(), TracerProvider: off}, consumerFacet("c", &echo))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = consumer.Close(context.Background()) })

		ctx, caller := tp.Tracer("test").Start(callCtx(t), "caller")
		if _, err := echo.Say.Call(ctx, SayArgs{Text: "untraced"}); err != nil {
			t.Fatal(err)
		}
		caller.End()
		if names := spanNames(rec.Ended()); len(names) != 1 || names[0] != "caller" {
			t.Fatalf("provider %T: spans %v, want only the test's own", off, names)
		}
		if len(seen) != 0 {
			t.Fatalf("provider %T: the call carried trace context %v", off, seen)
		}
		rec.Reset()
	}
}

// spyConnection records the trace carrier of the calls made through it.
type spyConnection struct {
	services.Connection
	trace *map[string]string
}

func (s *spyConnection) Call(ctx context.Context, c services.Call) (json.RawMessage, error) {
	*s.trace = c.Trace
	return s.Connection.Call(ctx, c)
}

func spanNames(ss []sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, s := range ss {
		out = append(out, s.Name())
	}
	return out
}
