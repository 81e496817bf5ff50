package services

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/meshnode/meshnode/actor"
	"github.com/meshnode/meshnode/session/wire"
)

// The sessions directory: which sessions exist, and where their workers are. A session
// is created and removed through SessionManagement (create, remove); attach finds it
// here, so an id nobody created is unknown_session rather than a new worker. The
// directory is one Actor for the fleet (DirectoryKind, id DirectoryID), whose records
// are saved in the node's store when it has one (a failover brings them back from a
// shared store; an embedded store keeps them on the node that saved them,
// docs/persistence.md), and which moves with its records like any Actor.
//
// Workers tell it where they run and who is attached (on start, on every attach and
// detach, on stop); every node tells it the nodes that left (their workers and
// presentations are gone). It publishes each change to the topic DirectoryTopic, from
// which every node's mirror keeps the presentation-safe summaries its
// SessionDirectory service serves.

// DirectoryKind is the Actor kind of the sessions directory; DirectoryID its one id.
const (
	DirectoryKind  = "meshnode.sessions"
	DirectoryID    = "directory"
	DirectoryTopic = "meshnode.session-directory"
)

// Session statuses, as summaries carry them.
const (
	StatusStarting    = "starting"    // created; its worker has not said it runs yet
	StatusActive      = "active"      // its worker runs
	StatusIdle        = "idle"        // no worker runs (collected, stopped); attach starts one
	StatusUnreachable = "unreachable" // the node its worker ran on left the mesh
)

// maxSessions bounds the directory's records: a create past it is refused (tests
// lower it).
var maxSessions = 100_000

// MaxSessionsPerOwner bounds the sessions one client identity has created and not
// removed, so that one client cannot take the whole directory (maxSessions) from the
// others. An identity an application does not authenticate changes with each
// connection: ServiceWorker.Authorize is what stops a client that reconnects.
const MaxSessionsPerOwner = 1_000

// MaxDirectoryBytes bounds the size of the directory's records (ids, titles and
// creators, estimated with recordBytes): the directory is one Actor whose state is
// saved whole (the embedded store takes at most 1 MiB per Actor) and whose snapshot
// crosses the mesh as one record (at most 4 MiB, JSON), so a create past it is refused
// rather than failing its save. About 10,000 sessions with short titles fit.
const MaxDirectoryBytes = 512 << 10

// directoryBytes is the bound in force (tests lower it).
var directoryBytes = MaxDirectoryBytes

// recordBytes estimates what rec adds to the directory's saved state.
func recordBytes(rec sessionRecord) int { return 2*len(rec.ID) + len(rec.Title) + len(rec.Owner) + 48 }

// sessionsPerOwner is the bound in force (tests lower it).
var sessionsPerOwner = MaxSessionsPerOwner

// NewDirectoryKind returns the directory's Actor kind; persist saves its records in the
// node's store (every node of the fleet must agree).
func NewDirectoryKind(persist bool) actor.Kind {
	k := actor.Kind{Name: DirectoryKind, New: func() actor.Actor { return &directory{} },
		State: func(a actor.Actor) any { return &a.(*directory).State }}
	if persist {
		k.Persist = actor.SaveExplicitly
	}
	return k
}

// sessionRecord is what the directory keeps of a session. Owner (the creator's
// identity) never leaves the server.
type sessionRecord struct {
	ID      string
	Title   string
	Owner   string
	Created int64 // unix nanoseconds
}

type directoryState struct {
	Records  map[string]sessionRecord
	Revision uint64
}

// SessionSummary is what a presentation sees of a session: nothing private (the
// creator's identity stays on the server).
type SessionSummary struct {
	Session   string   `json:"session"`
	Title     string   `json:"title,omitempty"`
	Status    string   `json:"status"`
	Node      string   `json:"node,omitempty"`     // where its worker runs
	Attached  []string `json:"attached,omitempty"` // the presentations attached, by identity
	UpdatedAt string   `json:"updatedAt"`
}

// runtime is what the directory knows of a session's worker (not saved: workers tell
// it again).
type runtime struct {
	status  string
	node    string
	inc     uint64
	clients []string
	updated time.Time
}

type directory struct {
	State directoryState

	rt    map[string]*runtime
	owned map[string]int // sessions per owner (from State.Records, rebuilt at Started)
	bytes int            // recordBytes of State.Records (rebuilt at Started)
	epoch uint64         // this activation's ObjectGeneration: a mirror that sees another resyncs
	seq   uint64         // publications of this activation
}

// dirPublication is what the directory publishes per change.
type dirPublication struct {
	Epoch uint64         `json:"epoch"`
	Seq   uint64         `json:"seq"`
	Event DirectoryEvent `json:"event"`
}

// dirSnapshotReply answers dirSnapshot: every summary, at Seq of Epoch.
type dirSnapshotReply struct {
	Epoch    uint64           `json:"epoch"`
	Seq      uint64           `json:"seq"`
	Sessions []SessionSummary `json:"sessions"`
}

// dirFound is posted by the reconciliation of a fresh activation: where a session's
// worker turned out to be.
type dirFound struct {
	f actor.RouteFence
}

func (d *directory) Receive(ctx *actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		if d.State.Records == nil {
			d.State.Records = map[string]sessionRecord{}
		}
		d.epoch = ctx.Self().ObjectGeneration
		d.rt = map[string]*runtime{}
		d.owned = map[string]int{}
		d.bytes = 0
		for _, rec := range d.State.Records {
			d.owned[rec.Owner]++
			d.bytes += recordBytes(rec)
		}
		for id := range d.State.Records {
			d.rt[id] = &runtime{status: StatusIdle, updated: time.Now()}
		}
		d.reconcile(ctx)
		// Never idle-collected: what it knows of running workers is not saved (workers
		// report it), so a fresh activation would show every running session idle
		// until its reconciliation found them again.
		ctx.StayActive(true)
	case *dirCreate:
		_ = ctx.Reply(d.create(ctx, m))
	case *dirRemove:
		if _, ok := d.State.Records[m.ID]; !ok {
			_ = ctx.Reply(&answer{Code: CodeUnknownSession, Message: "no session " + m.ID})
			return
		}
		rec := d.State.Records[m.ID]
		delete(d.State.Records, m.ID)
		d.State.Revision++
		if err := ctx.Save(); err != nil {
			d.State.Records[m.ID] = rec
			_ = ctx.Reply(answerOf(nil, Errorf(CodeUnavailable, "the sessions directory could not save: %v", err)))
			return
		}
		delete(d.rt, m.ID)
		if d.owned[rec.Owner]--; d.owned[rec.Owner] <= 0 {
			delete(d.owned, rec.Owner)
		}
		d.bytes -= recordBytes(rec)
		d.publish(ctx, DirectoryEvent{Type: "deleted", SessionID: m.ID})
		_ = ctx.Reply(&answer{})
	case *dirLookup:
		if _, ok := d.State.Records[m.ID]; !ok {
			_ = ctx.Reply(&answer{Code: CodeUnknownSession, Message: "no session " + m.ID})
			return
		}
		_ = ctx.Reply(&answer{})
	case *dirReport:
		d.report(ctx, m)
	case *dirNodeDown:
		for id, rt := range d.rt {
			before := len(rt.clients)
			rt.clients = slicesDeletePrefix(rt.clients, m.RID+"/")
			changed := len(rt.clients) != before
			if rt.node == m.RID {
				rt.status, rt.node, rt.inc, rt.clients, changed = StatusUnreachable, "", 0, nil, true
			}
			if changed {
				rt.updated = time.Now()
				d.publishChanged(ctx, id)
			}
		}
	case *dirSnapshot:
		raw, _ := json.Marshal(dirSnapshotReply{Epoch: d.epoch, Seq: d.seq, Sessions: d.summaries()})
		_ = ctx.Reply(&answer{Raw: raw})
	case *dirFound:
		// A worker the reconciliation found: it reports itself.
		_ = ctx.Send(m.f, &workerPing{})
	}
}

func (d *directory) create(ctx *actor.Context, m *dirCreate) *answer {
	if _, ok := d.State.Records[m.ID]; ok {
		return &answer{Code: CodeSessionExists, Message: fmt.Sprintf("session %s exists", m.ID)}
	}
	if len(d.State.Records) >= maxSessions {
		return &answer{Code: CodeUnavailable, Message: fmt.Sprintf("session %s: the directory holds %d sessions (the bound)", m.ID, maxSessions)}
	}
	if d.owned[m.Owner] >= sessionsPerOwner {
		return &answer{Code: CodeUnavailable, Message: fmt.Sprintf("session %s: its creator has %d sessions (the bound per client); remove one first", m.ID, sessionsPerOwner)}
	}
	rec := sessionRecord{ID: m.ID, Title: m.Title, Owner: m.Owner, Created: time.Now().UnixNano()}
	if d.bytes+recordBytes(rec) > directoryBytes {
		return &answer{Code: CodeUnavailable, Message: fmt.Sprintf("session %s: the sessions directory holds %d KiB of records (the bound is %d KiB)", m.ID, d.bytes>>10, directoryBytes>>10)}
	}
	d.State.Records[m.ID] = rec
	d.State.Revision++
	if err := ctx.Save(); err != nil {
		delete(d.State.Records, m.ID)
		return answerOf(nil, Errorf(CodeUnavailable, "the sessions directory could not save: %v", err))
	}
	d.owned[m.Owner]++
	d.bytes += recordBytes(rec)
	rt := d.rt[m.ID]
	if rt == nil {
		rt = &runtime{status: StatusStarting}
		d.rt[m.ID] = rt
	}
	rt.updated = time.Now()
	d.publish(ctx, DirectoryEvent{Type: "created", Session: d.summary(m.ID)})
	return &answer{}
}

// report takes what a worker says of itself. A report of a session that does not
// exist is ignored (a worker a stale route started); one of an earlier incarnation
// than the one known, from another node, is late.
func (d *directory) report(ctx *actor.Context, m *dirReport) {
	if _, ok := d.State.Records[m.ID]; !ok {
		return
	}
	rt := d.rt[m.ID]
	if rt == nil {
		rt = &runtime{}
		d.rt[m.ID] = rt
	}
	if !m.Running && rt.inc != 0 && rt.inc != m.Incarnation {
		return // the stop of a worker already replaced
	}
	if m.Running {
		rt.status, rt.node, rt.inc = StatusActive, m.Node, m.Incarnation
		rt.clients = append([]string(nil), m.Clients...)
		sort.Strings(rt.clients)
	} else {
		rt.status, rt.node, rt.inc, rt.clients = StatusIdle, "", 0, nil
	}
	rt.updated = time.Now()
	d.publishChanged(ctx, m.ID)
}

func (d *directory) summary(id string) *SessionSummary {
	rec := d.State.Records[id]
	rt := d.rt[id]
	s := &SessionSummary{Session: id, Title: rec.Title, Status: StatusIdle}
	if rt != nil {
		s.Status, s.Node, s.Attached = rt.status, rt.node, rt.clients
		s.UpdatedAt = rt.updated.UTC().Format(time.RFC3339Nano)
	}
	return s
}

func (d *directory) summaries() []SessionSummary {
	out := make([]SessionSummary, 0, len(d.State.Records))
	for id := range d.State.Records {
		out = append(out, *d.summary(id))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Session < out[j].Session })
	return out
}

func (d *directory) publishChanged(ctx *actor.Context, id string) {
	d.publish(ctx, DirectoryEvent{Type: "changed", Session: d.summary(id)})
}

// publish tells the mirrors a change (they resync from a snapshot when they miss one).
func (d *directory) publish(ctx *actor.Context, ev DirectoryEvent) {
	d.seq++
	b, _ := json.Marshal(dirPublication{Epoch: d.epoch, Seq: d.seq, Event: ev})
	_, _ = ctx.Publish(DirectoryTopic, "$svc.dir", b, actor.WithCodec(wire.CodecJSON))
}

// reconcile finds, after a fresh activation, where each session's worker runs (the
// directory's memory of it was lost): for each found, the worker is asked to report.
func (d *directory) reconcile(ctx *actor.Context) {
	if len(d.State.Records) == 0 {
		return
	}
	ids := make([]string, 0, len(d.State.Records))
	for id := range d.State.Records {
		ids = append(ids, id)
	}
	post := ctx.Poster()
	host := ctx.Host()
	actx := ctx.Context // ends with the activation: so does this goroutine
	go func() {
		for _, id := range ids {
			qctx, cancel := context.WithTimeout(actx, 5*time.Second)
			_, f, err := host.Where(qctx, id)
			cancel()
			if actx.Err() != nil {
				return
			}
			if err == nil {
				post(&dirFound{f: f})
			}
		}
	}()
}

func slicesDeletePrefix(s []string, prefix string) []string {
	out := s[:0:0]
	for _, x := range s {
		if !strings.HasPrefix(x, prefix) {
			out = append(out, x)
		}
	}
	return out
}
