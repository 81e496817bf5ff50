package services

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"reflect"
	"sort"
	"sync"
	"time"

	"github.com/meshnode/meshnode/actor"
	"github.com/meshnode/meshnode/topic"
)

// SessionDirectory is the server's presentation-safe view of the sessions
// ("meshnode.session-directory", a server singleton of every node with a worker kind):
// the replicated state "sessions" holds every session's summary, the remote events
// "changed" say what changed. Every node serves the fleet's directory: its mirror
// follows the sessions directory's publications.
type SessionDirectory struct {
	Sessions State[DirectoryState]
	Changed  Events[DirectoryEvent]
}

// DirectoryState is SessionDirectory's "sessions": a revision (this node's count of
// the changes it applied: it restarts with the node) and every session's summary, by id.
type DirectoryState struct {
	Revision uint64           `json:"revision"`
	Sessions []SessionSummary `json:"sessions"`
}

// DirectoryEvent is SessionDirectory's "changed": Type created or changed with Session,
// or deleted with SessionID.
type DirectoryEvent struct {
	Type      string          `json:"type"`
	Session   *SessionSummary `json:"session,omitempty"`
	SessionID string          `json:"sessionId,omitempty"`
}

// SessionDirectoryToken is the server singleton "meshnode.session-directory".
var SessionDirectoryToken = Define("meshnode.session-directory", func(d *Describer, s *SessionDirectory) {
	DescribeState(d, "sessions", &s.Sessions)
	DescribeEvents(d, "changed", &s.Changed)
})

// mirror keeps a node's copy of the sessions directory: it follows the directory's
// publications (a node-local subscription to DirectoryTopic) and takes a snapshot when
// it starts, when it sees a gap, and when the directory's activation changed.
type mirror struct {
	actors *actor.Host
	topics *topic.Hub
	log    *slog.Logger

	state  *MutableState[DirectoryState]
	events *EventSource[DirectoryEvent]

	mu       sync.Mutex
	epoch    uint64
	seq      uint64
	synced   bool
	sessions map[string]SessionSummary
	revision uint64

	kick chan struct{}
	stop chan struct{}
	wg   sync.WaitGroup
	sub  *topic.LocalSubscription
}

// mirrorRetry bounds the wait between snapshot attempts that failed.
const mirrorRetry = 2 * time.Second

func newMirror(actors *actor.Host, topics *topic.Hub, log *slog.Logger) *mirror {
	return &mirror{actors: actors, topics: topics, log: log,
		state:    NewState(DirectoryState{Revision: 1, Sessions: []SessionSummary{}}),
		events:   NewEvents[DirectoryEvent](),
		sessions: map[string]SessionSummary{}, revision: 1,
		kick: make(chan struct{}, 1), stop: make(chan struct{})}
}

// start subscribes to the directory's publications and takes the first snapshot in
// the background.
func (m *mirror) start() {
	m.wg.Add(1)
	go m.loop()
}

func (m *mirror) close() {
	close(m.stop)
	m.wg.Wait()
	m.mu.Lock()
	sub := m.sub
	m.mu.Unlock()
	if sub != nil {
		sub.Close()
	}
}

func (m *mirror) resync() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// loop takes snapshots when asked (the first at once), retrying while the directory
// cannot be reached.
func (m *mirror) loop() {
	defer m.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-m.stop
		cancel()
	}()
	sub, err := m.topics.SubscribeLocal(ctx, DirectoryTopic, m.receive)
	if err != nil {
		m.log.Warn("services: the sessions directory's mirror cannot subscribe", "err", err)
		return
	}
	m.mu.Lock()
	m.sub = sub
	m.mu.Unlock()
	m.resync()
	wait := 50 * time.Millisecond
	for {
		select {
		case <-m.stop:
			return
		case <-m.kick:
		}
		for {
			err := m.snapshot(ctx)
			if err == nil {
				wait = 50 * time.Millisecond
				break
			}
			select {
			case <-m.stop:
				return
			case <-time.After(wait):
			}
			wait = min(2*wait, mirrorRetry)
		}
	}
}

// snapshot takes every summary from the directory and installs it (the events say
// what changed since the mirror's last view).
func (m *mirror) snapshot(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	v, err := m.actors.Request(rctx, actor.Address{Kind: DirectoryKind, ID: DirectoryID}, &dirSnapshot{})
	if err != nil {
		return err
	}
	ans, ok := v.(*answer)
	if !ok || ans.err() != nil {
		return fmt.Errorf("services: the sessions directory's snapshot: %v", v)
	}
	var snap dirSnapshotReply
	if err := json.Unmarshal(ans.Raw, &snap); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	next := make(map[string]SessionSummary, len(snap.Sessions))
	for _, s := range snap.Sessions {
		next[s.Session] = s
	}
	var evs []DirectoryEvent
	for id, s := range next {
		old, had := m.sessions[id]
		switch {
		case !had:
			evs = append(evs, DirectoryEvent{Type: "created", Session: &s})
		case !reflect.DeepEqual(old, s):
			evs = append(evs, DirectoryEvent{Type: "changed", Session: &s})
		}
	}
	for id := range m.sessions {
		if _, ok := next[id]; !ok {
			evs = append(evs, DirectoryEvent{Type: "deleted", SessionID: id})
		}
	}
	m.epoch, m.seq, m.synced, m.sessions = snap.Epoch, snap.Seq, true, next
	m.publishLocked(ctx, evs)
	return nil
}

// receive takes one of the directory's publications (on the topic layer's delivery
// path: it does not wait).
func (m *mirror) receive(d topic.Delivery) bool {
	var p dirPublication
	if err := json.Unmarshal(d.Message.Payload, &p); err != nil {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case !m.synced:
		return true // the snapshot to come covers it, or the mirror resyncs after it
	case p.Epoch == m.epoch && p.Seq <= m.seq:
		return true // covered by the snapshot
	case p.Epoch != m.epoch || p.Seq != m.seq+1:
		m.resync() // a gap, or another activation of the directory
		return true
	}
	m.seq = p.Seq
	switch p.Event.Type {
	case "created", "changed":
		if p.Event.Session != nil {
			m.sessions[p.Event.Session.Session] = *p.Event.Session
		}
	case "deleted":
		delete(m.sessions, p.Event.SessionID)
	}
	m.publishLocked(context.Background(), []DirectoryEvent{p.Event})
	return true
}

// publishLocked sets the state and emits evs. m.mu is held (the state's writes stay in
// the order of the changes).
func (m *mirror) publishLocked(ctx context.Context, evs []DirectoryEvent) {
	if len(evs) == 0 {
		return
	}
	m.revision++
	list := make([]SessionSummary, 0, len(m.sessions))
	for _, s := range m.sessions {
		list = append(list, s)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].Session < list[j].Session })
	_ = m.state.Set(ctx, DirectoryState{Revision: m.revision, Sessions: list})
	for _, ev := range evs {
		_ = m.events.Emit(ctx, ev)
	}
}
