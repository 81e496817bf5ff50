package services_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/meshnode/meshnode"
	"github.com/meshnode/meshnode/services"
	"github.com/meshnode/meshnode/session/connector"
	"github.com/meshnode/meshnode/session/wire"
)

// failedCalls reads meshnode.services.calls.failed by code, as the server hosts
// counted them (where a client's calls come in).
func failedCalls(t *testing.T, r *sdkmetric.ManualReader) map[string]int64 {
	t.Helper()
	return callsOf(t, r, "meshnode.services.calls.failed", "server")
}

// callsOf reads a call counter of the hosts of one role ("server", "worker") by code.
func callsOf(t *testing.T, r *sdkmetric.ManualReader, name, role string) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				if host, _ := dp.Attributes.Value(attribute.Key("host")); host.AsString() != role {
					continue
				}
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

// droppedSubs reads meshnode.services.subscriptions.dropped.
func droppedSubs(t *testing.T, r *sdkmetric.ManualReader) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == "meshnode.services.subscriptions.dropped" {
				for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
					n += dp.Value
				}
			}
		}
	}
	return n
}

// The issue's bad input, from a presentation on node 0 to a worker on node 1 over each
// transport: a subscription to an unknown member (server and session scope), a stale
// instance generation, a reference used by another client and after it was released,
// a flood of calls at a closed instance, and an attach to a removed session. Each gets
// its typed error with a stable code, is counted in the node's
// meshnode.services.calls.failed (the node's MeterProvider), and disturbs nobody: a
// good presentation of the same worker keeps its call in flight, its subscriptions,
// its instance task and its attachment. (A subscriber that never reads: R30.)
func TestBadInput_TheIssueList(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	f := startSvcFleetWith(t, 2, nil, func(_ int, cfg *meshnode.Config) { cfg.MeterProvider = mp })
	for _, tr := range presentationTransports {
		t.Run(tr, func(t *testing.T) {
			w := f.workerOn(t, 1, "bad-"+tr+"-")
			var score seen
			ts := newTasks()
			good := f.present(t, 0, tr, func(p *presentation) {
				p.board.Score.Subscribe(score.score)
				services.Observe(p.env, DialogToken, ts.handler)
			})
			bad := f.present(t, 0, tr)
			good.create(t, w)
			good.attach(t, w)
			bad.attach(t, w)
			open(t, good.dialogs, "live", "stays")
			eventually(t, "the good presentation's task", func() bool { return ts.has("start live#1 stays") })
			held := make(chan error, 1)
			heldCtx, endHeld := context.WithCancel(callCtx(t))
			go func() { _, err := good.counter.Hold.Call(heldCtx, SayArgs{Text: "good-" + tr}); held <- err }()
			waitStarted(t, f.hs, "good-"+tr)

			reattaches := services.AttacherOf(f.Node(0).Services()).Stats().Reattaches
			step := func(what, code string, n int64, do func() error) {
				t.Helper()
				before := failedCalls(t, reader)[code]
				for i := int64(0); i < n; i++ {
					var se *services.Error
					if err := do(); !errors.As(err, &se) || se.Code != code {
						t.Fatalf("%s: %v, want %s", what, err, code)
					}
				}
				if got := failedCalls(t, reader)[code] - before; got != n {
					t.Errorf("%s: counted %d times as %s, want %d", what, got, code, n)
				}
			}

			// A subscription to an unknown member: over STREAM by hand (a facade or
			// services.Watch refuses it before asking, from the catalogue).
			if bad.stream != nil {
				sub := func(md ...connector.CallOption) func() error {
					return func() error {
						_, err := bad.stream.RequestRaw(callCtx(t), services.NameSubscribe, wire.CodecJSON, nil, md...)
						var re *connector.RemoteError
						if errors.As(err, &re) {
							return &services.Error{Code: re.Code, Message: re.Message}
						}
						return err
					}
				}
				step("a server subscription to an unknown member", services.CodeUnknownMember, 1,
					sub(withMeta(services.MetaService, "meshnode.session-directory"), withMeta(services.MetaMember, "nope")))
				step("a session subscription to an unknown member", services.CodeUnknownMember, 1,
					sub(withMeta(services.MetaService, "test.board"), withMeta(services.MetaMember, "nope"), withMeta(services.MetaScope, services.ScopeSession)))
			} else {
				_, _, err := services.Watch(callCtx(t), bad.session, "test.board", "nope", func(services.Delivery, json.RawMessage) {}, nil)
				if !errors.Is(err, services.ErrUnknownMember) {
					t.Fatalf("watching an unknown member: %v, want unknown_member", err)
				}
			}

			// A stale instance generation, and a flood of calls at a closed instance.
			answer, _ := json.Marshal(AnswerArgs{Choice: "x"})
			at := func(key string, gen uint64) func() error {
				return func() error {
					_, err := bad.session.Call(callCtx(t), services.Call{Service: "test.dialog", Key: key, Generation: gen, Member: "answer", Args: answer})
					return err
				}
			}
			step("a call naming a generation never given", services.CodeStaleGeneration, 1, at("live", 7))
			open(t, bad.dialogs, "shut", "closing")
			if err := at("shut", 1)(); err != nil {
				t.Fatalf("the instance while open: %v", err)
			}
			// The good presentation's task of it started (its state hydrated) before it
			// closes: a subscription racing the close would be refused, and counted, too.
			eventually(t, "the good presentation's task of the instance", func() bool { return ts.has("start shut#1 closing") })
			closeDialog(t, bad.dialogs, "shut")
			eventually(t, "its task ends", func() bool { return ts.has("end shut#1") })
			const flood = 200
			before := failedCalls(t, reader)[services.CodeStaleGeneration]
			errs := make(chan error, flood)
			for range flood {
				go func() { errs <- at("shut", 1)() }()
			}
			for range flood {
				if err := <-errs; !errors.Is(err, services.ErrStaleGeneration) {
					t.Fatalf("a call of the flood at the closed instance: %v, want stale_generation", err)
				}
			}
			if got := failedCalls(t, reader)[services.CodeStaleGeneration] - before; got != flood {
				t.Errorf("the flood: counted %d times, want %d", got, flood)
			}

			// A reference used by another client, and after it was released.
			ref, err := good.index.Start.Call(callCtx(t), StartArgs{Steps: 1 << 30})
			if err != nil {
				t.Fatal(err)
			}
			job := ref.Get(IndexJobToken)
			h := services.RefHandle(ref)
			if h == "" {
				t.Fatal("a reference from a worker has no handle")
			}
			step("another client's reference", services.CodeStaleReference, 1, func() error {
				_, err := bad.session.Call(callCtx(t), services.Call{Service: "test.index-job", Ref: h, Member: "cancel"})
				return err
			})
			eventually(t, "the job goes on", func() bool { v, ok := job.Progress.Value(); return ok && v > 3 })
			ref2, err := bad.index.Start.Call(callCtx(t), StartArgs{Steps: 1 << 30})
			if err != nil {
				t.Fatal(err)
			}
			job2, h2 := ref2.Get(IndexJobToken), services.RefHandle(ref2)
			// Its progress subscription is made before the release (one made after it
			// would be refused, and counted, too).
			eventually(t, "the second job's progress hydrates", func() bool { _, ok := job2.Progress.Value(); return ok })
			ref2.Release()
			// Its facade refuses at once (nothing is sent); a frame that still names it
			// is refused by the server.
			if _, err := job2.Cancel.Call(callCtx(t), struct{}{}); !errors.Is(err, services.ErrStaleReference) {
				t.Fatalf("a released reference's facade: %v, want stale_reference", err)
			}
			step("a reference after its release", services.CodeStaleReference, 1, func() error {
				_, err := bad.session.Call(callCtx(t), services.Call{Service: "test.index-job", Ref: h2, Member: "cancel"})
				return err
			})

			// An attach to a removed session.
			gone := "gone-" + tr
			bad.create(t, gone)
			if _, err := bad.mgmt.Remove.Call(callCtx(t), services.SessionRef{Session: gone}); err != nil {
				t.Fatal(err)
			}
			step("an attach to a removed session", services.CodeUnknownSession, 1, func() error {
				_, err := bad.mgmt.Attach.Call(callCtx(t), services.AttachArgs{Session: gone})
				return err
			})

			// Nobody else was disturbed, and the bad presentation's own route stands: a
			// stale instance generation is not a stale attachment.
			if n := services.AttacherOf(f.Node(0).Services()).Stats().Reattaches - reattaches; n != 0 {
				t.Fatalf("the bad input broke routes: %d re-attaches", n)
			}
			if _, ended := f.hs.endedWith("good-" + tr); ended {
				t.Fatal("the bad input ended the good presentation's call")
			}
			if got := ts.running(); len(got) != 1 || got[0] != "live#1" {
				t.Fatalf("the good presentation's tasks: %v, want live#1 still running", got)
			}
			if _, err := job.Cancel.Call(callCtx(t), struct{}{}); err != nil {
				t.Fatalf("the good presentation's reference: %v", err)
			}
			if _, err := good.board.Set.Call(callCtx(t), Score{N: 42}); err != nil {
				t.Fatal(err)
			}
			eventually(t, "the good presentation's subscription goes on", func() bool { return score.last() == 42 })
			if v, err := good.counter.Who.Call(callCtx(t), struct{}{}); err != nil || v.Client != good.id {
				t.Fatalf("the good presentation's attachment: %+v %v", v, err)
			}
			// Its call in flight was still running: it ends when its caller ends it.
			endHeld()
			if err := <-held; !errors.Is(err, services.ErrCancelled) {
				t.Fatalf("the good presentation's call in flight: %v, want it cancelled by its caller only", err)
			}
		})
	}
}

// The session workers of a node count the calls they serve in the node's
// MeterProvider (host="worker"), all workers in one set of series: a call a
// presentation makes is counted where it comes in (host="server", on the
// presentation's node) and where it runs.
func TestWorkerHostsCountInTheNodesMeterProvider(t *testing.T) {
	readers := []*sdkmetric.ManualReader{sdkmetric.NewManualReader(), sdkmetric.NewManualReader()}
	mps := make([]*sdkmetric.MeterProvider, len(readers))
	for i, r := range readers {
		mps[i] = sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
		mp := mps[i]
		t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	}
	f := startSvcFleetWith(t, 2, nil, func(i int, cfg *meshnode.Config) { cfg.MeterProvider = mps[i] })
	for k := range 2 { // two workers of one kind: one set of series
		w := f.workerOn(t, 1, fmt.Sprintf("metered-%d-", k))
		p := f.present(t, 0, "stream")
		p.create(t, w)
		p.attach(t, w)
		for range 3 {
			if _, err := p.counter.Add.Call(callCtx(t), AddArgs{N: 1}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got := callsOf(t, readers[1], "meshnode.services.calls", "worker")["ok"]; got != 6 {
		t.Errorf("the workers counted %d calls served, want 6", got)
	}
	if got := callsOf(t, readers[0], "meshnode.services.calls", "worker")["ok"]; got != 0 {
		t.Errorf("node 0, with no worker, counted %d worker calls", got)
	}
}

// Bad input: one client cannot take the whole sessions directory. Past its bound of
// sessions created and not removed, its create fails unavailable, naming the session
// and the bound; another client creates as before, and a removal makes room again.
func TestBadInput_SessionsPerCreatorAreBounded(t *testing.T) {
	t.Cleanup(services.SetSessionsPerOwner(3))
	f := startSvcFleet(t, 2, nil)
	greedy, other := f.present(t, 0, "stream"), f.present(t, 1, "stream")
	for i := range 3 {
		greedy.create(t, fmt.Sprintf("greedy-%d", i))
	}
	_, err := greedy.mgmt.Create.Call(callCtx(t), services.CreateArgs{Session: "greedy-3"})
	var se *services.Error
	if !errors.As(err, &se) || se.Code != services.CodeUnavailable || !strings.Contains(se.Message, "greedy-3") || !strings.Contains(se.Message, "3 sessions") {
		t.Fatalf("a create past the bound: %v, want unavailable naming the session and the bound", err)
	}
	other.create(t, "other-0")
	if _, err := greedy.mgmt.Remove.Call(callCtx(t), services.SessionRef{Session: "greedy-0"}); err != nil {
		t.Fatal(err)
	}
	greedy.create(t, "greedy-3")
}
