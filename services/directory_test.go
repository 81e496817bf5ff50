package services_test

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshnode/meshnode"
	"github.com/meshnode/meshnode/internal/testkit"
	"github.com/meshnode/meshnode/services"
)

// dirWatch records what a SessionDirectory consumer sees: the latest state, and the
// events in order.
type dirWatch struct {
	mu     sync.Mutex
	dir    *services.SessionDirectory
	events []services.DirectoryEvent
}

func (w *dirWatch) summary(id string) (services.SessionSummary, bool) {
	st, ok := w.dir.Sessions.Value()
	if !ok {
		return services.SessionSummary{}, false
	}
	for _, s := range st.Sessions {
		if s.Session == id {
			return s, true
		}
	}
	return services.SessionSummary{}, false
}

func (w *dirWatch) sawEvent(typ, id string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, ev := range w.events {
		if ev.Type == typ && (ev.SessionID == id || ev.Session != nil && ev.Session.Session == id) {
			return true
		}
	}
	return false
}

// statuses returns the statuses the events of session id carried, in order.
func (w *dirWatch) statuses(id string) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, ev := range w.events {
		if ev.Session != nil && ev.Session.Session == id {
			out = append(out, ev.Session.Status)
		}
	}
	return out
}

// activeDirectoryEvents waits until watch hears the directory's events. Events are
// never replayed: the watcher hears what is created once its subscription is active,
// which a probe session p creates shows.
func activeDirectoryEvents(t *testing.T, p *presentation, watch *dirWatch) {
	t.Helper()
	probes := 0
	eventually(t, "the watcher's events subscription is active", func() bool {
		probes++
		id := "dirprobe-" + strconv.Itoa(probes)
		p.create(t, id)
		return testkit.Within(200*time.Millisecond, func() bool { return watch.sawEvent("created", id) })
	})
}

// watchDirectory makes a presentation on node i that follows the directory.
func (f *svcFleet) watchDirectory(t *testing.T, i int, tr string) (*presentation, *dirWatch) {
	t.Helper()
	w := &dirWatch{}
	p := f.present(t, i, tr, func(p *presentation) {
		w.dir = services.Use(p.env, services.SessionDirectoryToken)
		w.dir.Changed.Subscribe(func(_ context.Context, ev services.DirectoryEvent) {
			w.mu.Lock()
			w.events = append(w.events, ev)
			w.mu.Unlock()
		})
	})
	return p, w
}

// Issue 28, item 5: the session directory is a server singleton on every node whose
// state holds presentation-safe summaries of the fleet's sessions (which node their
// worker runs on, who is attached) with directory events, and it stays correct as
// sessions are created, attached to, detached from and removed, from any node.
func TestSessionDirectory_FollowsSessionsAcrossTheFleet(t *testing.T) {
	f := startSvcFleet(t, 3, nil)
	w := f.workerOn(t, 1, "dir-")
	p := f.present(t, 0, "stream")
	_, watch := f.watchDirectory(t, 2, "loopback")
	q := f.present(t, 2, "stream")
	activeDirectoryEvents(t, p, watch)
	p.create(t, w)
	node1 := f.Node(1).ID().RID
	eventually(t, "the directory on node 2 shows the session active on node 1", func() bool {
		s, ok := watch.summary(w)
		return ok && s.Status == services.StatusActive && s.Node == node1 && len(s.Attached) == 0
	})
	eventually(t, "the created event", func() bool { return watch.sawEvent("created", w) })
	p.attach(t, w)
	q.attach(t, w)
	eventually(t, "both presentations are attached", func() bool {
		s, _ := watch.summary(w)
		return slices.Equal(s.Attached, sorted(p.id, q.id))
	})
	if _, err := p.mgmt.Detach.Call(callCtx(t), struct{}{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the detached presentation leaves the summary", func() bool {
		s, _ := watch.summary(w)
		return slices.Equal(s.Attached, []string{q.id})
	})
	q.disconnect()
	eventually(t, "a disconnected presentation leaves the summary", func() bool {
		s, _ := watch.summary(w)
		return len(s.Attached) == 0
	})
	// Summaries hold nothing private: not the creator.
	st, _ := watch.dir.Sessions.Value()
	b, _ := json.Marshal(st)
	if strings.Contains(string(b), p.id) || strings.Contains(strings.ToLower(string(b)), "owner") {
		t.Fatalf("a summary carries a server-private field: %s", b)
	}
	if _, err := p.mgmt.Remove.Call(callCtx(t), services.SessionRef{Session: w}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the removed session leaves the directory", func() bool {
		_, ok := watch.summary(w)
		return !ok && watch.sawEvent("deleted", w)
	})
}

// Issue 28, item 5: the directory stays correct when a worker's node dies: the session
// is unreachable until a presentation attaches again, which starts its worker on a
// survivor; server calls stay healthy meanwhile.
func TestSessionDirectory_WorkerNodeDies(t *testing.T) {
	f := startSvcFleet(t, 3, nil)
	// The node to kill hosts the worker but not the directory.
	_, dirAt, err := f.Node(0).Actors().Where(callCtx(t), services.DirectoryID)
	victim := 2
	if err == nil && dirAt.Node == f.Node(2).ID() {
		victim = 1
	}
	w := f.workerOn(t, victim, "doom-")
	p := f.present(t, 0, "stream")
	_, watch := f.watchDirectory(t, 0, "loopback")
	p.create(t, w)
	dead := f.Node(victim).ID().RID
	eventually(t, "active on the victim", func() bool {
		s, _ := watch.summary(w)
		return s.Status == services.StatusActive && s.Node == dead
	})
	f.Kill(victim)
	eventually(t, "unreachable once its node died", func() bool {
		s, _ := watch.summary(w)
		return s.Status == services.StatusUnreachable && s.Node == ""
	})
	// The directory's node saw the death first; the presentation's node may not have
	// yet, and an attach it sends to the dead node meanwhile fails session_unavailable
	// (retryable: the attach may have reached the worker). Attach once every survivor
	// knows.
	if err := f.WaitConverged(10 * time.Second); err != nil {
		t.Fatalf("the survivors never agreed the victim died: %v", err)
	}
	p.attach(t, w)
	eventually(t, "active on a survivor after an attach", func() bool {
		s, _ := watch.summary(w)
		return s.Status == services.StatusActive && s.Node != "" && s.Node != dead && slices.Equal(s.Attached, []string{p.id})
	})
}

// Issue 28, item 5: a session no worker runs for is idle (no node, nobody attached)
// in the directory, its state and its events, whether its worker was stopped or
// collected when idle (a created session nobody attached to, on a node whose Actors
// are collected after 300 ms of silence); the next attach starts a worker and the
// session is active again.
func TestSessionDirectory_IdleWhenItsWorkerStops(t *testing.T) {
	t.Run("stopped", func(t *testing.T) {
		f := startSvcFleet(t, 2, nil)
		w := f.workerOn(t, 1, "stop-")
		p := f.present(t, 0, "stream")
		_, watch := f.watchDirectory(t, 0, "loopback")
		activeDirectoryEvents(t, p, watch)
		p.create(t, w)
		node1 := f.Node(1).ID().RID
		eventually(t, "active on node 1", func() bool {
			s, _ := watch.summary(w)
			return s.Status == services.StatusActive && s.Node == node1
		})
		f.Node(1).Actors().Deactivate(w)
		idleThenActive(t, f, p, watch, w, func() {})
	})
	t.Run("idle-collected", func(t *testing.T) {
		const idle = 300 * time.Millisecond
		f := startSvcFleetWith(t, 2, nil, func(_ int, cfg *meshnode.Config) {
			cfg.ActorIdleTimeout = idle
		})
		w := f.workerOn(t, 1, "collect-")
		p := f.present(t, 0, "stream")
		_, watch := f.watchDirectory(t, 0, "loopback")
		activeDirectoryEvents(t, p, watch)
		// Every node collects idle Actors, wherever the sessions directory runs: it
		// stays (what it knows of running workers is not saved), so the status is the
		// worker's report, not what a fresh directory assumes; that it stayed the same
		// activation is checked at the end.
		dir, err := f.Node(0).Actors().Lookup(callCtx(t), services.DirectoryKind, services.DirectoryID)
		if err != nil {
			t.Fatal(err)
		}
		p.create(t, w)
		idleThenActive(t, f, p, watch, w, func() {})
		after, err := f.Node(0).Actors().Lookup(callCtx(t), services.DirectoryKind, services.DirectoryID)
		if err != nil || after.ObjectGeneration != dir.ObjectGeneration || after.Node != dir.Node {
			t.Fatalf("the sessions directory was activated again meanwhile: %+v -> %+v (%v)", dir, after, err)
		}
		// Whatever the timing of this run: the directory holds itself from collection.
		for i := range f.Len() {
			for _, a := range f.Node(i).Actors().Active() {
				if a.ID == services.DirectoryID && a.Kind == services.DirectoryKind && !a.Held {
					t.Fatalf("the sessions directory on node %d is collectable: %+v", i, a)
				}
			}
		}
	})
}

// idleThenActive checks that session w, whose worker on node 1 stops (or is stopped),
// turns idle in watch's directory, state and events, after it was active; then that
// p's attach makes it active on node 1 again, with p attached. poke runs in every
// poll.
func idleThenActive(t *testing.T, f *svcFleet, p *presentation, watch *dirWatch, w string, poke func()) {
	t.Helper()
	eventually(t, "idle once its worker no longer runs", func() bool {
		poke()
		s, ok := watch.summary(w)
		return ok && s.Status == services.StatusIdle && s.Node == "" && len(s.Attached) == 0
	})
	for _, a := range f.Node(1).Actors().Active() {
		if a.ID == w {
			t.Fatalf("session %s is idle while its worker runs: %+v", w, a)
		}
	}
	eventually(t, "the events say active, then idle", func() bool {
		poke()
		st := watch.statuses(w)
		i := slices.Index(st, services.StatusActive)
		return i >= 0 && slices.Contains(st[i+1:], services.StatusIdle)
	})
	p.attach(t, w)
	node1 := f.Node(1).ID().RID
	eventually(t, "active again after an attach", func() bool {
		poke()
		s, _ := watch.summary(w)
		return s.Status == services.StatusActive && s.Node == node1 && slices.Equal(s.Attached, []string{p.id})
	})
	eventually(t, "the last event says active", func() bool {
		st := watch.statuses(w)
		return st[len(st)-1] == services.StatusActive
	})
}

func sorted(xs ...string) []string {
	out := slices.Clone(xs)
	slices.Sort(out)
	return out
}
