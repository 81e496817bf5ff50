// Package binding is the session <-> Actor binding protocol (zlink-digest §7), both
// roles. On the session owner node a STREAM session binds Actors that may live on any
// node (record 38, answered by 20), relays its packets to them (24 with the
// bound-session tail), receives their pushes and replies (36), is replaced when another
// session binds the same Actor (51), and leaves a tombstone (38, state 2) for every
// binding when it goes. When a bound Actor moves to another node the session stays:
// the binding is sealed (42, answered by 43) and its relays held, then its route is
// switched once (44) and what was held goes to the new route in order
// (relocation.go, move.go). On the Actor owner node each activation keeps exactly one
// current binding, registered in the Actor's own turn before the bind is answered: one
// session binds an Actor at a time, and a second bind of it (from any session, on any
// node) replaces the first, whose session is closed. Many clients following one Actor
// each bind an Actor of their own.
//
// The physical socket never leaves the session owner node; only these records cross.
// Same-node bindings follow the same rules: the records are delivered in-process and
// never reach the record tap.
//
// Every node started by meshnode.Start runs a Binder (Node.Binder); New starts one on
// a bare mesh node and Actor host. A session handler binds its session with
// Binder.Bind(ctx, peer, actor.Address{...}) and relays packets to the bound Actor
// with Binder.Relay. The Actor receives *actor.SessionBound, the relayed packets as
// *actor.SessionPacket (a Request is answered with actor.Context.Reply) and
// *actor.SessionEnded, and reaches its session with actor.Context.Push.
package binding
