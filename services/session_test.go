package services_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/meshnode/meshnode"
	"github.com/meshnode/meshnode/actor"
	"github.com/meshnode/meshnode/examples/sampleapp"
	"github.com/meshnode/meshnode/internal/testkit"
	"github.com/meshnode/meshnode/mesh/meshtest"
	"github.com/meshnode/meshnode/services"
	"github.com/meshnode/meshnode/session"
)

// The session-service fixture: the sample's server service nodeinfo on every node, a
// session service counter provided by session workers (Actors of kind "worker").

type AddArgs struct {
	N int `json:"n"`
}

type Value struct {
	Value  int    `json:"value"`
	Worker string `json:"worker,omitempty"`
	Node   string `json:"node,omitempty"`
}

type Counter struct {
	Add   services.Method[AddArgs, Value]
	Get   services.Method[struct{}, Value]
	Hold  services.Method[SayArgs, struct{}]
	Where services.Method[struct{}, Value] // the worker asks its node's nodeinfo
}

var CounterToken = services.Define("test.counter", func(d *services.Describer, c *Counter) {
	services.DescribeMethod(d, "add", &c.Add)
	services.DescribeMethod(d, "get", &c.Get)
	services.DescribeMethod(d, "hold", &c.Hold)
	services.DescribeMethod(d, "where", &c.Where)
})

func nodeInfoFacet(n *meshnode.Node) services.Facet {
	return sampleapp.NodeInfoFacet(func() string { return n.ID().RID }, func() int { return len(n.Membership().Live()) })
}

// counterFacet is the session facet of a worker: its value lives with the activation.
func counterFacet(hs *holds) services.Facet {
	return services.Facet{ID: "counter", Setup: func(env *services.Env) {
		info := services.Use(env, sampleapp.NodeInfoToken) // a server service of the worker's node
		var value int
		impl := echoImpl("worker", hs)
		services.Provide(env, CounterToken, &Counter{
			Add:  services.Func(func(_ context.Context, in AddArgs) (Value, error) { value += in.N; return Value{Value: value}, nil }),
			Get:  services.Func(func(context.Context, struct{}) (Value, error) { return Value{Value: value}, nil }),
			Hold: impl.Hold,
			Where: services.Func(func(ctx context.Context, _ struct{}) (Value, error) {
				d, err := info.Describe.Call(ctx, struct{}{})
				return Value{Value: value, Node: d.Node}, err
			}),
		})
	}}
}

type svcFleet struct {
	*meshtest.Cluster
	mu      sync.Mutex
	servers []*services.Host
	hs      *holds
}

func (f *svcFleet) server(i int) *services.Host {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.servers[i]
}

// startSvcFleet starts n nodes, each with a server host (nodeinfo, session
// management) served on its STREAM endpoint and the worker kind.
func startSvcFleet(t *testing.T, n int, authorize services.Authorize) *svcFleet {
	t.Helper()
	f := &svcFleet{servers: make([]*services.Host, n), hs: newHolds()}
	f.Cluster = meshtest.Start(t, n, meshtest.Options{Config: func(i int, cfg *meshnode.Config) {
		cfg.Kinds = []actor.Kind{services.WorkerKind("worker", services.WorkerOptions{
			Server:      func() *services.Host { return f.server(i) },
			HostOptions: services.HostOptions{Logger: quiet()},
		}, counterFacet(f.hs))}
		cfg.Streams = []string{"tcp://127.0.0.1:0"}
		cfg.Session = func(node *meshnode.Node) session.SessionType {
			att := services.NewAttacher(node.Binder(), "worker", authorize)
			h, err := services.NewHost(context.Background(), services.HostOptions{Name: "server-" + strconv.Itoa(i), Logger: quiet()},
				nodeInfoFacet(node), att.Facet())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = h.Close(context.Background()) })
			f.mu.Lock()
			f.servers[i] = h
			f.mu.Unlock()
			return services.NewStreamServer(h, att).Routes(session.NewMux("svc")).Type()
		}
	}})
	t.Cleanup(func() { closeOnce(f.hs.release) })
	return f
}

func closeOnce(ch chan struct{}) {
	select {
	case <-ch:
	default:
		close(ch)
	}
}

// workerOn returns a worker id placement puts on node i.
func (f *svcFleet) workerOn(t *testing.T, i int, prefix string) string {
	t.Helper()
	for k := 0; k < 1000; k++ {
		id := prefix + strconv.Itoa(k)
		fence, err := f.Node(0).Actors().Lookup(callCtx(t), "worker", id)
		if err != nil {
			t.Fatal(err)
		}
		if fence.Node == f.Node(i).ID() {
			return id
		}
	}
	t.Fatalf("no worker placed on node %d", i)
	return ""
}

// presentation is a client program: a services host over one STREAM connection.
type presentation struct {
	conn    *services.StreamConnection
	info    *sampleapp.NodeInfo
	mgmt    *services.SessionManagement
	counter *Counter
}

func (f *svcFleet) present(t *testing.T, node int) *presentation {
	t.Helper()
	c := testkit.DialConnector(t, f.Node(node).Endpoints()[0], wait)
	t.Cleanup(func() { _ = c.Close() })
	p := &presentation{conn: services.NewStreamConnection(c)}
	newHost(t, "presentation", []services.Connection{p.conn, p.conn.Session()}, services.Facet{ID: "ui", Setup: func(env *services.Env) {
		p.info = services.Use(env, sampleapp.NodeInfoToken)
		p.mgmt = services.Use(env, services.SessionManagementToken)
		p.counter = services.Use(env, CounterToken)
	}})
	return p
}

func (p *presentation) attach(t *testing.T, id string) services.Attachment {
	t.Helper()
	a, err := p.mgmt.Attach.Call(callCtx(t), services.AttachArgs{Actor: id})
	if err != nil {
		t.Fatalf("attach %s: %v", id, err)
	}
	return a
}

// R15: server and session services are separate graphs: session calls go to the
// attached worker only (before an attach they fail not_attached while server calls
// work), each scope answers unknown_service for the other's services, and a worker's
// session facets use the server services of the node they run on.
func TestR15_ServerAndSessionFacetsAreIsolated(t *testing.T) {
	f := startSvcFleet(t, 2, nil)
	w := f.workerOn(t, 1, "w-")
	p := f.present(t, 0)
	if d, err := p.info.Describe.Call(callCtx(t), struct{}{}); err != nil || d.Node != f.Node(0).ID().RID || d.Members != 2 {
		t.Fatalf("server service: %+v %v", d, err)
	}
	if _, err := p.counter.Get.Call(callCtx(t), struct{}{}); !errors.Is(err, services.ErrNotAttached) {
		t.Fatalf("a session service before attach: %v, want not_attached", err)
	}
	a := p.attach(t, w)
	if a.Node != f.Node(1).ID().RID {
		t.Errorf("attached to %+v, want the worker on node 1", a)
	}
	if v, err := p.counter.Add.Call(callCtx(t), AddArgs{N: 3}); err != nil || v.Value != 3 {
		t.Fatalf("counter.add on the worker: %+v %v", v, err)
	}
	if v, err := p.counter.Where.Call(callCtx(t), struct{}{}); err != nil || v.Node != f.Node(1).ID().RID {
		t.Errorf("the worker's server services: %+v %v, want node 1's nodeinfo", v, err)
	}
	server, session := p.conn, p.conn.Session()
	if _, err := server.Call(callCtx(t), services.Call{Service: "test.counter", Member: "get"}); !errors.Is(err, services.ErrUnknownService) {
		t.Errorf("a session service asked of the server: %v", err)
	}
	if _, err := session.Call(callCtx(t), services.Call{Service: "nodeinfo", Member: "describe"}); !errors.Is(err, services.ErrUnknownService) {
		t.Errorf("a server service asked of the worker: %v", err)
	}
}

// R16: attach is authorised by the server, from the identity it authenticated: the
// policy's answer is the caller's, and a caller with no STREAM session cannot attach.
func TestR16_AttachIsAuthorised(t *testing.T) {
	authorize := func(_ context.Context, c services.Client, id string) error {
		switch {
		case c.ID == "":
			return errors.New("no client")
		case strings.HasPrefix(id, "forbidden-"):
			return errors.New("not yours")
		case strings.HasPrefix(id, "ghost-"):
			return services.Errorf(services.CodeUnknownSession, "no session %s", id)
		}
		return nil
	}
	f := startSvcFleet(t, 2, authorize)
	p := f.present(t, 0)
	if _, err := p.mgmt.Attach.Call(callCtx(t), services.AttachArgs{Actor: "forbidden-1"}); !errors.Is(err, services.ErrNotAuthorized) {
		t.Errorf("a forbidden worker: %v, want not_authorized", err)
	}
	if _, err := p.mgmt.Attach.Call(callCtx(t), services.AttachArgs{Actor: "ghost-1"}); !errors.Is(err, services.ErrUnknownSession) {
		t.Errorf("an unknown worker: %v, want unknown_session", err)
	}
	if _, err := p.counter.Get.Call(callCtx(t), struct{}{}); !errors.Is(err, services.ErrNotAttached) {
		t.Errorf("after refused attaches: %v, want not_attached", err)
	}
	if _, err := p.mgmt.Detach.Call(callCtx(t), struct{}{}); !errors.Is(err, services.ErrNotAttached) {
		t.Errorf("detach with nothing attached: %v, want not_attached", err)
	}
	// A caller in the server's own process has no STREAM session to attach.
	var mgmt *services.SessionManagement
	newHost(t, "local", []services.Connection{services.NewLoopback(f.server(0), services.Client{ID: "local"})},
		services.Facet{ID: "local", Setup: func(env *services.Env) { mgmt = services.Use(env, services.SessionManagementToken) }})
	if _, err := mgmt.Attach.Call(callCtx(t), services.AttachArgs{Actor: "w-1"}); !errors.Is(err, services.ErrNotAuthorized) {
		t.Errorf("attach without a session: %v, want not_authorized", err)
	}
	p.attach(t, "allowed-1")
	if _, err := p.counter.Add.Call(callCtx(t), AddArgs{N: 1}); err != nil {
		t.Errorf("after an authorised attach: %v", err)
	}
}

// R17: switching the selected session: the same facade addresses the newly attached
// worker, each worker keeps its own state, and detach leaves not_attached.
func TestR17_SwitchingTheSelectedSession(t *testing.T) {
	f := startSvcFleet(t, 2, nil)
	w1, w2 := f.workerOn(t, 1, "one-"), f.workerOn(t, 0, "two-")
	p := f.present(t, 0)
	add := p.counter.Add // captured once, used across switches
	p.attach(t, w1)
	if v, err := add.Call(callCtx(t), AddArgs{N: 5}); err != nil || v.Value != 5 {
		t.Fatalf("w1: %+v %v", v, err)
	}
	p.attach(t, w2)
	if v, err := add.Call(callCtx(t), AddArgs{N: 2}); err != nil || v.Value != 2 {
		t.Fatalf("after switching to w2: %+v %v, want w2's own count", v, err)
	}
	p.attach(t, w1)
	if v, err := p.counter.Get.Call(callCtx(t), struct{}{}); err != nil || v.Value != 5 {
		t.Fatalf("back on w1: %+v %v", v, err)
	}
	if _, err := p.mgmt.Detach.Call(callCtx(t), struct{}{}); err != nil {
		t.Fatal(err)
	}
	if _, err := add.Call(callCtx(t), AddArgs{N: 1}); !errors.Is(err, services.ErrNotAttached) {
		t.Fatalf("after detach: %v, want not_attached", err)
	}
}

// R18: a frame of a previous selection is never applied to the new one: a call in
// flight when the presentation detaches ends with that attachment (its context is
// cancelled on the worker; the client gets an error, not a late result), and after a
// re-attach to the same worker (a new binding generation) only new calls run.
func TestR18_StaleFramesAreRejected(t *testing.T) {
	f := startSvcFleet(t, 2, nil)
	w := f.workerOn(t, 1, "stale-")
	p := f.present(t, 0)
	p.attach(t, w)
	late := make(chan error, 1)
	go func() { _, err := p.counter.Hold.Call(callCtx(t), SayArgs{Text: "old"}); late <- err }()
	<-f.hs.startedC
	if _, err := p.mgmt.Detach.Call(callCtx(t), struct{}{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the old attachment's call is cancelled on the worker", func() bool {
		err, ok := f.hs.endedWith("old")
		return ok && errors.Is(err, context.Canceled)
	})
	if err := <-late; err == nil {
		t.Fatal("the call of the detached selection returned a result")
	}
	p.attach(t, w)
	if v, err := p.counter.Add.Call(callCtx(t), AddArgs{N: 1}); err != nil || v.Value != 1 {
		t.Fatalf("a call of the new attachment: %+v %v", v, err)
	}
	// A hand-made frame naming the old request id on the new attachment finds nothing
	// to cancel, and disturbs nothing.
	if _, err := p.conn.Session().Call(callCtx(t), services.Call{Service: "test.counter", Member: "get", Args: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
}

// R19: request ids are per client on the worker: two presentations that attach the
// same worker in turn, with the same request ids, never see each other's calls; the
// replaced one's call is cancelled, the new one's runs to its end. (A worker serves
// one presentation at a time: a second attach replaces the first binding, and the
// binding protocol closes the replaced session.)
func TestR19_PerClientRequestCorrelationOnTheWorker(t *testing.T) {
	f := startSvcFleet(t, 2, nil)
	w := f.workerOn(t, 1, "shared-")
	a, b := f.present(t, 0), f.present(t, 0)
	a.attach(t, w) // request id 1 on each connection...
	errA := make(chan error, 1)
	go func() { _, err := a.counter.Hold.Call(callCtx(t), SayArgs{Text: "a"}); errA <- err }() // ...and id 2
	<-f.hs.startedC
	b.attach(t, w) // replaces a's binding of the worker
	errB := make(chan error, 1)
	go func() { _, err := b.counter.Hold.Call(callCtx(t), SayArgs{Text: "b"}); errB <- err }() // id 2 again
	<-f.hs.startedC
	eventually(t, "a's call ends with its attachment", func() bool {
		err, ok := f.hs.endedWith("a")
		return ok && errors.Is(err, context.Canceled)
	})
	if err := <-errA; err == nil {
		t.Fatal("a's call returned a result after a was replaced")
	}
	if _, ok := f.hs.endedWith("b"); ok {
		t.Fatal("b's call ended with a's")
	}
	closeOnce(f.hs.release)
	if err := <-errB; err != nil {
		t.Fatalf("b's call: %v", err)
	}
	// The binding protocol closes a replaced session (record 51): a's later calls fail.
	if _, err := a.counter.Get.Call(callCtx(t), struct{}{}); err == nil {
		t.Error("a, replaced, still reaches the worker")
	}
}
