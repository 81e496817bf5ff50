// Package actor hosts application Actors on a mesh node: Actor kinds, activations (one
// protoactor actor each, whose mailbox serialises the Actor's turns), refs (Ref) and
// route fences (RouteFence), the directory that says where an ActorId lives (activating
// it on demand where placement puts it), and Actor-to-Actor messages and requests
// across nodes carried by service-wire records 24 (the message) and 20 (the reply).
//
// An Actor is a type with a Receive(*Context) method, registered under a name as a
// Kind; the values Actors exchange are Go types registered with MessageOf. A node
// started by meshnode.Start hosts the Kinds and Messages of its Config, and
// Node.Actors returns its Host (NewHost and Host.Register do the same on a bare
// mesh.Node). From outside any Actor, Host.Send and Host.Request reach an Actor by
// Address (kind and ActorId, wherever it lives) or by RouteFence; inside a turn,
// Context.Send, Context.Request and Context.Reply do it for the Actor.
//
// Every message an Actor receives is a pointer (see Actor). One STREAM session at a
// time is bound to an Actor (package binding): a second bind of the same Actor replaces
// the first session's, which is then closed. An Actor that many clients follow (a
// room and its members) is reached by a binding per client to an Actor of its own,
// which messages the shared one, not by one binding shared among clients.
package actor
