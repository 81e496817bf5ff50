package services_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/meshnode/meshnode/services"
	"github.com/meshnode/meshnode/session/connector"
	"github.com/meshnode/meshnode/session/wire"
)

// failedCalls reads meshnode.services.calls.failed by code.
func failedCalls(t *testing.T, r *sdkmetric.ManualReader) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "meshnode.services.calls.failed" {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				code, _ := dp.Attributes.Value(attribute.Key("code"))
				out[code.AsString()] += dp.Value
			}
		}
	}
	return out
}

// Bad input from a client (an unknown service or member, arguments of the wrong
// shape, a reused request id, a cancel naming another client's request) gets a typed
// error with a stable code, is counted by code, and disturbs neither another client's
// call in flight nor the provider.
func TestBadInput_TypedCountedAndHarmless(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	hs := newHolds()
	provider, err := services.NewHost(context.Background(), services.HostOptions{Name: "provider", Logger: quiet(), MeterProvider: mp}, providerFacet("p", hs))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = provider.Close(context.Background()) })
	t.Cleanup(func() { closeOnce(hs.release) })

	good, _ := connectStream(t, provider)
	var goodEcho *Echo
	newHost(t, "good", []services.Connection{good}, consumerFacet("good", &goodEcho))
	held := make(chan error, 1)
	go func() { _, err := goodEcho.Hold.Call(callCtx(t), SayArgs{Text: "good"}); held <- err }()
	<-hs.startedC

	// The hostile client speaks the frames by hand.
	ep, _ := streamServers.Load(provider)
	c := connectorTo(t, ep.(string))
	call := func(meta map[string]string, args string) error {
		opts := []connector.CallOption{}
		for k, v := range meta {
			opts = append(opts, connector.WithMetadata(k, v))
		}
		_, err := c.RequestRaw(callCtx(t), services.NameCall, wire.CodecJSON, []byte(args), opts...)
		var re *connector.RemoteError
		if errors.As(err, &re) {
			return &services.Error{Code: re.Code, Message: re.Message}
		}
		return err
	}
	for _, tc := range []struct {
		meta map[string]string
		args string
		want error
	}{
		{map[string]string{"svc": "test.nope", "member": "say", "rid": "1"}, `{}`, services.ErrUnknownService},
		{map[string]string{"svc": "test.echo", "member": "nope", "rid": "2"}, `{}`, services.ErrUnknownMember},
		{map[string]string{"svc": "test.echo", "member": "say", "rid": "3"}, `{"text":[1]}`, services.ErrInvalidArguments},
		{map[string]string{"svc": "test.echo", "member": "say"}, `{}`, services.ErrInvalidArguments}, // no request id
		{map[string]string{"svc": "test.secret", "member": "say", "rid": "4"}, `{}`, services.ErrUnknownService},
	} {
		if err := call(tc.meta, tc.args); !errors.Is(err, tc.want) {
			t.Errorf("%v %s: %v, want %v", tc.meta, tc.args, err, tc.want)
		}
	}
	// A cancel naming request ids it does not own (the good client's are "1", "2", ...)
	// reaches only this client's own table.
	for _, rid := range []string{"1", "2", "3"} {
		if err := c.Send(callCtx(t), services.NameCancel, nil, connector.WithMetadata(services.MetaRequest, rid)); err != nil {
			t.Fatal(err)
		}
	}
	// A call that claims another client's identity in its metadata gets its own.
	var r SayReply
	raw, err := c.RequestRaw(callCtx(t), services.NameCall, wire.CodecJSON, []byte(`{}`),
		connector.WithMetadata("svc", "test.echo"), connector.WithMetadata("member", "context"), connector.WithMetadata("rid", "9"),
		connector.WithMetadata("client", "someone-else"))
	if err != nil || json.Unmarshal(raw.Payload, &r) != nil || r.Client == "" || r.Client == "someone-else" {
		t.Errorf("identity: %+v %v", r, err)
	}

	if _, ended := hs.endedWith("good"); ended {
		t.Fatal("the hostile client's frames ended the good client's call")
	}
	closeOnce(hs.release)
	if err := <-held; err != nil {
		t.Fatalf("the good client's call: %v", err)
	}
	if v, err := goodEcho.Say.Call(callCtx(t), SayArgs{Text: "fine"}); err != nil || v.Text != "fine" {
		t.Errorf("the provider after the bad input: %+v %v", v, err)
	}
	got := failedCalls(t, reader)
	for code, n := range map[string]int64{"unknown_service": 2, "unknown_member": 1, "invalid_arguments": 2} {
		if got[code] != n {
			t.Errorf("failed calls %s = %d, want %d (all: %v)", code, got[code], n, got)
		}
	}
}

func connectorTo(t *testing.T, endpoint string) *connector.Connector {
	t.Helper()
	conn, _ := connectStreamTo(t, endpoint)
	return conn
}

func withMeta(k, v string) connector.CallOption { return connector.WithMetadata(k, v) }

// A client's calls in flight are bounded (MaxInflightPerClient): past it a call fails at
// once with unavailable, nothing queues; another client is not affected.
func TestBadInput_InflightCallsPerClientAreBounded(t *testing.T) {
	release := make(chan struct{})
	provider := newHost(t, "provider", nil, services.Facet{ID: "p", Setup: func(env *services.Env) {
		impl := echoImpl("p", nil)
		impl.Unset = services.Task(func(ctx context.Context, _ struct{}) (struct{}, error) {
			select {
			case <-ctx.Done():
			case <-release:
			}
			return struct{}{}, nil
		})
		services.Provide(env, EchoToken, impl)
	}})
	ep := provider.Endpoint(context.Background(), services.Client{ID: "flooder"})
	defer ep.Close()
	done := make(chan error, services.MaxInflightPerClient+1)
	for i := range services.MaxInflightPerClient {
		ep.Serve(strconv.Itoa(i), services.Call{Service: "test.echo", Member: "unset", Args: json.RawMessage(`{}`)},
			func(_ json.RawMessage, err error) { done <- err })
	}
	eventually(t, "every call in flight", func() bool { return ep.Inflight() == services.MaxInflightPerClient })
	over := make(chan error, 1)
	ep.Serve("over", services.Call{Service: "test.echo", Member: "unset", Args: json.RawMessage(`{}`)},
		func(_ json.RawMessage, err error) { over <- err })
	if err := <-over; !errors.Is(err, services.ErrUnavailable) {
		t.Fatalf("a call past the bound: %v, want unavailable", err)
	}
	other := services.NewLoopback(provider, services.Client{ID: "other"})
	defer other.Close()
	if _, err := other.Call(callCtx(t), services.Call{Service: "test.echo", Member: "say", Args: json.RawMessage(`{"text":"ok"}`)}); err != nil {
		t.Fatalf("another client: %v", err)
	}
	close(release)
	for range services.MaxInflightPerClient {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}
