package services

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshnode/meshnode/actor"
)

// Hooks for the package's own black-box tests (package services_test), which need to
// play a frame of an old route by hand.

// AttacherOf returns the Attacher serving a node's server host.
func AttacherOf(h *Host) *Attacher { return h.attacher() }

// AttachmentKeyOf returns the worker-side key of the live route of the presentation
// whose authenticated identity is presenterID ("" for none).
func (a *Attacher) AttachmentKeyOf(presenterID string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	for p, ps := range a.pres {
		if p.id == presenterID && ps.route != nil {
			return ps.route.client
		}
	}
	return ""
}

// RouteCallAs sends a worker a call as the attachment key client would: what a frame
// delayed from a route that ended looks like when it reaches the worker.
func RouteCallAs(ctx context.Context, actors *actor.Host, kind, session, client, svc, member string, args []byte) error {
	v, err := actors.Request(ctx, actor.Address{Kind: kind, ID: session}, &workerCall{Client: client, Rid: "stale-1", Svc: svc, Member: member, Args: args})
	if err != nil {
		return err
	}
	return v.(*answer).err()
}

// SubscriptionsOf returns how many subscriptions the clients of h hold.
func SubscriptionsOf(h *Host) int { return int(h.stats.subscriptions.Load()) }

// SubscriptionsDropped returns how many subscriptions h dropped for flow control.
func SubscriptionsDropped(h *Host) int64 { return h.stats.dropCount.Load() }

// RefHandle returns the handle of a reference a remote call returned ("" in process).
func RefHandle[T any](r Ref[T]) string {
	if r.st == nil {
		return ""
	}
	return r.st.handle
}

// SetSessionsPerOwner lowers the bound of sessions per creator for a test; the
// returned function restores it.
func SetSessionsPerOwner(n int) (restore func()) {
	old := sessionsPerOwner
	sessionsPerOwner = n
	return func() { sessionsPerOwner = old }
}

// SetClientsPerWorker lowers the bound of presentations attached to one session
// worker for a test; the returned function restores it.
func SetClientsPerWorker(n int) (restore func()) {
	old := clientsPerWorker
	clientsPerWorker = n
	return func() { clientsPerWorker = old }
}

// SetSubscriptionsPerClient lowers the bound of subscriptions of one client connection
// or presentation for a test; the returned function restores it.
func SetSubscriptionsPerClient(n int) (restore func()) {
	old := subscriptionsPerClient
	subscriptionsPerClient = n
	return func() { subscriptionsPerClient = old }
}

// SetMaxSessions lowers the bound of sessions in the directory for a test; the
// returned function restores it.
func SetMaxSessions(n int) (restore func()) {
	old := maxSessions
	maxSessions = n
	return func() { maxSessions = old }
}

// SetTaskStopWait changes how long an observation waits for a cancelled task before it
// goes on, for a test; the returned function restores it.
func SetTaskStopWait(d time.Duration) (restore func()) {
	old := taskStopWait
	taskStopWait = d
	return func() { taskStopWait = old }
}

// HoldSnapshots holds the subscription snapshots c's provider answers from now on (the
// provider has subscribed; the answer has not reached c's subscriptions) until release
// is called: what a slow answer looks like while the provider's frames come in.
func HoldSnapshots(c Connection) (release func()) {
	cs, _ := c.(subscriber).subscriptions()
	gate := make(chan struct{})
	cs.mu.Lock()
	cs.t = heldSnapshots{inner: cs.t, gate: gate}
	cs.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { close(gate) }) }
}

type heldSnapshots struct {
	inner subTransport
	gate  chan struct{}
}

func (h heldSnapshots) subscribeReq(ctx context.Context, session bool, a subAddr, sid uint64) (json.RawMessage, error) {
	raw, err := h.inner.subscribeReq(ctx, session, a, sid)
	select {
	case <-h.gate:
	case <-ctx.Done():
	}
	return raw, err
}

func (h heldSnapshots) unsubscribeReq(session bool, a subAddr, sid uint64) {
	h.inner.unsubscribeReq(session, a, sid)
}

// CountSubscribes counts the subscribe and unsubscribe requests c's subscriptions send
// to its provider from now on (both scopes of a connection share them).
func CountSubscribes(c Connection) (subscribes, unsubscribes func() int64) {
	cs, _ := c.(subscriber).subscriptions()
	n := &countedSubs{}
	cs.mu.Lock()
	n.inner = cs.t
	cs.t = n
	cs.mu.Unlock()
	return n.subs.Load, n.unsubs.Load
}

type countedSubs struct {
	inner        subTransport
	subs, unsubs atomic.Int64
}

func (c *countedSubs) subscribeReq(ctx context.Context, session bool, a subAddr, sid uint64) (json.RawMessage, error) {
	c.subs.Add(1)
	return c.inner.subscribeReq(ctx, session, a, sid)
}

func (c *countedSubs) unsubscribeReq(session bool, a subAddr, sid uint64) {
	c.unsubs.Add(1)
	c.inner.unsubscribeReq(session, a, sid)
}

// SetDirUpdates lowers the bound of directory changes an observation queues for a
// test; the returned function restores it.
func SetDirUpdates(n int) (restore func()) {
	old := dirUpdates
	dirUpdates = n
	return func() { dirUpdates = old }
}

// SetDirectoryBytes lowers the bound of the sessions directory's records, in bytes,
// for a test; the returned function restores it.
func SetDirectoryBytes(n int) (restore func()) {
	old := directoryBytes
	directoryBytes = n
	return func() { directoryBytes = old }
}

// HoldSessionOps holds every session-scope subscribe, catalogue, unsubscribe and
// cancel that starts from now on, in progress, until release, each said on entered
// when it is; with a bound n of them per presentation (restored by release too).
func HoldSessionOps(n int64) (entered <-chan struct{}, release func()) {
	old := opsPerPresenter.Swap(n)
	gate := make(chan struct{})
	in := make(chan struct{}, 64)
	hook := func() {
		select {
		case in <- struct{}{}:
		default:
		}
		<-gate
	}
	opHook.Store(&hook)
	var once sync.Once
	return in, func() {
		once.Do(func() {
			opHook.Store(nil)
			close(gate)
			opsPerPresenter.Store(old)
		})
	}
}

// HoldUnsubscribes holds the unsubscribes c's subscriptions send to its provider from
// now on (both scopes) until release: what an unsubscribe overtaken on the way looks
// like. held reports how many of member's are held (or were, before release).
func HoldUnsubscribes(c Connection) (held func(member string) int, release func()) {
	cs, _ := c.(subscriber).subscriptions()
	h := &heldUnsubs{gate: make(chan struct{}), n: map[string]int{}}
	cs.mu.Lock()
	h.inner = cs.t
	cs.t = h
	cs.mu.Unlock()
	var once sync.Once
	return func(member string) int {
			h.mu.Lock()
			defer h.mu.Unlock()
			return h.n[member]
		}, func() {
			once.Do(func() { close(h.gate) })
		}
}

type heldUnsubs struct {
	inner subTransport
	gate  chan struct{}
	mu    sync.Mutex
	n     map[string]int
}

func (h *heldUnsubs) subscribeReq(ctx context.Context, session bool, a subAddr, sid uint64) (json.RawMessage, error) {
	return h.inner.subscribeReq(ctx, session, a, sid)
}

func (h *heldUnsubs) unsubscribeReq(session bool, a subAddr, sid uint64) {
	h.mu.Lock()
	h.n[a.member]++
	h.mu.Unlock()
	<-h.gate
	h.inner.unsubscribeReq(session, a, sid)
}

// CountUnsubscribesServed counts the unsubscribes of member the endpoints of this
// process handle from now on (a server's for its clients, a worker's for its
// presentations), whether they end a subscription or not, until restore.
func CountUnsubscribesServed(member string) (served func() int64, restore func()) {
	var n atomic.Int64
	hook := func(a subAddr) {
		if a.member == member {
			n.Add(1)
		}
	}
	unsubscribeHook.Store(&hook)
	return n.Load, func() { unsubscribeHook.Store(nil) }
}

// RefuseDeliveries makes server-scope subscriptions made from now on of member refuse
// their deliveries while refusing() is true, as subscribers that fell behind: the
// endpoint drops them for flow control and tells their client.
func RefuseDeliveries(member string, refusing func() bool) (restore func()) {
	hook := func(a subAddr) bool { return a.member == member && refusing() }
	refuseHook.Store(&hook)
	return func() { refuseHook.Store(nil) }
}
