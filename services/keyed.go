package services

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"
)

// Observation of keyed instances: Observe is discovery, not a state holding proxies.
// Each registration follows its keyed service's directory (a complete list of the
// live instances, then every change, in order) and reconciles it: an instance that
// appears gets an instance facade, whose state members hydrate before its task (the
// handler) starts; one that goes (closed, or replaced by the same key under a new
// generation) has its task's context cancelled, and the task is awaited before a
// replacement's starts. A switch, a disconnect or the end of the registration's facet
// generation ends every task first.

// taskStopWait bounds how long a reconciliation waits for a cancelled task to return
// before it goes on (the task is logged as slow; its replacement starts anyway).
var taskStopWait = 5 * time.Second

// keyedFacade is a host's consumer side of one keyed token: what the observe
// registrations of its facets are bound to.
type keyedFacade struct {
	host *Host
	id   string
	// make builds an instance facade of the token for (key, gen): its *T and facade.
	make  func(key string, gen uint64) (*facade, any)
	kinds map[string]memberKind

	mu    sync.Mutex
	local *service
	conn  Connection
	bound bool
	regs  []*observeReg
}

func keyedFacadeOf[T any](h *Host, t Token[T]) *keyedFacade {
	h.mu.Lock()
	defer h.mu.Unlock()
	if kf := h.keyed[t.id]; kf != nil {
		return kf
	}
	kf := &keyedFacade{host: h, id: t.id, kinds: kinds(t.describe), make: func(key string, gen uint64) (*facade, any) {
		f := &facade{host: h, id: t.id, key: key, gen: gen}
		v := new(T)
		d := &Describer{mode: describeFacade, facade: f}
		t.describe(d, v)
		f.members, f.value = d.members, v
		return f, v
	}}
	h.keyed[t.id] = kf
	return kf
}

func (kf *keyedFacade) bindLocal(s *service) {
	kf.mu.Lock()
	kf.local, kf.conn, kf.bound = s, nil, true
	regs := append([]*observeReg(nil), kf.regs...)
	kf.mu.Unlock()
	for _, r := range regs {
		r.rebind()
	}
}

func (kf *keyedFacade) bindRemote(c Connection) {
	kf.mu.Lock()
	kf.local, kf.conn, kf.bound = nil, c, true
	regs := append([]*observeReg(nil), kf.regs...)
	kf.mu.Unlock()
	for _, r := range regs {
		r.rebind()
	}
}

func (kf *keyedFacade) unbind() {
	kf.mu.Lock()
	kf.local, kf.conn, kf.bound = nil, nil, false
	regs := append([]*observeReg(nil), kf.regs...)
	kf.mu.Unlock()
	for _, r := range regs {
		r.rebind()
	}
}

// checkMembers validates the token's member kinds against a provider's catalogue.
func (kf *keyedFacade) checkMembers(e CatalogueEntry) error {
	for name, k := range kf.kinds {
		if got, ok := e.Members[name]; ok && got != string(k) {
			return fmt.Errorf("member %q is a %s here and a %s at the provider", name, k, got)
		}
	}
	return nil
}

// directorySource returns where the directory is now (nil: unbound).
func (kf *keyedFacade) directorySource() source {
	kf.mu.Lock()
	defer kf.mu.Unlock()
	switch {
	case !kf.bound:
		return nil
	case kf.local != nil:
		return slotSource{kf.local.directory()}
	}
	if sub, ok := kf.conn.(subscriber); ok {
		return remoteSource{sub: sub, addr: subAddr{svc: kf.id, member: MemberInstances}, kind: kindInstances}
	}
	return nil
}

// instance makes a facade of (key, gen) bound where the keyed facade is bound now.
func (kf *keyedFacade) instance(key string, gen uint64) (*facade, any) {
	f, v := kf.make(key, gen)
	kf.mu.Lock()
	local, conn, bound := kf.local, kf.conn, kf.bound
	kf.mu.Unlock()
	switch {
	case !bound:
		f.unbind()
	case local != nil:
		f.bindLocal(local)
	default:
		f.bindRemote(conn)
	}
	return f, v
}

// observeReg is one Observe registration: its handler's tasks, one per live instance.
type observeReg struct {
	kf      *keyedFacade
	facet   string
	handler func(ctx context.Context, key string, v any) error

	mu      sync.Mutex
	srcStop func()
	gen     uint64 // bumps per binding: updates of an old one are dropped
	live    map[string]*observed
	queue   []dirUpdate
	running bool
	stopped bool
	done    sync.WaitGroup // the reconciler and the tasks
}

// dirUpdate is one directory change as the reconciler takes it: the live instances
// (nil: none, the binding went away or is down).
type dirUpdate struct {
	gen  uint64
	refs []instanceRef
}

// observed is one live instance's task.
type observed struct {
	ref    instanceRef
	f      *facade
	cancel context.CancelFunc
	ended  chan struct{} // closed when its task (or the wait for hydration) ends
}

// rebind follows the keyed facade's binding: the tasks of the previous one end first.
func (r *observeReg) rebind() {
	src := r.kf.directorySource()
	r.mu.Lock()
	if r.stopped {
		r.mu.Unlock()
		return
	}
	old := r.srcStop
	r.gen++
	g := r.gen
	r.srcStop = nil
	r.postLocked(dirUpdate{gen: g}) // end every task of the previous binding
	r.mu.Unlock()
	if old != nil {
		old()
	}
	if src == nil {
		return
	}
	stop := src.watch(func(d replicaDelivery) { r.onDirectory(g, d) })
	r.mu.Lock()
	if r.gen == g && !r.stopped {
		r.srcStop = stop
		r.mu.Unlock()
		return
	}
	r.mu.Unlock()
	stop()
}

// onDirectory takes a delivery of the directory (under the source's lock: it queues).
func (r *observeReg) onDirectory(g uint64, d replicaDelivery) {
	var refs []instanceRef
	switch d.op {
	case rdHydrate, rdUpdate, rdReplace:
		if v, ok := d.val.([]instanceRef); ok {
			refs = v
		} else if err := json.Unmarshal(d.raw, &refs); err != nil {
			r.kf.host.log.Warn("services: an instance directory does not decode", "service", r.kf.id, "err", err)
			return
		}
		if refs == nil {
			refs = []instanceRef{}
		}
	case rdStale, rdCold, rdClosed:
		// A disconnect, a switch, a failed provider: the tasks end (the instances stay
		// the provider's; they come back with the directory).
	default:
		return
	}
	r.mu.Lock()
	if g == r.gen && !r.stopped {
		r.postLocked(dirUpdate{gen: g, refs: refs})
	}
	r.mu.Unlock()
}

// maxDirUpdates bounds a registration's queue of directory changes; past it only the
// latest is kept (the reconciliation goes straight to it; the changes skipped are
// counted: meshnode.services.observations.skipped).
const maxDirUpdates = 1024

// dirUpdates is the bound in force (tests lower it).
var dirUpdates = maxDirUpdates

func (r *observeReg) postLocked(u dirUpdate) {
	if len(r.queue) >= dirUpdates {
		r.kf.host.stats.count(r.kf.host.stats.skipped, int64(len(r.queue)))
		// A binding's end among the skipped is kept: its tasks end before the latest's
		// start (generation 0 is never current, and no instances ends every task).
		ended := slices.ContainsFunc(r.queue, func(q dirUpdate) bool { return q.gen != u.gen })
		r.queue = r.queue[:0]
		if ended {
			r.queue = append(r.queue, dirUpdate{})
		}
	}
	r.queue = append(r.queue, u)
	if !r.running {
		r.running = true
		r.done.Add(1)
		go r.reconcile()
	}
}

// reconcile applies the queued directory changes in order (one goroutine at a time,
// gone when the queue is empty).
func (r *observeReg) reconcile() {
	defer r.done.Done()
	for {
		r.mu.Lock()
		if len(r.queue) == 0 {
			r.running = false
			r.mu.Unlock()
			return
		}
		u := r.queue[0]
		r.queue = r.queue[1:]
		stale := u.gen != r.gen || r.stopped
		r.mu.Unlock()
		if stale && u.refs != nil {
			continue // a change of a binding that is gone: only its ending matters
		}
		r.apply(u.refs)
	}
}

// apply makes the tasks match refs: those that went end (awaited), those that came
// start once hydrated.
func (r *observeReg) apply(refs []instanceRef) {
	want := make(map[string]uint64, len(refs))
	for _, ref := range refs {
		want[ref.Key] = ref.Generation
	}
	r.mu.Lock()
	var ending []*observed
	for key, ob := range r.live {
		if g, ok := want[key]; !ok || g != ob.ref.Generation {
			ending = append(ending, ob)
			delete(r.live, key)
		}
	}
	r.mu.Unlock()
	sort.Slice(ending, func(i, j int) bool { return ending[i].ref.Key < ending[j].ref.Key })
	for _, ob := range ending {
		r.end(ob)
	}
	sort.Slice(refs, func(i, j int) bool { return refs[i].Key < refs[j].Key })
	for _, ref := range refs {
		r.mu.Lock()
		skip := r.stopped || r.live[ref.Key] != nil
		r.mu.Unlock()
		if skip {
			continue
		}
		// Not under r.mu: binding the facade takes the source's locks, under which the
		// source calls onDirectory.
		ob := r.start(ref)
		r.mu.Lock()
		if r.stopped {
			r.mu.Unlock()
			r.end(ob)
			continue
		}
		r.live[ref.Key] = ob
		r.mu.Unlock()
	}
}

// end cancels an instance's task and waits for it (bounded), then drops its facade.
func (r *observeReg) end(ob *observed) {
	ob.cancel()
	select {
	case <-ob.ended:
	case <-time.After(taskStopWait):
		r.kf.host.log.Warn("services: an observer task did not return within its bound after its instance went; going on",
			"service", r.kf.id, "key", ob.ref.Key, "facet", r.facet)
	}
	ob.f.retire()
}

// start makes an instance's facade and its task, which waits for the facade's state
// members to hydrate before it runs the handler. Only the reconciler calls it.
func (r *observeReg) start(ref instanceRef) *observed {
	f, v := r.kf.instance(ref.Key, ref.Generation)
	ctx, cancel := context.WithCancel(context.Background())
	ob := &observed{ref: ref, f: f, cancel: cancel, ended: make(chan struct{})}
	r.mu.Lock()
	r.done.Add(1)
	r.mu.Unlock()
	go func() {
		defer r.done.Done()
		defer close(ob.ended)
		defer cancel()
		for _, m := range f.members {
			if m.replica == nil || m.kind != kindState {
				continue
			}
			hyd, closed := m.replica.waits()
			select {
			case <-hyd:
			case <-closed:
				return // the instance closed before it hydrated
			case <-ctx.Done():
				return
			}
		}
		err := r.run(ctx, ref.Key, v)
		if err != nil && !(ctx.Err() != nil && errors.Is(err, context.Canceled)) {
			r.kf.host.failure(r.facet, fmt.Errorf("services: observer of %s instance %q: %w", r.kf.id, ref.Key, err))
		}
	}()
	return ob
}

// run runs the handler; a panic is a failure of the task.
func (r *observeReg) run(ctx context.Context, key string, v any) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	return r.handler(ctx, key, v)
}

// stop ends the registration: no more reconciliation, every task cancelled and
// awaited (bounded).
func (r *observeReg) stop() {
	r.mu.Lock()
	if r.stopped {
		r.mu.Unlock()
		return
	}
	r.stopped = true
	r.gen++
	old := r.srcStop
	r.srcStop = nil
	live := r.live
	r.live = map[string]*observed{}
	r.mu.Unlock()
	if old != nil {
		old()
	}
	for _, ob := range live {
		r.end(ob)
	}
	waitBounded(&r.done, taskStopWait)
}

// waitBounded waits for wg, at most d.
func waitBounded(wg *sync.WaitGroup, d time.Duration) bool {
	ch := make(chan struct{})
	go func() { wg.Wait(); close(ch) }()
	select {
	case <-ch:
		return true
	case <-time.After(d):
		return false
	}
}
