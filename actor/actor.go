package actor

import (
	"fmt"
	"strings"

	"github.com/meshnode/meshnode/mesh"
)

// Ref names one activation of an Actor: its ActorId and the ObjectGeneration of that
// activation. A new activation of the same ActorId gets a new, larger generation.
type Ref struct {
	ID               string
	ObjectGeneration uint64
}

func (r Ref) String() string { return fmt.Sprintf("%s@%d", r.ID, r.ObjectGeneration) }

// RouteFence is where an activation lives and under which authority (digest §6.3): the
// node lifecycle that owns it, the authority owner generation of that ownership and the
// owner's lease generation. A message sent with a fence is delivered only while every
// part of it is current.
type RouteFence struct {
	Ref
	Node                     mesh.NodeID
	AuthorityOwnerGeneration uint64
	OwnerLeaseGeneration     uint64
}

func (f RouteFence) String() string {
	return fmt.Sprintf("%s on %s (authority %d, lease %d)", f.Ref, f.Node, f.AuthorityOwnerGeneration, f.OwnerLeaseGeneration)
}

// Message is an Actor message in its wire form: a name, a content type and the encoded
// bytes. A message whose name has no registered type (MessageOf) is delivered as a
// *Message; one can also be sent as it is.
type Message struct {
	Name        string
	ContentType string
	// Data is read-only. In a message that came from another node it points into the
	// envelope that carried it, which may hold other records too (up to 64 KiB): copy
	// it (bytes.Clone) to keep it past the turn without keeping that envelope.
	Data []byte
}

// Started is the first message of every activation. Moved is true on the node an
// Actor moved to: its state was restored (Kind.State or Snapshotter) before it runs.
type Started struct{ Moved bool }

// Stopping is the last message of an activation before it is stopped. Moved is true on
// the node an Actor moved away from: it lives on at the target (with the state its
// move captured), so the Actor must not announce its end.
type Stopping struct{ Moved bool }

// Actor is the application's Actor: one method, called once per message, never
// concurrently for one activation.
//
// Every message an Actor receives is a pointer, whatever its origin: *Started,
// *Stopping, *SessionBound, *SessionEnded, *SessionPacket, *T for a type T registered
// with MessageOf (sent by value or by pointer, from this node or another), *Message for
// a name not registered here, and *T for a T given to Context.Poster. A type switch
// therefore lists pointer types only:
//
//	switch m := ctx.Message().(type) {
//	case *actor.Started:
//	case *Greet:
//	case *actor.SessionPacket:
//	}
type Actor interface {
	Receive(ctx *Context)
}

// SystemKindPrefix starts the names of the runtime's own Actor kinds (the sessions
// directory of the plugin services, say). Applications name theirs otherwise; the
// admin API lists the runtime's Actors only when asked for the system's.
const SystemKindPrefix = "meshnode."

// IsSystemKind reports whether kind is one of the runtime's own.
func IsSystemKind(kind string) bool { return strings.HasPrefix(kind, SystemKindPrefix) }

// Kind is a named Actor implementation.
type Kind struct {
	Name string
	New  func() Actor
	// State, when set, opts the kind into state transfer when an Actor moves to another
	// node: it returns a pointer to the part of the Actor that moves with it, encoded
	// with msgpack on the source and decoded into a fresh instance on the target. An
	// Actor that implements Snapshotter encodes its state itself instead. A kind with
	// neither starts fresh on the target (same ActorId, ObjectGeneration and bindings,
	// empty state).
	State func(a Actor) any
	// Persist keeps the state (the one a move carries: State or Snapshotter) in the
	// node's store, so that it survives a crash or a restart (docs/persistence.md):
	// SaveExplicitly (Context.Save writes it) or SaveEveryTurn (every turn that handled
	// a message saves it before its replies go). An activation loads the last saved
	// state before Started. NotPersisted (the zero value): memory only.
	Persist Persistence
}
