package binding

import (
	"github.com/meshnode/meshnode/actor"
	"github.com/meshnode/meshnode/mesh"
	"github.com/meshnode/meshnode/mesh/wire"
)

// verdict is what the relocation barrier makes of a 42 or a 44 (digest §6.6.5, §7.13).
// The names are the result names of the golden receiver cases.
type verdict uint8

const (
	// verdictApplied: a state transition (a seal installed, a route update applied, a
	// seal released by its timeout).
	verdictApplied verdict = iota + 1
	// verdictIdempotent: an identical duplicate 42; the 43 is sent again, nothing else.
	verdictIdempotent
	// verdictAlreadyApplied: an identical duplicate 44; nothing happens.
	verdictAlreadyApplied
	// verdictProtocolError: the same relocation with other content; nothing happens.
	verdictProtocolError
	// verdictStale: not the binding's current relocation (another relocation id, no
	// seal, a seal that timed out, a sender that is not the one the record names).
	verdictStale
	// verdictGone: a 42 for a binding (or a session) of this node that is gone: nothing
	// to hold, the 43 is sent at once (relocation.go, onSeal).
	verdictGone
)

func (v verdict) String() string {
	switch v {
	case verdictApplied:
		return "applied"
	case verdictIdempotent:
		return "idempotent"
	case verdictAlreadyApplied:
		return "alreadyApplied"
	case verdictProtocolError:
		return "protocolError"
	case verdictStale:
		return "stale"
	case verdictGone:
		return "gone"
	}
	return "verdict(?)"
}

// relocationBarrier judges the relocation records of one binding on the session owner
// (the state machine of digest §7.17: Bound -42-> Sealed -44-> Bound). It is pure (no
// I/O, no clock, no lock of its own): the session calls it under its lock and acts on
// the verdict, so the judgement is tested on its own against the golden receiver cases.
type relocationBarrier struct {
	// sealed is the installed seal, kept whole so that a duplicate is told from a
	// conflicting one; nil while the route is open.
	sealed *wire.SessionRelocationSeal
	// last is the route update that released the last seal, kept whole for the same
	// reason: a duplicate 44 must not be mistaken for a late one.
	last *wire.SessionRelocationRoute
	// transitions counts state changes (tests; a duplicate must not make one).
	transitions int
}

// isSealed reports whether a seal is installed.
func (r *relocationBarrier) isSealed() bool { return r.sealed != nil }

// seal judges a 42 from node from, for a binding whose route is route. Applied: the
// seal is installed (the caller holds the binding's relays and answers 43).
func (r *relocationBarrier) seal(rec *wire.SessionRelocationSeal, route actor.RouteFence, from mesh.NodeID) (verdict, string) {
	if r.sealed != nil {
		if r.sealed.Relocation != rec.Relocation {
			// One move at a time: the source does not start another before this one is
			// committed, aborted or timed out.
			return verdictStale, "the binding is sealed for another relocation"
		}
		if *r.sealed != *rec {
			return verdictProtocolError, "a seal for the same relocation with other content"
		}
		return verdictIdempotent, ""
	}
	if r.last != nil && r.last.Relocation == rec.Relocation {
		// A retransmitted 42 that crossed the route update: the move is over.
		return verdictStale, "a seal for a relocation whose route update was applied"
	}
	src := actor.FenceFromWire(rec.Actor)
	if src.Node != from || route.Node != from {
		// The source sends the seal: a 42 from elsewhere, or for an Actor this binding
		// does not route to that node, is not this binding's.
		return verdictStale, "a seal not sent by the node the binding routes to"
	}
	if src.Ref != route.Ref || src.AuthorityOwnerGeneration != route.AuthorityOwnerGeneration {
		return verdictStale, "a seal with a stale Actor fence"
	}
	c := *rec
	r.sealed = &c
	r.transitions++
	return verdictApplied, ""
}

// route judges a 44 from node from. Applied: the seal is released; the caller switches
// the route for a commit (not for an abort) and flushes the held relays.
func (r *relocationBarrier) route(rec *wire.SessionRelocationRoute, from mesh.NodeID) (verdict, string) {
	if r.sealed != nil && sameRelocation(r.sealed, rec) {
		s := r.sealed
		switch c, a := rec.Route.Commit, rec.Route.Abort; {
		case c != nil && a == nil:
			if rec.SenderRole != wire.RoleTarget {
				return verdictProtocolError, "a commit not sent by the target"
			}
			if from != (mesh.NodeID{RID: c.TargetNodeRID, Generation: c.TargetNodeGeneration}) {
				return verdictStale, "a commit not sent by the target it names"
			}
			if c.PreviousAuthorityOwnerGeneration != s.Actor.ExpectedAuthorityOwnerGeneration ||
				c.TargetAuthorityOwnerGeneration <= c.PreviousAuthorityOwnerGeneration {
				return verdictProtocolError, "a commit that does not follow the sealed authority"
			}
		case a != nil && c == nil:
			if rec.SenderRole != wire.RoleSource {
				return verdictProtocolError, "an abort not sent by the source"
			}
			if from != (mesh.NodeID{RID: s.Actor.TargetNodeRID, Generation: s.Actor.TargetNodeGeneration}) {
				return verdictStale, "an abort not sent by the sealed source"
			}
			if a.CurrentAuthorityOwnerGeneration != s.Actor.ExpectedAuthorityOwnerGeneration {
				return verdictProtocolError, "an abort that does not name the sealed authority"
			}
		default:
			return verdictProtocolError, "a route update that is neither a commit nor an abort"
		}
		r.sealed = nil
		r.last = cloneRoute(rec)
		r.transitions++
		return verdictApplied, ""
	}
	if r.last != nil && sameRoute(r.last, rec) {
		if routeEqual(r.last, rec) {
			return verdictAlreadyApplied, ""
		}
		return verdictProtocolError, "a route update for an applied relocation with other content"
	}
	return verdictStale, "no seal of this relocation is installed"
}

// expire releases the seal of relocation id at its timeout; false if the seal is no
// longer that one (the route update won).
func (r *relocationBarrier) expire(id wire.RelocationID) bool {
	if r.sealed == nil || r.sealed.Relocation != id {
		return false
	}
	r.sealed = nil
	r.transitions++
	return true
}

// sameRelocation reports whether a 44 names the seal: the six values of the matching
// seal identity (relocation id high and low, ActorId, ObjectGeneration, SessionRid,
// binding generation). The coordinator fence is not one of them (digest §7.13, R1).
func sameRelocation(s *wire.SessionRelocationSeal, u *wire.SessionRelocationRoute) bool {
	return s.Relocation == u.Relocation && s.Actor.Actor == u.Actor &&
		s.Session.SessionRID == u.Session.SessionRID && s.Session.BindingGeneration == u.Session.BindingGeneration
}

// sameRoute is sameRelocation between two 44s.
func sameRoute(a, b *wire.SessionRelocationRoute) bool {
	return a.Relocation == b.Relocation && a.Actor == b.Actor &&
		a.Session.SessionRID == b.Session.SessionRID && a.Session.BindingGeneration == b.Session.BindingGeneration
}

// routeEqual reports whether two 44s are identical, field by field.
func routeEqual(a, b *wire.SessionRelocationRoute) bool {
	if a.Relocation != b.Relocation || a.Coordinator != b.Coordinator || a.SenderRole != b.SenderRole ||
		a.Actor != b.Actor || a.Session != b.Session {
		return false
	}
	ac, bc := a.Route.Commit, b.Route.Commit
	if (ac == nil) != (bc == nil) || (ac != nil && *ac != *bc) {
		return false
	}
	aa, ba := a.Route.Abort, b.Route.Abort
	return (aa == nil) == (ba == nil) && (aa == nil || *aa == *ba)
}

func cloneRoute(u *wire.SessionRelocationRoute) *wire.SessionRelocationRoute {
	c := *u
	if u.Route.Commit != nil {
		cm := *u.Route.Commit
		c.Route.Commit = &cm
	}
	if u.Route.Abort != nil {
		ab := *u.Route.Abort
		c.Route.Abort = &ab
	}
	return &c
}
