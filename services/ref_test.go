package services_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/meshnode/meshnode"
	"github.com/meshnode/meshnode/services"
)

// The reference contract: Start begins an indexing job and hands back a private
// reference to it, with its progress (state), Wait (cancelling the wait cancels only
// the wait) and Cancel (cancels the job, for everyone).

type StartArgs struct {
	Steps int `json:"steps"`
}

type JobResult struct {
	Done      int  `json:"done"`
	Cancelled bool `json:"cancelled"`
}

type IndexJob struct {
	Progress services.State[int]
	Wait     services.Method[struct{}, JobResult]
	Cancel   services.Method[struct{}, struct{}]
}

var IndexJobToken = services.Define("test.index-job", func(d *services.Describer, j *IndexJob) {
	services.DescribeState(d, "progress", &j.Progress)
	services.DescribeMethod(d, "wait", &j.Wait)
	services.DescribeMethod(d, "cancel", &j.Cancel)
})

type Index struct {
	Start services.Method[StartArgs, services.Ref[IndexJob]]
}

var IndexToken = services.Define("test.index", func(d *services.Describer, x *Index) {
	services.DescribeMethod(d, "start", &x.Start)
})

// indexFacet provides Index: each job is a goroutine of its own (service-owned work:
// its own context, stopped only by Cancel or the host's end), one step every ms.
func indexFacet() services.Facet { return indexFacetWith(nil) }

// indexFacetWith is indexFacet telling made (when not nil) each reference it returns,
// as the provider holds it.
func indexFacetWith(made func(services.Ref[IndexJob])) services.Facet {
	return services.Facet{ID: "index", Setup: func(env *services.Env) {
		var wg sync.WaitGroup
		stopAll, cancelAll := context.WithCancel(context.Background())
		env.Own(func(context.Context) error { cancelAll(); wg.Wait(); return nil })
		services.Provide(env, IndexToken, &Index{Start: services.Func(func(_ context.Context, in StartArgs) (services.Ref[IndexJob], error) {
			jctx, cancel := context.WithCancel(stopAll)
			progress := services.NewState(0)
			done := make(chan JobResult, 1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				t := time.NewTicker(time.Millisecond)
				defer t.Stop()
				for n := 1; ; n++ {
					select {
					case <-jctx.Done():
						done <- JobResult{Done: n - 1, Cancelled: true}
						return
					case <-t.C:
					}
					_ = progress.Set(jctx, n)
					if n == in.Steps {
						done <- JobResult{Done: n}
						return
					}
				}
			}()
			var res *JobResult
			var mu sync.Mutex
			job := &IndexJob{
				Progress: progress,
				Wait: services.Task(func(ctx context.Context, _ struct{}) (JobResult, error) {
					mu.Lock()
					if res != nil {
						r := *res
						mu.Unlock()
						return r, nil
					}
					mu.Unlock()
					select {
					case r := <-done:
						mu.Lock()
						res = &r
						mu.Unlock()
						return r, nil
					case <-ctx.Done(): // only this wait: the job goes on
						return JobResult{}, ctx.Err()
					}
				}),
				Cancel: services.Func(func(context.Context, struct{}) (struct{}, error) { cancel(); return struct{}{}, nil }),
			}
			ref := services.NewRef(IndexJobToken, job)
			if made != nil {
				made(ref)
			}
			return ref, nil
		})})
	}}
}

// R36: a private returned reference's lifetime is its holder's, distinct from keyed
// discovery: only the caller that got it can use it (another client presenting its
// handle is refused stale_reference), an Observe of the provider's keyed service never
// sees it, cancelling a wait ends only that wait while Cancel ends the job for
// everyone, and it ends when released and when its holder's connection (or session
// attachment) ends.
func TestR36_PrivateReferenceLifetime(t *testing.T) {
	type refRig struct {
		index, other *Index
		otherConn    services.Connection
		ts           *tasks
		cut          func() // ends the holder's connection or attachment, and makes it again
	}
	ways := map[string]func(t *testing.T) refRig{}
	for _, tr := range transports {
		ways[tr.name] = func(t *testing.T) refRig {
			provider := newHost(t, "provider", nil, indexFacet(), dialogOwner("p", nil))
			var rig refRig
			rig.ts = newTasks()
			consumer := func(observe bool) (*Index, services.Connection, *services.Loopback) {
				conn, _ := tr.connect(t, provider)
				var x *Index
				newHost(t, "consumer", []services.Connection{conn}, services.Facet{ID: "ui", Setup: func(env *services.Env) {
					x = services.Use(env, IndexToken)
					if observe {
						services.Observe(env, DialogToken, rig.ts.handler)
					}
				}})
				l, _ := conn.(*services.Loopback)
				return x, conn, l
			}
			var l *services.Loopback
			rig.index, _, l = consumer(true)
			rig.other, rig.otherConn, _ = consumer(false)
			if l != nil {
				rig.cut = func() { l.Disconnect(); l.Reconnect() }
			}
			return rig
		}
	}
	for _, tr := range presentationTransports {
		ways["session-"+tr] = func(t *testing.T) refRig {
			f := startSvcFleet(t, 2, nil)
			w := f.workerOn(t, 1, "idx-")
			var rig refRig
			rig.ts = newTasks()
			p := f.present(t, 0, tr, func(p *presentation) { services.Observe(p.env, DialogToken, rig.ts.handler) })
			q := f.present(t, 1, tr)
			p.create(t, w)
			p.attach(t, w)
			q.attach(t, w)
			rig.index, rig.other, rig.otherConn = p.index, q.index, q.session
			rig.cut = func() {
				if _, err := p.mgmt.Detach.Call(callCtx(t), struct{}{}); err != nil {
					t.Fatal(err)
				}
				p.attach(t, w)
			}
			return rig
		}
	}
	for name, start := range ways {
		t.Run(name, func(t *testing.T) {
			rig := start(t)
			ref, err := rig.index.Start.Call(callCtx(t), StartArgs{Steps: 1 << 30})
			if err != nil {
				t.Fatal(err)
			}
			job := ref.Get(IndexJobToken)
			eventually(t, "the job's progress hydrates and moves", func() bool { v, ok := job.Progress.Value(); return ok && v > 3 })
			// Cancelling a wait ends that wait only.
			wctx, wcancel := context.WithTimeout(callCtx(t), 50*time.Millisecond)
			if _, err := job.Wait.Call(wctx, struct{}{}); !errors.Is(err, services.ErrCancelled) {
				t.Fatalf("a cancelled wait: %v", err)
			}
			wcancel()
			before, _ := job.Progress.Value()
			eventually(t, "the job goes on after the wait was cancelled", func() bool { v, _ := job.Progress.Value(); return v > before+3 })
			// Another client cannot use the handle.
			if h := services.RefHandle(ref); h != "" {
				_, err := rig.otherConn.Call(callCtx(t), services.Call{Service: "test.index-job", Ref: h, Member: "cancel"})
				if !errors.Is(err, services.ErrStaleReference) {
					t.Fatalf("another client presenting the handle: %v, want stale_reference", err)
				}
			}
			// Keyed discovery never sees it.
			if got := rig.ts.running(); len(got) != 0 {
				t.Fatalf("an observer of the keyed service saw %v", got)
			}
			// Cancel ends the job for everyone: a wait returns its cancelled result.
			if _, err := job.Cancel.Call(callCtx(t), struct{}{}); err != nil {
				t.Fatal(err)
			}
			if r, err := job.Wait.Call(callCtx(t), struct{}{}); err != nil || !r.Cancelled {
				t.Fatalf("a wait after Cancel: %+v %v", r, err)
			}
			// Released: the reference is gone.
			ref2, err := rig.index.Start.Call(callCtx(t), StartArgs{Steps: 1 << 30})
			if err != nil {
				t.Fatal(err)
			}
			job2 := ref2.Get(IndexJobToken)
			ref2.Release()
			if _, err := job2.Cancel.Call(callCtx(t), struct{}{}); !errors.Is(err, services.ErrStaleReference) {
				t.Fatalf("a call after Release: %v, want stale_reference", err)
			}
			// Its holder's connection or attachment ends: the reference ends with it.
			if rig.cut == nil {
				return
			}
			ref3, err := rig.index.Start.Call(callCtx(t), StartArgs{Steps: 1 << 30})
			if err != nil {
				t.Fatal(err)
			}
			job3 := ref3.Get(IndexJobToken)
			if _, err := job3.Wait.Call(mustTimeout(t, 10*time.Millisecond), struct{}{}); !errors.Is(err, services.ErrCancelled) {
				t.Fatalf("job3 reachable before the cut: %v", err)
			}
			rig.cut()
			eventually(t, "the reference ended with its holder's connection", func() bool {
				_, err := job3.Cancel.Call(callCtx(t), struct{}{})
				return errors.Is(err, services.ErrStaleReference)
			})
		})
	}
}

// Issue 28, item 4: a private returned reference the provider ends (Ref.Close on its
// side) ends for its holder at once: the holder's next call through it fails
// stale_reference, the reference's state subscription ends (its replica is told and
// keeps the last value as stale display data; the provider side holds one subscription
// fewer), releasing it afterwards is harmless, and the holder's other reference goes
// on. Over loopback and STREAM to a server, and from a
// presentation on node 0 (STREAM, loopback) to a worker on node 1.
func TestIssue28_ReferenceClosedByItsProvider(t *testing.T) {
	// A way returns the holder's Index, how many subscriptions the provider side holds,
	// and how many of them are not the references' (its other facades').
	ways := map[string]func(t *testing.T, made func(services.Ref[IndexJob])) (*Index, func() int, int){}
	for _, tr := range transports {
		ways[tr.name] = func(t *testing.T, made func(services.Ref[IndexJob])) (*Index, func() int, int) {
			provider := newHost(t, "provider", nil, indexFacetWith(made))
			conn, _ := tr.connect(t, provider)
			var x *Index
			newHost(t, "consumer", []services.Connection{conn}, services.Facet{ID: "ui", Setup: func(env *services.Env) { x = services.Use(env, IndexToken) }})
			return x, func() int { return services.SubscriptionsOf(provider) }, 0
		}
	}
	for _, tr := range presentationTransports {
		ways["session-"+tr] = func(t *testing.T, made func(services.Ref[IndexJob])) (*Index, func() int, int) {
			f := startSvcFleetWith(t, 2, nil, func(_ int, cfg *meshnode.Config) {
				for i, fc := range cfg.ServiceWorker.Facets {
					if fc.ID == "index" {
						cfg.ServiceWorker.Facets[i] = indexFacetWith(made)
					}
				}
			})
			w := f.workerOn(t, 1, "refclose-")
			p := f.present(t, 0, tr)
			p.create(t, w)
			p.attach(t, w)
			// The presentation's board (score, moves) and dialogs.
			return p.index, func() int { return services.AttacherOf(f.Node(0).Services()).Stats().Subscriptions }, 3
		}
	}
	for name, start := range ways {
		t.Run(name, func(t *testing.T) {
			made := make(chan services.Ref[IndexJob], 2)
			index, subs, others := start(t, func(r services.Ref[IndexJob]) { made <- r })
			provided := func() services.Ref[IndexJob] {
				t.Helper()
				select {
				case r := <-made:
					return r
				default:
					t.Fatal("the provider made no reference for the call that returned one")
					return services.Ref[IndexJob]{}
				}
			}
			ref, err := index.Start.Call(callCtx(t), StartArgs{Steps: 1 << 30})
			if err != nil {
				t.Fatal(err)
			}
			closing := provided()
			other, err := index.Start.Call(callCtx(t), StartArgs{Steps: 1 << 30})
			if err != nil {
				t.Fatal(err)
			}
			provided()
			job, otherJob := ref.Get(IndexJobToken), other.Get(IndexJobToken)
			eventually(t, "both jobs' progress hydrates", func() bool {
				_, ok := job.Progress.Value()
				_, ok2 := otherJob.Progress.Value()
				return ok && ok2 && subs() == others+2
			})
			if st := job.Progress.Status(); st.Stale {
				t.Fatalf("a live reference's state is stale: %+v", st)
			}

			closing.Close() // the provider ends it
			if _, err := job.Cancel.Call(callCtx(t), struct{}{}); !errors.Is(err, services.ErrStaleReference) {
				t.Fatalf("a call right after the provider closed the reference: %v, want stale_reference", err)
			}
			if _, err := job.Wait.Call(callCtx(t), struct{}{}); !errors.Is(err, services.ErrStaleReference) {
				t.Fatalf("a second call: %v, want stale_reference", err)
			}
			eventually(t, "the reference's state subscription ends", func() bool { return job.Progress.Status().Stale })
			if _, ok := job.Progress.Value(); !ok {
				t.Fatal("the ended reference's state lost its last value")
			}
			eventually(t, "the provider side holds the other reference's subscription only", func() bool { return subs() == others+1 })
			ref.Release() // harmless once ended

			// The holder's other reference goes on.
			eventually(t, "the other job's progress moves", func() bool { v, ok := otherJob.Progress.Value(); return ok && v > 0 })
			if _, err := otherJob.Cancel.Call(callCtx(t), struct{}{}); err != nil {
				t.Fatalf("the other reference after the first closed: %v", err)
			}
			if r, err := otherJob.Wait.Call(callCtx(t), struct{}{}); err != nil || !r.Cancelled {
				t.Fatalf("the other job's wait: %+v %v", r, err)
			}
		})
	}
}

func mustTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
