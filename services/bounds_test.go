package services_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/meshnode/meshnode"
	"github.com/meshnode/meshnode/internal/testkit"
	"github.com/meshnode/meshnode/services"
	"github.com/meshnode/meshnode/session/connector"
	"github.com/meshnode/meshnode/session/wire"
)

// The bounds of docs/ARCHITECTURE.md's table that a peer of the plugin services can
// reach: each is reached, its behaviour at the bound checked as documented (the code,
// a message naming what was asked, nobody else disturbed) and its metric read.

// metered returns a MeterProvider read by the returned reader.
func metered(t *testing.T) (*sdkmetric.ManualReader, *sdkmetric.MeterProvider) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	return reader, mp
}

// counted reads a counter without a code attribute, as the hosts of role counted it.
func counted(t *testing.T, r *sdkmetric.ManualReader, name, role string) int64 {
	t.Helper()
	return callsOf(t, r, name, role)[""]
}

// refusedAtBound checks that err is unavailable with a message naming each of want.
func refusedAtBound(t *testing.T, what string, err error, want ...string) {
	t.Helper()
	var se *services.Error
	if !errors.As(err, &se) || se.Code != services.CodeUnavailable {
		t.Fatalf("%s: %v, want unavailable", what, err)
	}
	for _, w := range want {
		if !strings.Contains(se.Message, w) {
			t.Fatalf("%s: message %q does not name %q", what, se.Message, w)
		}
	}
}

// A presentation's session calls in flight are bounded (MaxInflightPerClient, where it
// comes in): past it a call fails unavailable at once, naming the call and the bound,
// and is counted; the calls in flight go on, another presentation of the same worker
// calls as before, and the presentation calls again once its calls ended.
func TestBounds_SessionCallsInFlightPerPresentation(t *testing.T) {
	reader, mp := metered(t)
	f := startSvcFleetWith(t, 2, nil, func(_ int, cfg *meshnode.Config) { cfg.MeterProvider = mp })
	w := f.workerOn(t, 1, "inflight-")
	busy, other := f.present(t, 0, "loopback"), f.present(t, 0, "stream")
	busy.create(t, w)
	busy.attach(t, w)
	other.attach(t, w)

	ctx, endHeld := context.WithCancel(callCtx(t))
	defer endHeld()
	started := make(chan struct{})
	go func() { // Hold tells each start on a channel of 64: take them all
		defer close(started)
		for range services.MaxInflightPerClient {
			select {
			case <-f.hs.startedC:
			case <-ctx.Done():
				return
			}
		}
	}()
	held := make(chan error, services.MaxInflightPerClient)
	for i := range services.MaxInflightPerClient {
		go func() { _, err := busy.counter.Hold.Call(ctx, SayArgs{Text: "held-" + strconv.Itoa(i)}); held <- err }()
	}
	<-started
	if ctx.Err() != nil {
		t.Fatal("the held calls did not all start")
	}

	before := failedCalls(t, reader)[services.CodeUnavailable]
	_, err := busy.counter.Who.Call(callCtx(t), struct{}{})
	refusedAtBound(t, "a session call past the bound", err, "test.counter.who", strconv.Itoa(services.MaxInflightPerClient))
	if n := failedCalls(t, reader)[services.CodeUnavailable] - before; n != 1 {
		t.Errorf("the refusal counted %d times as unavailable, want 1", n)
	}
	if n := callsOf(t, reader, "meshnode.services.calls.failed", "worker")[services.CodeUnavailable]; n != 0 {
		t.Errorf("the refused call reached the worker (%d unavailable there)", n)
	}
	if v, err := other.counter.Who.Call(callCtx(t), struct{}{}); err != nil || v.Client != other.id {
		t.Fatalf("another presentation of the worker: %+v %v", v, err)
	}
	for i := range services.MaxInflightPerClient {
		if _, ended := f.hs.endedWith("held-" + strconv.Itoa(i)); ended {
			t.Fatalf("held call %d ended", i)
		}
	}
	endHeld()
	for range services.MaxInflightPerClient {
		if err := <-held; !errors.Is(err, services.ErrCancelled) {
			t.Fatalf("a held call: %v, want cancelled by its caller", err)
		}
	}
	eventually(t, "the presentation calls again", func() bool {
		v, err := busy.counter.Who.Call(callCtx(t), struct{}{})
		return err == nil && v.Client == busy.id
	})
}

// The presentations attached to one session worker are bounded (MaxClientsPerWorker):
// past it an attach fails unavailable naming the session and the bound, and is
// counted; the attached presentations go on, and a detach makes room.
func TestBounds_PresentationsPerWorker(t *testing.T) {
	t.Cleanup(services.SetClientsPerWorker(2))
	reader, mp := metered(t)
	f := startSvcFleetWith(t, 2, nil, func(_ int, cfg *meshnode.Config) { cfg.MeterProvider = mp })
	w := f.workerOn(t, 1, "crowded-")
	a, b, c := f.present(t, 0, "stream"), f.present(t, 1, "loopback"), f.present(t, 0, "loopback")
	a.create(t, w)
	a.attach(t, w)
	b.attach(t, w)

	before := failedCalls(t, reader)[services.CodeUnavailable]
	_, err := c.mgmt.Attach.Call(callCtx(t), services.AttachArgs{Session: w})
	refusedAtBound(t, "an attach past the bound", err, w, "2 presentations")
	if n := failedCalls(t, reader)[services.CodeUnavailable] - before; n != 1 {
		t.Errorf("the refusal counted %d times as unavailable, want 1", n)
	}
	// The refused presentation stays degraded on its selection: its session calls try
	// the route again, and are refused alike.
	_, err = c.counter.Who.Call(callCtx(t), struct{}{})
	refusedAtBound(t, "the refused presentation's session call", err, w, "2 presentations")
	for _, p := range []*presentation{a, b} {
		if v, err := p.counter.Who.Call(callCtx(t), struct{}{}); err != nil || v.Client != p.id {
			t.Fatalf("an attached presentation: %+v %v", v, err)
		}
	}
	if _, err := b.mgmt.Detach.Call(callCtx(t), struct{}{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the worker has room again", func() bool {
		_, err := c.mgmt.Attach.Call(callCtx(t), services.AttachArgs{Session: w})
		return err == nil
	})
	if v, err := c.counter.Who.Call(callCtx(t), struct{}{}); err != nil || v.Client != c.id {
		t.Fatalf("the presentation attached in the room made: %+v %v", v, err)
	}
}

// subscribeRaw subscribes by hand over c (scope "" or session); the error is the
// provider's, typed.
func subscribeRaw(t *testing.T, c *connector.Connector, svc, member, scope string) error {
	t.Helper()
	md := []connector.CallOption{withMeta(services.MetaService, svc), withMeta(services.MetaMember, member)}
	if scope != "" {
		md = append(md, withMeta(services.MetaScope, scope))
	}
	_, err := c.RequestRaw(callCtx(t), services.NameSubscribe, wire.CodecJSON, nil, md...)
	var re *connector.RemoteError
	if errors.As(err, &re) {
		return &services.Error{Code: re.Code, Message: re.Message}
	}
	return err
}

// The subscriptions of one client connection (server scope) are bounded
// (MaxSubscriptionsPerClient): past it a subscribe fails unavailable naming the member
// and the bound, and is counted; subscribing again to a member held is not one more,
// another client subscribes as before, and an unsubscribe makes room.
func TestBounds_SubscriptionsPerConnection(t *testing.T) {
	t.Cleanup(services.SetSubscriptionsPerClient(2))
	reader, mp := metered(t)
	provider, err := services.NewHost(context.Background(), services.HostOptions{Name: "provider", Logger: quiet(), MeterProvider: mp},
		boardFacet("p", 7), dialogOwner("p", nil))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = provider.Close(context.Background()) })
	good, _ := connectStream(t, provider) // serves the provider over STREAM
	ep, _ := streamServers.Load(provider)
	c := connectorTo(t, ep.(string))

	for _, member := range []string{"score", "moves", "score"} {
		if err := subscribeRaw(t, c, "test.board", member, ""); err != nil {
			t.Fatalf("subscribing to %s: %v", member, err)
		}
	}
	before := failedCalls(t, reader)[services.CodeUnavailable]
	refusedAtBound(t, "a subscription past the bound", subscribeRaw(t, c, "test.dialog-admin", "dialogs", ""), "test.dialog-admin.dialogs", "2 subscriptions")
	if n := failedCalls(t, reader)[services.CodeUnavailable] - before; n != 1 {
		t.Errorf("the refusal counted %d times as unavailable, want 1", n)
	}
	if n := services.SubscriptionsOf(provider); n != 2 {
		t.Fatalf("the provider holds %d subscriptions, want 2", n)
	}

	var board *Board
	var score seen
	newHost(t, "good", []services.Connection{good}, services.Facet{ID: "good", Setup: func(env *services.Env) {
		board = services.Use(env, BoardToken)
		board.Score.Subscribe(score.score)
	}})
	eventually(t, "another client's subscriptions", func() bool { return score.len() > 0 && score.last() == 7 && services.SubscriptionsOf(provider) == 4 })

	if err := c.Send(callCtx(t), services.NameUnsubscribe, nil, withMeta(services.MetaService, "test.board"), withMeta(services.MetaMember, "score")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the unsubscribe makes room", func() bool { return subscribeRaw(t, c, "test.dialog-admin", "dialogs", "") == nil })
	if n := services.SubscriptionsOf(provider); n != 4 {
		t.Fatalf("the provider holds %d subscriptions, want 4", n)
	}
}

// The session subscriptions of one presentation are bounded (MaxSubscriptionsPerClient,
// where it comes in): past it a subscribe fails unavailable naming the member and the
// bound, and is counted; another presentation of the same worker subscribes as before.
func TestBounds_SubscriptionsPerPresentation(t *testing.T) {
	t.Cleanup(services.SetSubscriptionsPerClient(2))
	reader, mp := metered(t)
	f := startSvcFleetWith(t, 2, nil, func(_ int, cfg *meshnode.Config) { cfg.MeterProvider = mp })
	w := f.workerOn(t, 1, "subs-")
	// Another presentation that uses the board only (its facades' subscriptions within
	// the bound).
	var score seen
	var board *Board
	var mgmt *services.SessionManagement
	l := services.NewLoopback(f.Node(0).Services(), services.Client{ID: "other"})
	t.Cleanup(l.Close)
	newHost(t, "other", []services.Connection{l, l.Session()}, services.Facet{ID: "ui", Setup: func(env *services.Env) {
		mgmt = services.Use(env, services.SessionManagementToken)
		board = services.Use(env, BoardToken)
		board.Score.Subscribe(score.score)
	}})
	if _, err := mgmt.Create.Call(callCtx(t), services.CreateArgs{Session: w}); err != nil {
		t.Fatal(err)
	}
	if _, err := mgmt.Attach.Call(callCtx(t), services.AttachArgs{Session: w}); err != nil {
		t.Fatal(err)
	}
	// The greedy presentation speaks the frames by hand: no facade subscribes for it.
	greedy := testkit.DialConnector(t, f.Node(0).Endpoints()[0], wait)
	t.Cleanup(func() { _ = greedy.Close() })
	args, _ := json.Marshal(services.AttachArgs{Session: w})
	if _, err := greedy.RequestRaw(callCtx(t), services.NameCall, wire.CodecJSON, args,
		withMeta("svc", "meshnode.session-management"), withMeta("member", "attach"), withMeta("rid", "1")); err != nil {
		t.Fatal(err)
	}

	for _, member := range []string{"score", "moves", "score"} {
		if err := subscribeRaw(t, greedy, "test.board", member, services.ScopeSession); err != nil {
			t.Fatalf("subscribing to %s: %v", member, err)
		}
	}
	before := failedCalls(t, reader)[services.CodeUnavailable]
	refusedAtBound(t, "a session subscription past the bound", subscribeRaw(t, greedy, "test.dialog-admin", "dialogs", services.ScopeSession),
		"test.dialog-admin.dialogs", "2 session subscriptions")
	if n := failedCalls(t, reader)[services.CodeUnavailable] - before; n != 1 {
		t.Errorf("the refusal counted %d times as unavailable, want 1", n)
	}
	if _, err := board.Set.Call(callCtx(t), Score{N: 5}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "another presentation's subscription", func() bool { return score.len() > 0 && score.last() == 5 })
	if err := greedy.Send(callCtx(t), services.NameUnsubscribe, nil, withMeta(services.MetaService, "test.board"),
		withMeta(services.MetaMember, "score"), withMeta(services.MetaScope, services.ScopeSession)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the unsubscribe makes room", func() bool {
		return subscribeRaw(t, greedy, "test.dialog-admin", "dialogs", services.ScopeSession) == nil
	})
}

// A replica queues at most 1,024 listener calls: past it a state's updates are folded
// into one call with the latest value, each counted in the consumer host's
// meshnode.services.deliveries.folded; the queued calls run in order, the latest
// follows, and the listener goes on with the next update.
func TestBounds_ListenerCallsAReplicaQueues(t *testing.T) {
	const queued, over = 1024, 300
	provider := newHost(t, "provider", nil, boardFacet("p", 0))
	reader, mp := metered(t)
	conn := services.NewLoopback(provider, services.Client{ID: "slow-listener"})
	t.Cleanup(conn.Close)
	var got seen
	release := make(chan struct{})
	var board *Board
	consumer, err := services.NewHost(context.Background(), services.HostOptions{Name: "consumer", Logger: quiet(), MeterProvider: mp, Connections: []services.Connection{conn}},
		services.Facet{ID: "slow", Setup: func(env *services.Env) {
			board = services.Use(env, BoardToken)
			board.Score.Subscribe(func(ctx context.Context, v Score) {
				got.score(ctx, v)
				if got.len() == 1 {
					<-release // the first call (the hydration) holds the queue
				}
			})
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = consumer.Close(context.Background()) })
	t.Cleanup(func() { closeOnce(release) })
	eventually(t, "the listener's first call", func() bool { return got.len() == 1 })

	if _, err := board.Burst.Call(callCtx(t), BurstArgs{From: 1, Count: queued + over}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the replica has every update", func() bool { v, _ := board.Score.Value(); return v.N == queued+over })
	if n := counted(t, reader, "meshnode.services.deliveries.folded", "server"); n != over {
		t.Fatalf("folded %d updates, want %d", n, over)
	}
	if n := got.len(); n != 1 {
		t.Fatalf("the listener ran %d times while held", n)
	}
	close(release)
	eventually(t, "the queued calls and the latest", func() bool { return got.len() == 1+queued+1 })
	for i := 1; i <= queued; i++ {
		if v, kind, _, _ := got.at(i); v != i || kind != services.DeliveryUpdate {
			t.Fatalf("call %d: %d (%v), want update %d", i, v, kind, i)
		}
	}
	if v, kind, _, _ := got.at(queued + 1); v != queued+over || kind != services.DeliveryUpdate {
		t.Fatalf("the folded call: %d (%v), want update %d", v, kind, queued+over)
	}
	if _, err := board.Set.Call(callCtx(t), Score{N: -1}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the next update", func() bool { return got.len() == 1+queued+2 && got.last() == -1 })
	if n := counted(t, reader, "meshnode.services.deliveries.folded", "server"); n != over {
		t.Fatalf("folded %d updates in all, want %d", n, over)
	}
}

// A hydrating subscription buffers at most 4,096 frames: past it, it starts again from
// a fresh snapshot, counted in the consumer host's
// meshnode.services.hydrations.restarted; once the snapshot comes it is hydrated with
// the latest value and goes on.
func TestBounds_FramesAHydratingSubscriptionBuffers(t *testing.T) {
	const buffered = 4096
	provider := newHost(t, "provider", nil, boardFacet("p", 0))
	reader, mp := metered(t)
	conn := services.NewLoopback(provider, services.Client{ID: "hydrating"})
	t.Cleanup(conn.Close)
	release := services.HoldSnapshots(conn)
	t.Cleanup(release)
	var got seen
	var board *Board
	consumer, err := services.NewHost(context.Background(), services.HostOptions{Name: "consumer", Logger: quiet(), MeterProvider: mp, Connections: []services.Connection{conn}},
		services.Facet{ID: "late", Setup: func(env *services.Env) {
			board = services.Use(env, BoardToken)
			board.Score.Subscribe(got.score)
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = consumer.Close(context.Background()) })
	eventually(t, "the provider subscribed (score and moves)", func() bool { return services.SubscriptionsOf(provider) == 2 })

	writer := services.NewLoopback(provider, services.Client{ID: "writer"})
	t.Cleanup(writer.Close)
	burst := func(from, count int) {
		t.Helper()
		args, _ := json.Marshal(BurstArgs{From: from, Count: count})
		if _, err := writer.Call(callCtx(t), services.Call{Service: "test.board", Member: "burst", Args: args}); err != nil {
			t.Fatal(err)
		}
	}
	burst(1, buffered)
	if n := counted(t, reader, "meshnode.services.hydrations.restarted", "server"); n != 0 {
		t.Fatalf("restarted %d times at the bound, want 0", n)
	}
	burst(buffered+1, 1)
	eventually(t, "it starts again", func() bool { return counted(t, reader, "meshnode.services.hydrations.restarted", "server") == 1 })
	if n := got.len(); n != 0 {
		t.Fatalf("the listener ran %d times before a snapshot", n)
	}
	release()
	eventually(t, "hydrated from the fresh snapshot", func() bool {
		v, _ := board.Score.Value()
		return v.N == buffered+1 && got.len() == 1
	})
	if v, kind, _, _ := got.at(0); v != buffered+1 || kind != services.DeliveryHydration {
		t.Fatalf("the first call: %d (%v), want the hydration with %d", v, kind, buffered+1)
	}
	burst(buffered+2, 1)
	eventually(t, "it goes on", func() bool { return got.len() == 2 && got.last() == buffered+2 })
	if n := counted(t, reader, "meshnode.services.hydrations.restarted", "server"); n != 1 {
		t.Fatalf("restarted %d times in all, want 1", n)
	}
}

// An observation queues a bounded number of directory changes (1,024; lowered here):
// past it, it goes straight to the latest, the changes skipped counted in the
// observer host's meshnode.services.observations.skipped; the tasks then match the
// latest directory, each started once.
func TestBounds_DirectoryChangesAnObservationQueues(t *testing.T) {
	const bound = 8
	t.Cleanup(services.SetDirUpdates(bound))
	t.Cleanup(services.SetTaskStopWait(time.Minute)) // the reconciliation waits for the held task
	var inst *services.Instances[Dialog]
	provider := newHost(t, "provider", nil, services.Facet{ID: "dialogs", Setup: func(env *services.Env) {
		inst = services.ProvideMany(env, DialogToken)
	}})
	add := func(key string) func() {
		t.Helper()
		closeIt, err := inst.Add(key, &Dialog{Request: services.NewState(Question{Text: key})})
		if err != nil {
			t.Fatal(err)
		}
		return closeIt
	}
	reader, mp := metered(t)
	conn := services.NewLoopback(provider, services.Client{ID: "observer"})
	t.Cleanup(conn.Close)
	var mu sync.Mutex
	starts := map[string]int{}
	blocked, cancelled, release := make(chan struct{}), make(chan struct{}), make(chan struct{})
	observer, err := services.NewHost(context.Background(), services.HostOptions{Name: "observer", Logger: quiet(), MeterProvider: mp, Connections: []services.Connection{conn}},
		services.Facet{ID: "observe", Setup: func(env *services.Env) {
			services.Observe(env, DialogToken, func(ctx context.Context, key string, _ *Dialog) error {
				mu.Lock()
				starts[key]++
				mu.Unlock()
				if key == "block" {
					close(blocked)
					<-ctx.Done()
					close(cancelled)
					<-release // a task slow to return holds the reconciliation
					return nil
				}
				<-ctx.Done()
				return nil
			})
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = observer.Close(context.Background()) })
	t.Cleanup(func() { closeOnce(release) })

	closeBlock := add("block")
	<-blocked
	closeBlock()
	<-cancelled // the reconciliation waits for the task from now on
	for i := range bound + 1 {
		add("d" + strconv.Itoa(i))
	}
	eventually(t, "the changes skipped", func() bool {
		return counted(t, reader, "meshnode.services.observations.skipped", "server") == bound
	})
	close(release)
	eventually(t, "every instance's task", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(starts) == bound+2
	})
	mu.Lock()
	for key, n := range starts {
		if n != 1 {
			t.Errorf("the task of %s started %d times", key, n)
		}
	}
	mu.Unlock()
	if n := counted(t, reader, "meshnode.services.observations.skipped", "server"); n != bound {
		t.Errorf("skipped %d changes, want %d", n, bound)
	}
}

// A client holds at most MaxRefsPerClient references: a method that would return one
// more fails unavailable naming the reference's contract and the bound, and is
// counted; the references held still work, another client gets references as before,
// and a release makes room.
func TestBounds_RefsPerClient(t *testing.T) {
	reader, mp := metered(t)
	provider, err := services.NewHost(context.Background(), services.HostOptions{Name: "provider", Logger: quiet(), MeterProvider: mp}, indexFacet())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = provider.Close(context.Background()) })
	user := func(name string) *Index {
		conn := services.NewLoopback(provider, services.Client{ID: name})
		t.Cleanup(conn.Close)
		var index *Index
		newHost(t, name, []services.Connection{conn}, services.Facet{ID: name, Setup: func(env *services.Env) { index = services.Use(env, IndexToken) }})
		return index
	}
	hoarder, other := user("hoarder"), user("other")
	refs := make([]services.Ref[IndexJob], 0, services.MaxRefsPerClient)
	for range services.MaxRefsPerClient {
		r, err := hoarder.Start.Call(callCtx(t), StartArgs{Steps: 1})
		if err != nil {
			t.Fatal(err)
		}
		refs = append(refs, r)
	}
	before := failedCalls(t, reader)[services.CodeUnavailable]
	_, err = hoarder.Start.Call(callCtx(t), StartArgs{Steps: 1})
	refusedAtBound(t, "a reference past the bound", err, "test.index-job", strconv.Itoa(services.MaxRefsPerClient))
	if n := failedCalls(t, reader)[services.CodeUnavailable] - before; n != 1 {
		t.Errorf("the refusal counted %d times as unavailable, want 1", n)
	}
	if res, err := refs[0].Get(IndexJobToken).Wait.Call(callCtx(t), struct{}{}); err != nil || res.Done != 1 {
		t.Fatalf("a reference held: %+v %v", res, err)
	}
	r, err := other.Start.Call(callCtx(t), StartArgs{Steps: 1})
	if err != nil {
		t.Fatalf("another client: %v", err)
	}
	r.Release()
	refs[0].Release()
	eventually(t, "the release makes room", func() bool {
		r, err := hoarder.Start.Call(callCtx(t), StartArgs{Steps: 1})
		if err == nil {
			refs[0] = r
		}
		return err == nil
	})
	for _, r := range refs {
		r.Release()
	}
}

// The sessions directory holds a bounded number of sessions (100,000; lowered here):
// past it a create fails unavailable naming the session and the bound, and is
// counted; the sessions there are attached as before, and a removal makes room.
func TestBounds_SessionsInTheDirectory(t *testing.T) {
	const bound = 3
	t.Cleanup(services.SetMaxSessions(bound))
	reader, mp := metered(t)
	f := startSvcFleetWith(t, 2, nil, func(_ int, cfg *meshnode.Config) { cfg.MeterProvider = mp })
	ps := make([]*presentation, bound+1)
	for i := range ps {
		ps[i] = f.present(t, i%2, "stream")
	}
	for i := range bound {
		ps[i].create(t, fmt.Sprintf("full-%d", i)) // one each: far from the bound per creator
	}
	before := failedCalls(t, reader)[services.CodeUnavailable]
	_, err := ps[bound].mgmt.Create.Call(callCtx(t), services.CreateArgs{Session: "full-3"})
	refusedAtBound(t, "a create past the bound", err, "full-3", "3 sessions")
	if n := failedCalls(t, reader)[services.CodeUnavailable] - before; n != 1 {
		t.Errorf("the refusal counted %d times as unavailable, want 1", n)
	}
	ps[bound].attach(t, "full-0")
	if _, err := ps[bound].counter.Add.Call(callCtx(t), AddArgs{N: 1}); err != nil {
		t.Fatalf("a session there: %v", err)
	}
	if _, err := ps[1].mgmt.Remove.Call(callCtx(t), services.SessionRef{Session: "full-1"}); err != nil {
		t.Fatal(err)
	}
	ps[bound].create(t, "full-3")
}

// A presentation that attaches again to the worker it is attached to, while the worker
// is at its bound of presentations, takes its own place back: its previous attachment
// ends in the attach's own turn, not after it (found when the bound was tested: the
// old attachment's detach went asynchronously and the re-attach was refused).
func TestBounds_ReattachAtAFullWorkerTakesItsOwnPlace(t *testing.T) {
	t.Cleanup(services.SetClientsPerWorker(2))
	f := startSvcFleet(t, 2, nil)
	w := f.workerOn(t, 1, "full-")
	a, b := f.present(t, 0, "stream"), f.present(t, 0, "loopback")
	a.create(t, w)
	a.attach(t, w)
	b.attach(t, w)
	for i := range 20 {
		p := []*presentation{a, b}[i%2]
		p.attach(t, w)
		if v, err := p.counter.Who.Call(callCtx(t), struct{}{}); err != nil || v.Client != p.id {
			t.Fatalf("re-attach %d: the presentation's call: %+v %v", i, v, err)
		}
	}
}

// The sessions directory is one Actor whose state is saved whole and whose snapshot
// crosses the mesh as one record: its records are bounded in bytes too (long titles
// from many connections would otherwise make its save fail and the directory restart,
// found by a review). A create past the bound is refused unavailable, naming the
// session and the bound; the directory keeps running (same activation) and a removal
// makes room again.
func TestBounds_DirectoryBytes(t *testing.T) {
	t.Cleanup(services.SetDirectoryBytes(2 << 10))
	f := startSvcFleet(t, 2, nil)
	ctx := callCtx(t)
	before, err := f.Node(0).Actors().Lookup(ctx, services.DirectoryKind, services.DirectoryID)
	if err != nil {
		t.Fatal(err)
	}
	title := strings.Repeat("t", 250)
	var created []string
	var refused error
	for i := 0; i < 20 && refused == nil; i++ {
		p := f.present(t, i%2, "stream") // a new connection each time: another creator
		id := fmt.Sprintf("long-%d", i)
		if _, refused = p.mgmt.Create.Call(ctx, services.CreateArgs{Session: id, Title: title}); refused == nil {
			created = append(created, id)
		} else {
			refusedAtBound(t, "a create past the directory's bytes", refused, id, "KiB of records")
		}
	}
	if refused == nil || len(created) < 2 {
		t.Fatalf("created %d sessions of %d bytes each under a 2 KiB bound; refused: %v", len(created), len(title), refused)
	}
	after, err := f.Node(0).Actors().Lookup(ctx, services.DirectoryKind, services.DirectoryID)
	if err != nil || after.ObjectGeneration != before.ObjectGeneration {
		t.Fatalf("the directory restarted: %+v -> %+v (%v)", before, after, err)
	}
	p := f.present(t, 0, "stream")
	if _, err := p.mgmt.Remove.Call(ctx, services.SessionRef{Session: created[0]}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.mgmt.Create.Call(ctx, services.CreateArgs{Session: "long-again", Title: title}); err != nil {
		t.Fatalf("a create after a removal made room: %v", err)
	}
}

// A presentation's session subscribes (and catalogues, unsubscribes, cancels) in
// progress are bounded like its calls: each runs on a goroutine of the node's, so a
// client sending them faster than the worker answers would otherwise start goroutines
// without bound (found by a review). Past the bound a subscribe fails unavailable at
// once, naming the member and the bound, and is counted; those in progress complete.
func TestBounds_SessionRequestsInProgressPerPresentation(t *testing.T) {
	f := startSvcFleet(t, 2, nil)
	w := f.workerOn(t, 1, "ops-")
	greedy := testkit.DialConnector(t, f.Node(0).Endpoints()[0], wait)
	t.Cleanup(func() { _ = greedy.Close() })
	for i, member := range []string{"create", "attach"} {
		args, _ := json.Marshal(services.AttachArgs{Session: w})
		if _, err := greedy.RequestRaw(callCtx(t), services.NameCall, wire.CodecJSON, args,
			withMeta("svc", "meshnode.session-management"), withMeta("member", member), withMeta("rid", strconv.Itoa(i+1))); err != nil {
			t.Fatal(err)
		}
	}
	entered, release := services.HoldSessionOps(2)
	t.Cleanup(release)
	held := make(chan error, 2)
	for _, member := range []string{"score", "moves"} {
		go func() { held <- subscribeRaw(t, greedy, "test.board", member, services.ScopeSession) }()
	}
	for range 2 {
		select {
		case <-entered:
		case <-time.After(wait):
			t.Fatal("the two subscribes never got in progress")
		}
	}
	attacher := services.AttacherOf(f.Node(0).Services())
	before := attacher.Stats().OpsRefused
	refusedAtBound(t, "a session subscribe past the bound", subscribeRaw(t, greedy, "test.board", "score", services.ScopeSession),
		"test.board.score", "2 session requests in progress")
	if n := attacher.Stats().OpsRefused - before; n != 1 {
		t.Errorf("refusals counted %d, want 1", n)
	}
	release()
	for range 2 {
		if err := <-held; err != nil {
			t.Fatalf("a held subscribe: %v", err)
		}
	}
}
