package services

import (
	"fmt"
	"time"

	"github.com/meshnode/meshnode/actor"
)

// The sessions directory: which sessions exist. A session is created and removed
// through SessionManagement (create, remove); attach finds it here, so an id nobody
// created is unknown_session rather than a new worker. The directory is one Actor for
// the fleet (DirectoryKind, id DirectoryID), whose records are saved in the node's
// store when it has one (a failover brings them back from a shared store; an embedded
// store keeps them on the node that saved them, docs/persistence.md), and which moves
// with its records like any Actor.

// DirectoryKind is the Actor kind of the sessions directory; DirectoryID its one id.
const (
	DirectoryKind = "meshnode.sessions"
	DirectoryID   = "directory"
)

// maxSessions bounds the directory's records: a create past it is refused.
const maxSessions = 100_000

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

type directory struct {
	State directoryState
}

func (d *directory) Receive(ctx *actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		if d.State.Records == nil {
			d.State.Records = map[string]sessionRecord{}
		}
	case *dirCreate:
		_ = ctx.Reply(d.create(ctx, m))
	case *dirRemove:
		if _, ok := d.State.Records[m.ID]; !ok {
			_ = ctx.Reply(&answer{Code: CodeUnknownSession, Message: "no session " + m.ID})
			return
		}
		delete(d.State.Records, m.ID)
		d.State.Revision++
		if err := ctx.Save(); err != nil {
			_ = ctx.Reply(answerOf(nil, Errorf(CodeUnavailable, "the sessions directory could not save: %v", err)))
			return
		}
		_ = ctx.Reply(&answer{})
	case *dirLookup:
		if _, ok := d.State.Records[m.ID]; !ok {
			_ = ctx.Reply(&answer{Code: CodeUnknownSession, Message: "no session " + m.ID})
			return
		}
		_ = ctx.Reply(&answer{})
	}
}

func (d *directory) create(ctx *actor.Context, m *dirCreate) *answer {
	if _, ok := d.State.Records[m.ID]; ok {
		return &answer{Code: CodeSessionExists, Message: fmt.Sprintf("session %s exists", m.ID)}
	}
	if len(d.State.Records) >= maxSessions {
		return &answer{Code: CodeUnavailable, Message: fmt.Sprintf("the directory holds %d sessions (the bound)", maxSessions)}
	}
	d.State.Records[m.ID] = sessionRecord{ID: m.ID, Title: m.Title, Owner: m.Owner, Created: time.Now().UnixNano()}
	d.State.Revision++
	if err := ctx.Save(); err != nil {
		delete(d.State.Records, m.ID)
		return answerOf(nil, Errorf(CodeUnavailable, "the sessions directory could not save: %v", err))
	}
	return &answer{}
}
