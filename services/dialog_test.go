package services_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/meshnode/meshnode/services"
)

// The keyed contract the instance tests use: dialogs keyed by an id, each with a
// replicated request and an answer method, and an admin singleton of the same facet
// that opens and closes them (the only holder of the instances handle).

type Question struct {
	Text string `json:"text"`
}

type AnswerArgs struct {
	Choice string `json:"choice"`
}

type Answered struct {
	Key    string `json:"key"`
	Choice string `json:"choice"`
	By     string `json:"by"`
}

type Dialog struct {
	Request services.State[Question]
	Answer  services.Method[AnswerArgs, Answered]
	Slow    services.Method[SayArgs, struct{}] // runs until released or cancelled
}

var DialogToken = services.Define("test.dialog", func(d *services.Describer, q *Dialog) {
	services.DescribeState(d, "request", &q.Request)
	services.DescribeMethod(d, "answer", &q.Answer)
	services.DescribeMethod(d, "slow", &q.Slow)
})

type OpenArgs struct {
	Key  string `json:"key"`
	Text string `json:"text"`
}

type KeyArgs struct {
	Key string `json:"key"`
}

type DialogAdmin struct {
	Open    services.Method[OpenArgs, struct{}]
	Close   services.Method[KeyArgs, struct{}]
	Dialogs services.State[map[string]string] // the open dialogs' texts: what the owner adds again after a move
}

var DialogAdminToken = services.Define("test.dialog-admin", func(d *services.Describer, a *DialogAdmin) {
	services.DescribeMethod(d, "open", &a.Open)
	services.DescribeMethod(d, "close", &a.Close)
	services.DescribeState(d, "dialogs", &a.Dialogs)
})

// dialogOwner is the facet that owns the dialogs; hs lets a test hold Slow calls. It
// keeps the open dialogs in a state, so that a worker's move carries them and the owner
// adds them again when it activates on the new node (new generations).
func dialogOwner(by string, hs *holds) services.Facet {
	return services.Facet{ID: "dialogs", Setup: func(env *services.Env) {
		inst := services.ProvideMany(env, DialogToken)
		var mu sync.Mutex
		closers := map[string]func(){}
		open := services.NewState(map[string]string{})
		add := func(key, text string) error {
			impl := &Dialog{
				Request: services.NewState(Question{Text: text}),
				Answer: services.Func(func(_ context.Context, a AnswerArgs) (Answered, error) {
					return Answered{Key: key, Choice: a.Choice, By: by}, nil
				}),
				Slow: echoImpl(by, hs).Hold,
			}
			closeIt, err := inst.Add(key, impl)
			if err != nil {
				return services.Errorf("dialog_exists", "%v", err)
			}
			mu.Lock()
			closers[key] = closeIt
			mu.Unlock()
			return nil
		}
		setOpen := func(ctx context.Context, key, text string, on bool) {
			cur, _ := open.Value()
			next := make(map[string]string, len(cur)+1)
			for k, v := range cur {
				next[k] = v
			}
			if on {
				next[key] = text
			} else {
				delete(next, key)
			}
			_ = open.Set(ctx, next)
		}
		env.OnActivate(func(context.Context) error {
			cur, _ := open.Value()
			for key, text := range cur {
				if err := add(key, text); err != nil {
					return err
				}
			}
			return nil
		})
		services.Provide(env, DialogAdminToken, &DialogAdmin{
			Dialogs: open,
			Open: services.Func(func(ctx context.Context, in OpenArgs) (struct{}, error) {
				if err := add(in.Key, in.Text); err != nil {
					return struct{}{}, err
				}
				setOpen(ctx, in.Key, in.Text, true)
				return struct{}{}, nil
			}),
			Close: services.Func(func(ctx context.Context, in KeyArgs) (struct{}, error) {
				mu.Lock()
				closeIt := closers[in.Key]
				delete(closers, in.Key)
				mu.Unlock()
				if closeIt != nil {
					closeIt()
				}
				setOpen(ctx, in.Key, "", false)
				return struct{}{}, nil
			}),
		})
	}}
}

// tasks records what an observer's tasks saw: "start key#gen text", "end key#gen" in
// order, what each read of its state at start, and each task's facade.
type tasks struct {
	mu      sync.Mutex
	log     []string
	facades map[string]*Dialog // key#n → the facade the task got, n counting starts
	starts  map[string]int
	cold    []string // tasks that found their state not hydrated
}

func newTasks() *tasks {
	return &tasks{facades: map[string]*Dialog{}, starts: map[string]int{}}
}

// handler is an Observe handler: it reads the instance's state, records, and waits
// for its context.
func (ts *tasks) handler(ctx context.Context, key string, d *Dialog) error {
	q, ok := d.Request.Value()
	ts.mu.Lock()
	ts.starts[key]++
	n := ts.starts[key]
	ts.facades[fmt.Sprintf("%s#%d", key, n)] = d
	if !ok {
		ts.cold = append(ts.cold, key)
	}
	ts.log = append(ts.log, fmt.Sprintf("start %s#%d %s", key, n, q.Text))
	ts.mu.Unlock()
	<-ctx.Done()
	ts.mu.Lock()
	ts.log = append(ts.log, fmt.Sprintf("end %s#%d", key, n))
	ts.mu.Unlock()
	return ctx.Err()
}

// has reports whether the log has every line of want (in that order, others between).
func (ts *tasks) has(want ...string) bool {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	i := 0
	for _, l := range ts.log {
		if i < len(want) && l == want[i] {
			i++
		}
	}
	return i == len(want)
}

func (ts *tasks) running() []string {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	live := map[string]bool{}
	for _, l := range ts.log {
		f := strings.Fields(l)
		live[f[1]] = f[0] == "start"
	}
	var out []string
	for k, v := range live {
		if v {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

func (ts *tasks) facade(key string) *Dialog {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.facades[key]
}

func (ts *tasks) lines() []string {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return append([]string(nil), ts.log...)
}

// dialogRig is an observer of dialogs and an admin, over one way.
type dialogRig struct {
	admin *DialogAdmin
	// observer makes one more observing consumer (its tasks recorded in ts).
	observer func(t *testing.T, ts *tasks) *DialogAdmin
	hs       *holds
	// switchTo, on a session way, attaches the first observer to another session
	// whose worker has its own dialogs (nil elsewhere); closeFirst closes its host.
	switchTo   func(t *testing.T) *DialogAdmin
	closeFirst func()
}

type dialogWay struct {
	name  string
	start func(t *testing.T, ts *tasks) *dialogRig
}

func dialogWays() []dialogWay {
	var ways []dialogWay
	for _, tr := range transports {
		ways = append(ways, dialogWay{tr.name, func(t *testing.T, ts *tasks) *dialogRig {
			hs := newHolds()
			t.Cleanup(func() { closeOnce(hs.release) })
			provider := newHost(t, "provider", nil, dialogOwner("provider", hs))
			rig := &dialogRig{hs: hs}
			rig.observer = func(t *testing.T, ts *tasks) *DialogAdmin {
				conn, _ := tr.connect(t, provider)
				var admin *DialogAdmin
				h := newHost(t, "observer", []services.Connection{conn}, services.Facet{ID: "ui", Setup: func(env *services.Env) {
					admin = services.Use(env, DialogAdminToken)
					services.Observe(env, DialogToken, ts.handler)
				}})
				if rig.closeFirst == nil {
					rig.closeFirst = func() { _ = h.Close(context.Background()) }
				}
				return admin
			}
			rig.admin = rig.observer(t, ts)
			return rig
		}})
	}
	for _, tr := range presentationTransports {
		ways = append(ways, dialogWay{"session-" + tr, func(t *testing.T, ts *tasks) *dialogRig {
			f := startSvcFleet(t, 2, nil)
			w := f.workerOn(t, 1, "dlg-")
			rig := &dialogRig{hs: f.hs}
			var first *presentation
			rig.observer = func(t *testing.T, ts *tasks) *DialogAdmin {
				p := f.present(t, 0, tr, func(p *presentation) { services.Observe(p.env, DialogToken, ts.handler) })
				if first == nil {
					first = p
					p.create(t, w)
				}
				p.attach(t, w)
				return p.dialogs
			}
			rig.admin = rig.observer(t, ts)
			rig.switchTo = func(t *testing.T) *DialogAdmin {
				other := f.workerOn(t, 0, "dlg2-")
				first.create(t, other)
				first.attach(t, other)
				return first.dialogs
			}
			rig.closeFirst = first.disconnect
			return rig
		}})
	}
	return ways
}

func open(t *testing.T, a *DialogAdmin, key, text string) {
	t.Helper()
	if _, err := a.Open.Call(callCtx(t), OpenArgs{Key: key, Text: text}); err != nil {
		t.Fatalf("open %s: %v", key, err)
	}
}

func closeDialog(t *testing.T, a *DialogAdmin, key string) {
	t.Helper()
	if _, err := a.Close.Call(callCtx(t), KeyArgs{Key: key}); err != nil {
		t.Fatalf("close %s: %v", key, err)
	}
}
