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
	"github.com/meshnode/meshnode/examples/sampleapp"
	"github.com/meshnode/meshnode/internal/testkit"
	"github.com/meshnode/meshnode/mesh/meshtest"
	"github.com/meshnode/meshnode/services"
	"github.com/meshnode/meshnode/session"
	"github.com/meshnode/meshnode/session/connector"
)

// The session-service fixture: the sample's server service nodeinfo on every node, a
// session service counter provided by session workers (Actors of kind "worker"), the
// nodes' own SessionManagement, and presentations over STREAM or loopback.

type AddArgs struct {
	N int `json:"n"`
}

type Value struct {
	Value  int    `json:"value"`
	Worker string `json:"worker,omitempty"`
	Node   string `json:"node,omitempty"`
	Client string `json:"client,omitempty"`
}

type Counter struct {
	Add   services.Method[AddArgs, Value]
	Get   services.Method[struct{}, Value]
	Hold  services.Method[SayArgs, struct{}]
	Where services.Method[struct{}, Value] // the worker asks its node's nodeinfo
	Who   services.Method[struct{}, Value] // the calling presentation, as the worker sees it
}

var CounterToken = services.Define("test.counter", func(d *services.Describer, c *Counter) {
	services.DescribeMethod(d, "add", &c.Add)
	services.DescribeMethod(d, "get", &c.Get)
	services.DescribeMethod(d, "hold", &c.Hold)
	services.DescribeMethod(d, "where", &c.Where)
	services.DescribeMethod(d, "who", &c.Who)
})

func nodeInfoFacet(n *meshnode.Node) services.Facet {
	return sampleapp.NodeInfoFacet(func() string { return n.ID().RID }, func() int { return len(n.Membership().Live()) })
}

// clientLog counts, per worker, the attachments its OnClient callbacks saw begin and
// end.
type clientLog struct {
	mu       sync.Mutex
	attached map[string]int
	detached map[string]int
}

func (l *clientLog) note(worker string, attached bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if attached {
		l.attached[worker]++
	} else {
		l.detached[worker]++
	}
}

// live returns how many attachments of worker are open.
func (l *clientLog) live(worker string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.attached[worker] - l.detached[worker]
}

// counterFacet is the session facet of a worker: its value lives with the activation.
func counterFacet(hs *holds, log *clientLog) services.Facet {
	return services.Facet{ID: "counter", Setup: func(env *services.Env) {
		info := services.Use(env, sampleapp.NodeInfoToken) // a server service of the worker's node
		var value int
		var me string
		impl := echoImpl("worker", hs)
		env.OnActivate(func(ctx context.Context) error {
			d, err := info.Describe.Call(ctx, struct{}{})
			me = d.Node
			return err
		})
		env.OnClient(func(_ context.Context, c services.Client, attached bool) { log.note(me, attached) })
		services.Provide(env, CounterToken, &Counter{
			Add:  services.Func(func(_ context.Context, in AddArgs) (Value, error) { value += in.N; return Value{Value: value}, nil }),
			Get:  services.Func(func(context.Context, struct{}) (Value, error) { return Value{Value: value}, nil }),
			Hold: impl.Hold,
			Where: services.Func(func(ctx context.Context, _ struct{}) (Value, error) {
				d, err := info.Describe.Call(ctx, struct{}{})
				return Value{Value: value, Node: d.Node}, err
			}),
			Who: services.Func(func(ctx context.Context, _ struct{}) (Value, error) {
				c, _ := services.ClientOf(ctx)
				return Value{Client: c.ID}, nil
			}),
		})
	}}
}

type svcFleet struct {
	*meshtest.Cluster
	hs      *holds
	clients *clientLog
}

// startSvcFleet starts n nodes, each with a server host (nodeinfo, session
// management) served on its STREAM endpoint, and the worker kind.
func startSvcFleet(t *testing.T, n int, authorize services.Authorize) *svcFleet {
	t.Helper()
	return startSvcFleetWith(t, n, authorize, nil)
}

// startSvcFleetWith is startSvcFleet with more configuration of node i (nil: none).
func startSvcFleetWith(t *testing.T, n int, authorize services.Authorize, more func(i int, cfg *meshnode.Config)) *svcFleet {
	t.Helper()
	f := &svcFleet{hs: newHolds(), clients: &clientLog{attached: map[string]int{}, detached: map[string]int{}}}
	f.Cluster = meshtest.Start(t, n, meshtest.Options{Config: func(i int, cfg *meshnode.Config) {
		cfg.Streams = []string{"tcp://127.0.0.1:0"}
		cfg.Session = func(node *meshnode.Node) session.SessionType {
			// whoami answers the identity the server authenticated the session as.
			mux := session.NewMux("svc").Request("whoami", func(_ context.Context, p *session.Packet) error {
				return p.ReplyValue(map[string]string{"id": node.ID().RID + "/" + strconv.FormatUint(uint64(p.Peer.RoutingID()), 10)})
			})
			return node.ServeServices(mux).Type()
		}
		cfg.Services = func(node *meshnode.Node) []services.Facet { return []services.Facet{nodeInfoFacet(node)} }
		cfg.ServiceWorker = &meshnode.ServiceWorker{Kind: "worker", Facets: []services.Facet{counterFacet(f.hs, f.clients), boardFacet("worker", 0), dialogOwner("worker", f.hs), indexFacet()}, Authorize: authorize}
		if more != nil {
			more(i, cfg)
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

// workerOn returns a session id placement puts on node i.
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

// presentation is a client program: a services host over one connection (STREAM or
// loopback) to a node's server, and the session scope of the same connection.
type presentation struct {
	id         string // the identity the server authenticated
	server     services.Connection
	session    services.Connection
	info       *sampleapp.NodeInfo
	mgmt       *services.SessionManagement
	counter    *Counter
	board      *Board
	dialogs    *DialogAdmin
	index      *Index
	env        *services.Env        // the presentation facet's, during setup
	stream     *connector.Connector // nil over loopback
	disconnect func()
}

// presentationTransports are the two ways a presentation reaches its node's server.
var presentationTransports = []string{"stream", "loopback"}

var loopbackIDs sync.Map

func (f *svcFleet) present(t *testing.T, node int, tr string, setup ...func(p *presentation)) *presentation {
	t.Helper()
	p := f.connectPresentation(t, node, tr)
	newHost(t, "presentation", []services.Connection{p.server, p.session}, services.Facet{ID: "ui", Setup: func(env *services.Env) {
		p.info = services.Use(env, sampleapp.NodeInfoToken)
		p.mgmt = services.Use(env, services.SessionManagementToken)
		p.counter = services.Use(env, CounterToken)
		p.board = services.Use(env, BoardToken)
		p.dialogs = services.Use(env, DialogAdminToken)
		p.index = services.Use(env, IndexToken)
		p.env = env
		for _, fn := range setup {
			fn(p)
		}
	}})
	return p
}

// connectPresentation connects a client program to node's server over tr (its
// server and session connections) without a host on them yet.
func (f *svcFleet) connectPresentation(t *testing.T, node int, tr string) *presentation {
	t.Helper()
	p := &presentation{}
	switch tr {
	case "stream":
		c := testkit.DialConnector(t, f.Node(node).Endpoints()[0], wait)
		t.Cleanup(func() { _ = c.Close() })
		var who struct{ ID string }
		if err := c.Request(callCtx(t), "whoami", map[string]any{}, &who); err != nil {
			t.Fatal(err)
		}
		conn := services.NewStreamConnection(c)
		p.id, p.server, p.session, p.stream = who.ID, conn, conn.Session(), c
		p.disconnect = func() { _ = c.Close() }
	case "loopback":
		n, _ := loopbackIDs.LoadOrStore(t.Name(), new(int))
		*n.(*int)++
		p.id = "loop-" + strconv.Itoa(*n.(*int))
		l := services.NewLoopback(f.Node(node).Services(), services.Client{ID: p.id})
		t.Cleanup(l.Close)
		p.server, p.session, p.disconnect = l, l.Session(), l.Close
	}
	return p
}

func (p *presentation) create(t *testing.T, id string) {
	t.Helper()
	if r, err := p.mgmt.Create.Call(callCtx(t), services.CreateArgs{Session: id}); err != nil || r.Session != id {
		t.Fatalf("create %s: %+v %v", id, r, err)
	}
}

func (p *presentation) attach(t *testing.T, id string) services.Attachment {
	t.Helper()
	a, err := p.mgmt.Attach.Call(callCtx(t), services.AttachArgs{Session: id})
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
	for _, tr := range presentationTransports {
		t.Run(tr, func(t *testing.T) {
			p := f.present(t, 0, tr)
			if d, err := p.info.Describe.Call(callCtx(t), struct{}{}); err != nil || d.Node != f.Node(0).ID().RID || d.Members != 2 {
				t.Fatalf("server service: %+v %v", d, err)
			}
			if _, err := p.counter.Get.Call(callCtx(t), struct{}{}); !errors.Is(err, services.ErrNotAttached) {
				t.Fatalf("a session service before attach: %v, want not_attached", err)
			}
			if tr == "stream" {
				p.create(t, w)
			}
			a := p.attach(t, w)
			if a.Node != f.Node(1).ID().RID || a.Session != w || a.Attachment == "" {
				t.Errorf("attached to %+v, want the worker on node 1", a)
			}
			before, _ := p.counter.Get.Call(callCtx(t), struct{}{})
			if v, err := p.counter.Add.Call(callCtx(t), AddArgs{N: 3}); err != nil || v.Value != before.Value+3 {
				t.Fatalf("counter.add on the worker: %+v %v", v, err)
			}
			if v, err := p.counter.Where.Call(callCtx(t), struct{}{}); err != nil || v.Node != f.Node(1).ID().RID {
				t.Errorf("the worker's server services: %+v %v, want node 1's nodeinfo", v, err)
			}
			if _, err := p.server.Call(callCtx(t), services.Call{Service: "test.counter", Member: "get"}); !errors.Is(err, services.ErrUnknownService) {
				t.Errorf("a session service asked of the server: %v", err)
			}
			if _, err := p.session.Call(callCtx(t), services.Call{Service: "nodeinfo", Member: "describe"}); !errors.Is(err, services.ErrUnknownService) {
				t.Errorf("a server service asked of the worker: %v", err)
			}
		})
	}
}

// R16: create, remove and attach are authorised by the server from the identity it
// authenticated (the policy sees exactly that identity, and its answer is the
// caller's), and a session nobody created, or one removed, is unknown_session (the
// directory's answer, not the policy's); no worker is started for it.
func TestR16_AttachIsAuthorised(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]string{} // session → client id the policy saw
	authorize := func(_ context.Context, c services.Client, action services.Action, id string) error {
		mu.Lock()
		seen[string(action)+" "+id] = c.ID
		mu.Unlock()
		if strings.HasPrefix(id, "forbidden-") && action == services.ActionAttach {
			return errors.New("not yours")
		}
		if strings.HasPrefix(id, "nocreate-") && action == services.ActionCreate {
			return services.Errorf(services.CodeNotAuthorized, "no creating %s", id)
		}
		return nil
	}
	f := startSvcFleet(t, 2, authorize)
	for _, tr := range presentationTransports {
		t.Run(tr, func(t *testing.T) {
			p := f.present(t, 0, tr)
			p.create(t, "forbidden-"+tr)
			if _, err := p.mgmt.Attach.Call(callCtx(t), services.AttachArgs{Session: "forbidden-" + tr}); !errors.Is(err, services.ErrNotAuthorized) {
				t.Errorf("a forbidden session: %v, want not_authorized", err)
			}
			if _, err := p.mgmt.Create.Call(callCtx(t), services.CreateArgs{Session: "nocreate-" + tr}); !errors.Is(err, services.ErrNotAuthorized) {
				t.Errorf("a forbidden create: %v, want not_authorized", err)
			}
			if _, err := p.mgmt.Attach.Call(callCtx(t), services.AttachArgs{Session: "ghost-" + tr}); !errors.Is(err, services.ErrUnknownSession) {
				t.Errorf("a session nobody created: %v, want unknown_session", err)
			}
			p.create(t, "gone-"+tr)
			if _, err := p.mgmt.Remove.Call(callCtx(t), services.SessionRef{Session: "gone-" + tr}); err != nil {
				t.Fatal(err)
			}
			if _, err := p.mgmt.Attach.Call(callCtx(t), services.AttachArgs{Session: "gone-" + tr}); !errors.Is(err, services.ErrUnknownSession) {
				t.Errorf("a removed session: %v, want unknown_session", err)
			}
			if _, err := p.mgmt.Remove.Call(callCtx(t), services.SessionRef{Session: "gone-" + tr}); !errors.Is(err, services.ErrUnknownSession) {
				t.Errorf("removing it again: %v, want unknown_session", err)
			}
			if _, err := p.counter.Get.Call(callCtx(t), struct{}{}); !errors.Is(err, services.ErrNotAttached) {
				t.Errorf("after refused attaches: %v, want not_attached", err)
			}
			if _, err := p.mgmt.Detach.Call(callCtx(t), struct{}{}); !errors.Is(err, services.ErrNotAttached) {
				t.Errorf("detach with nothing attached: %v, want not_attached", err)
			}
			for i := 0; i < f.Len(); i++ {
				for _, a := range f.Node(i).Actors().Active() {
					if a.ID == "ghost-"+tr {
						t.Errorf("a worker was started for a session nobody created, on node %d", i)
					}
				}
			}
			p.create(t, "allowed-"+tr)
			p.attach(t, "allowed-"+tr)
			if _, err := p.counter.Add.Call(callCtx(t), AddArgs{N: 1}); err != nil {
				t.Errorf("after an authorised attach: %v", err)
			}
			mu.Lock()
			defer mu.Unlock()
			for _, k := range []string{"create allowed-" + tr, "attach allowed-" + tr, "attach forbidden-" + tr, "remove gone-" + tr} {
				if seen[k] != p.id {
					t.Errorf("the policy saw %q for %s, want the authenticated identity %q", seen[k], k, p.id)
				}
			}
		})
	}
}

// R17: switching the selected session: the same facade addresses the newly attached
// worker, each worker keeps its own state, a switch cancels the presentation's calls
// on the worker it leaves (and nothing else there), and detach leaves not_attached.
func TestR17_SwitchingTheSelectedSession(t *testing.T) {
	f := startSvcFleet(t, 2, nil)
	w1, w2 := f.workerOn(t, 1, "one-"), f.workerOn(t, 0, "two-")
	for _, tr := range presentationTransports {
		t.Run(tr, func(t *testing.T) {
			p, other := f.present(t, 0, tr), f.present(t, 1, tr)
			s1, s2 := w1+tr, w2+tr
			s1 = f.workerOn(t, 1, s1+"-")
			s2 = f.workerOn(t, 0, s2+"-")
			p.create(t, s1)
			p.create(t, s2)
			add := p.counter.Add // captured once, used across switches
			p.attach(t, s1)
			other.attach(t, s1)
			if v, err := add.Call(callCtx(t), AddArgs{N: 5}); err != nil || v.Value != 5 {
				t.Fatalf("s1: %+v %v", v, err)
			}
			held := make(chan error, 2)
			go func() { _, err := p.counter.Hold.Call(callCtx(t), SayArgs{Text: "leaving-" + tr}); held <- err }()
			go func() { _, err := other.counter.Hold.Call(callCtx(t), SayArgs{Text: "staying-" + tr}); held <- err }()
			waitStarted(t, f.hs, "leaving-"+tr, "staying-"+tr)
			p.attach(t, s2)
			eventually(t, "the switch cancels the presentation's call on the worker it left", func() bool {
				err, ok := f.hs.endedWith("leaving-" + tr)
				return ok && errors.Is(err, context.Canceled)
			})
			if err := <-held; err == nil {
				t.Fatal("the call of the previous selection returned a result")
			}
			if _, ended := f.hs.endedWith("staying-" + tr); ended {
				t.Fatal("the switch ended another presentation's call on the worker")
			}
			if v, err := add.Call(callCtx(t), AddArgs{N: 2}); err != nil || v.Value != 2 {
				t.Fatalf("after switching to s2: %+v %v, want s2's own count", v, err)
			}
			p.attach(t, s1)
			if v, err := p.counter.Get.Call(callCtx(t), struct{}{}); err != nil || v.Value != 5 {
				t.Fatalf("back on s1: %+v %v", v, err)
			}
			if _, err := p.mgmt.Detach.Call(callCtx(t), struct{}{}); err != nil {
				t.Fatal(err)
			}
			if _, err := add.Call(callCtx(t), AddArgs{N: 1}); !errors.Is(err, services.ErrNotAttached) {
				t.Fatalf("after detach: %v, want not_attached", err)
			}
			_ = other.disconnect
		})
	}
}

// waitStarted waits until the Hold calls tagged tags all started.
func waitStarted(t *testing.T, hs *holds, tags ...string) {
	t.Helper()
	eventually(t, "the held calls start", func() bool {
		hs.mu.Lock()
		defer hs.mu.Unlock()
		for _, tag := range tags {
			if hs.started[tag] == 0 {
				return false
			}
		}
		return true
	})
}

// R18: a frame of a previous route is never applied to the current one: a call in
// flight when the presentation detaches ends with that attachment (cancelled on the
// worker; the client gets an error, not a late result), and a call that still names
// the ended attachment when it reaches the worker (a delayed frame) is refused
// stale_generation without running, while the presentation's new attachment works.
func TestR18_StaleFramesAreRejected(t *testing.T) {
	f := startSvcFleet(t, 2, nil)
	for _, tr := range presentationTransports {
		t.Run(tr, func(t *testing.T) {
			w := f.workerOn(t, 1, "stale-"+tr+"-")
			p := f.present(t, 0, tr)
			p.create(t, w)
			p.attach(t, w)
			att := services.AttacherOf(f.Node(0).Services())
			oldKey := att.AttachmentKeyOf(p.id)
			if oldKey == "" {
				t.Fatal("no route for the presentation")
			}
			late := make(chan error, 1)
			go func() { _, err := p.counter.Hold.Call(callCtx(t), SayArgs{Text: "old-" + tr}); late <- err }()
			waitStarted(t, f.hs, "old-"+tr)
			if _, err := p.mgmt.Detach.Call(callCtx(t), struct{}{}); err != nil {
				t.Fatal(err)
			}
			eventually(t, "the old attachment's call is cancelled on the worker", func() bool {
				err, ok := f.hs.endedWith("old-" + tr)
				return ok && errors.Is(err, context.Canceled)
			})
			if err := <-late; err == nil {
				t.Fatal("the call of the detached selection returned a result")
			}
			p.attach(t, w)
			if v, err := p.counter.Add.Call(callCtx(t), AddArgs{N: 1}); err != nil || v.Value != 1 {
				t.Fatalf("a call of the new attachment: %+v %v", v, err)
			}
			err := services.RouteCallAs(callCtx(t), f.Node(0).Actors(), "worker", w, oldKey, "test.counter", "add", []byte(`{"n":100}`))
			if !errors.Is(err, services.ErrStaleGeneration) {
				t.Fatalf("a frame of the ended attachment: %v, want stale_generation", err)
			}
			if v, err := p.counter.Get.Call(callCtx(t), struct{}{}); err != nil || v.Value != 1 {
				t.Fatalf("after the stale frame: %+v %v, want 1 (it never ran)", v, err)
			}
		})
	}
}

// R19: request ids are per client on the worker: two presentations attached to the
// same worker at once (one over each transport, on both nodes), whose calls carry
// the same request ids, never see each other's calls: a cancel of one's call ends
// that call only, the other's runs to its end, and both stay attached.
func TestR19_PerClientRequestCorrelationOnTheWorker(t *testing.T) {
	f := startSvcFleet(t, 2, nil)
	w := f.workerOn(t, 1, "shared-")
	a, b := f.present(t, 0, "stream"), f.present(t, 1, "loopback")
	c := f.present(t, 0, "loopback")
	a.create(t, w)
	for _, p := range []*presentation{a, b, c} {
		p.attach(t, w)
	}
	// Each connection numbers its requests from 1: their held calls carry equal ids.
	ctxA, cancelA := context.WithCancel(callCtx(t))
	errs := map[string]chan error{"a": make(chan error, 1), "b": make(chan error, 1), "c": make(chan error, 1)}
	go func() { _, err := a.counter.Hold.Call(ctxA, SayArgs{Text: "a"}); errs["a"] <- err }()
	go func() { _, err := b.counter.Hold.Call(callCtx(t), SayArgs{Text: "b"}); errs["b"] <- err }()
	go func() { _, err := c.counter.Hold.Call(callCtx(t), SayArgs{Text: "c"}); errs["c"] <- err }()
	waitStarted(t, f.hs, "a", "b", "c")
	cancelA()
	eventually(t, "a's cancel ends a's call on the worker", func() bool {
		err, ok := f.hs.endedWith("a")
		return ok && errors.Is(err, context.Canceled)
	})
	if err := <-errs["a"]; !errors.Is(err, services.ErrCancelled) {
		t.Fatalf("a's cancelled call: %v", err)
	}
	for _, tag := range []string{"b", "c"} {
		if _, ok := f.hs.endedWith(tag); ok {
			t.Fatalf("a's cancel ended %s's call", tag)
		}
	}
	closeOnce(f.hs.release)
	for _, tag := range []string{"b", "c"} {
		if err := <-errs[tag]; err != nil {
			t.Fatalf("%s's call: %v", tag, err)
		}
	}
	for name, p := range map[string]*presentation{"a": a, "b": b, "c": c} {
		v, err := p.counter.Who.Call(callCtx(t), struct{}{})
		if err != nil || v.Client != p.id {
			t.Fatalf("%s after the others' calls: %+v %v, want its own identity %q", name, v, err, p.id)
		}
	}
}

// Issue 28: a second presentation attaching to a worker does not cut off the first:
// both stay attached with their connections open, each gets its own answers, and the
// worker counts both attachments.
func TestIssue28_SecondPresentationDoesNotCutOffTheFirst(t *testing.T) {
	f := startSvcFleet(t, 2, nil)
	w := f.workerOn(t, 1, "two-")
	first, second := f.present(t, 0, "stream"), f.present(t, 0, "stream")
	first.create(t, w)
	first.attach(t, w)
	if _, err := first.counter.Add.Call(callCtx(t), AddArgs{N: 1}); err != nil {
		t.Fatal(err)
	}
	second.attach(t, w)
	for i, p := range []*presentation{first, second, first} {
		if v, err := p.counter.Add.Call(callCtx(t), AddArgs{N: 1}); err != nil || v.Value != i+2 {
			t.Fatalf("call %d after the second attach: %+v %v", i, v, err)
		}
	}
	if st := first.stream.State(); st != connector.StateConnected {
		t.Fatalf("the first presentation's connection is %v", st)
	}
	if n := f.clients.live(f.Node(1).ID().RID); n != 2 {
		t.Fatalf("the worker has %d attachments open, want 2", n)
	}
}

// Issue 28: attach and detach of one presentation run one at a time: a burst of
// concurrent attaches (to several sessions) and detaches leaves exactly the last
// selection's attachment, on one worker, and the node subscribed to that worker only.
func TestIssue28_ConcurrentAttachAndDetachLeakNothing(t *testing.T) {
	f := startSvcFleet(t, 1, nil)
	p := f.present(t, 0, "stream")
	ids := []string{"burst-0", "burst-1", "burst-2", "burst-3"}
	for _, id := range ids {
		p.create(t, id)
	}
	var wg sync.WaitGroup
	for i := 0; i < 48; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i%5 == 4 {
				_, _ = p.mgmt.Detach.Call(callCtx(t), struct{}{})
				return
			}
			if _, err := p.mgmt.Attach.Call(callCtx(t), services.AttachArgs{Session: ids[i%len(ids)]}); err != nil {
				t.Errorf("attach %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	p.attach(t, ids[0])
	rid := f.Node(0).ID().RID
	eventually(t, "one attachment stays open", func() bool { return f.clients.live(rid) == 1 })
	st := services.AttacherOf(f.Node(0).Services()).Stats()
	if st.Attached != 1 || st.WorkerTopics != 1 {
		t.Fatalf("after the burst: %+v, want one attached presentation and one worker topic", st)
	}
	if v, err := p.counter.Who.Call(callCtx(t), struct{}{}); err != nil || v.Client != p.id {
		t.Fatalf("a call after the burst: %+v %v", v, err)
	}
}

// Issue 28: a session is created and removed through SessionManagement: create
// answers the id (one made up when none is given), a second create of it is
// session_exists, and remove detaches the presentations attached to it (they are told
// detached, their session calls fail not_attached).
func TestIssue28_SessionsAreCreatedAndRemoved(t *testing.T) {
	f := startSvcFleet(t, 2, nil)
	p := f.present(t, 0, "stream")
	made, err := p.mgmt.Create.Call(callCtx(t), services.CreateArgs{})
	if err != nil || !strings.HasPrefix(made.Session, "s-") {
		t.Fatalf("create with no id: %+v %v", made, err)
	}
	if _, err := p.mgmt.Create.Call(callCtx(t), services.CreateArgs{Session: made.Session}); !errors.Is(err, services.ErrSessionExists) {
		t.Fatalf("create it again: %v, want session_exists", err)
	}
	if _, err := p.mgmt.Create.Call(callCtx(t), services.CreateArgs{Session: "bad id"}); !errors.Is(err, services.ErrInvalidArguments) {
		t.Fatalf("a bad id: %v, want invalid_arguments", err)
	}
	notices := make(chan string, 16)
	p.stream.Handle(services.NameAttachment, func(m connector.Message) {
		var n struct{ State, Code string }
		_ = json.Unmarshal(m.Payload, &n)
		notices <- n.State + "/" + n.Code
	})
	q := f.present(t, 1, "loopback")
	p.attach(t, made.Session)
	q.attach(t, made.Session)
	if _, err := p.counter.Add.Call(callCtx(t), AddArgs{N: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := q.mgmt.Remove.Call(callCtx(t), services.SessionRef{Session: made.Session}); err != nil {
		t.Fatal(err)
	}
	for {
		n := <-notices
		if n == "detached/unknown_session" {
			break
		}
	}
	for name, x := range map[string]*presentation{"stream": p, "loopback": q} {
		eventually(t, name+" is detached", func() bool {
			_, err := x.counter.Get.Call(callCtx(t), struct{}{})
			return errors.Is(err, services.ErrNotAttached)
		})
	}
}

// A call running on a worker that stops (deactivated, as a crash of the worker would
// be) fails session_unavailable, typed, even when the method returns its context's
// error: never internal, never a hang.
func TestIssue28_CallCutByItsWorkerIsTyped(t *testing.T) {
	f := startSvcFleet(t, 2, nil)
	for _, tr := range presentationTransports {
		t.Run(tr, func(t *testing.T) {
			w := f.workerOn(t, 1, "cut-"+tr+"-")
			p := f.present(t, 0, tr)
			p.create(t, w)
			p.attach(t, w)
			cut := make(chan error, 1)
			go func() { _, err := p.counter.Hold.Call(callCtx(t), SayArgs{Text: "cut-" + tr}); cut <- err }()
			waitStarted(t, f.hs, "cut-"+tr)
			f.Node(1).Actors().Deactivate(w)
			err := <-cut
			var se *services.Error
			if !errors.As(err, &se) || se.Code != services.CodeSessionUnavailable {
				t.Fatalf("a call cut by its worker's end: %v, want %s", err, services.CodeSessionUnavailable)
			}
			if err, ok := f.hs.endedWith("cut-" + tr); !ok || !errors.Is(err, context.Canceled) {
				t.Fatalf("the method's context: %v %v, want cancelled", err, ok)
			}
		})
	}
}
