package actor

import (
	"context"
	"errors"
	"fmt"
	"time"

	proto "github.com/meshnode/meshnode/internal/protoactor/actor"

	"github.com/meshnode/meshnode/fault"
	"github.com/meshnode/meshnode/mesh"
	"github.com/meshnode/meshnode/mesh/meshpb"
)

// Directory answers, from any node, where an ActorId lives, activating it on demand.
// The embedded default is RendezvousDirectory; an external store can implement this
// interface instead.
type Directory interface {
	// Lookup returns the route fence of the Actor id of kind. onRID, when not empty,
	// asks for explicit placement on that node.
	Lookup(ctx context.Context, kind, id, onRID string) (RouteFence, error)
}

// directoryActorName is the name of each node's directory actor, which activates
// Actors on behalf of lookups from other nodes.
const directoryActorName = "$directory"

// defaultLookupTimeout bounds a remote lookup when ctx has no deadline.
const defaultLookupTimeout = 5 * time.Second

// RendezvousDirectory places each ActorId on the live member with the highest
// rendezvous (highest-random-weight) score for it: every node computes the same owner
// from the same membership, so a lookup needs one hop to the owner and no shared store.
// When the owner fails, the next-highest member becomes the owner and activates the
// Actor anew, with a higher authority owner generation.
type RendezvousDirectory struct {
	host *Host
}

// Lookup implements Directory.
func (d *RendezvousDirectory) Lookup(ctx context.Context, kind, id, onRID string) (RouteFence, error) {
	h := d.host
	self := h.node.ID()
	target := onRID
	if target == "" {
		owner := d.ownerOf(id, h.node.Membership().Live())
		if owner.RID == "" {
			return RouteFence{}, fault.Errorf(fault.Unavailable, "actor: no live member")
		}
		target = owner.RID
	}
	if target == self.RID {
		return h.activateLocalPlaced(kind, id, onRID != "")
	}
	f, err := d.remoteLookup(ctx, target, kind, id, onRID != "")
	var ne *notOwnerError
	if errors.As(err, &ne) && onRID == "" && ne.owner != "" && ne.owner != target {
		// Our view of the membership and the owner's differ for a moment: follow its
		// answer once.
		if ne.owner == self.RID {
			return h.activateLocalPlaced(kind, id, false)
		}
		return d.remoteLookup(ctx, ne.owner, kind, id, false)
	}
	return f, err
}

// ownerOf returns the member placement chooses for id.
func (d *RendezvousDirectory) ownerOf(id string, members []mesh.Member) mesh.NodeID {
	var best mesh.NodeID
	var bestScore uint64
	for _, m := range members {
		if m.State != mesh.StateAlive && m.State != mesh.StateSuspect {
			continue
		}
		s := rendezvousScore(id, m.ID.RID)
		if best.RID == "" || s > bestScore || (s == bestScore && m.ID.RID > best.RID) {
			best, bestScore = m.ID, s
		}
	}
	return best
}

// rendezvousScore hashes (id, rid) with FNV-1a and a splitmix64 finaliser: stable
// across processes (no per-process seed), well spread.
func rendezvousScore(id, rid string) uint64 {
	const offset, prime = 14695981039346656037, 1099511628211
	h := uint64(offset)
	for i := 0; i < len(id); i++ {
		h = (h ^ uint64(id[i])) * prime
	}
	h = (h ^ 0xff) * prime
	for i := 0; i < len(rid); i++ {
		h = (h ^ uint64(rid[i])) * prime
	}
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h
}

type notOwnerError struct{ owner string }

func (e *notOwnerError) Error() string {
	return "actor: lookup reached a node that is not the owner; owner " + e.owner
}

func (d *RendezvousDirectory) remoteLookup(ctx context.Context, rid, kind, id string, placeHere bool) (RouteFence, error) {
	h := d.host
	mem, ok := h.node.Membership().Member(rid)
	if !ok || !h.node.Membership().IsLive(mem.ID) {
		return RouteFence{}, fault.Errorf(fault.Unavailable, "actor: node %s is not a live member", rid)
	}
	timeout := defaultLookupTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	self := h.node.ID()
	req := &meshpb.LookupRequest{Kind: kind, ActorId: id, PlaceHere: placeHere, FromRid: self.RID, FromGeneration: self.Generation}
	res, err := h.system.Root.RequestFuture(proto.NewPID(mem.RemoteAddr, directoryActorName), req, timeout).Result()
	if err != nil {
		return RouteFence{}, fault.Errorf(fault.Unavailable, "actor: lookup of %s on %s: %v", id, rid, err)
	}
	resp, ok := res.(*meshpb.LookupResponse)
	if !ok {
		return RouteFence{}, fault.Errorf(fault.Unavailable, "actor: lookup of %s on %s: unexpected answer %T", id, rid, res)
	}
	return responseFence(resp)
}

func responseFence(r *meshpb.LookupResponse) (RouteFence, error) {
	switch r.ErrorCode {
	case "":
		return RouteFence{
			Ref:                      Ref{ID: r.ActorId, ObjectGeneration: r.ObjectGeneration},
			Node:                     mesh.NodeID{RID: r.NodeRid, Generation: r.NodeGeneration},
			AuthorityOwnerGeneration: r.AuthorityOwnerGeneration,
			OwnerLeaseGeneration:     r.OwnerLeaseGeneration,
		}, nil
	case codeNotOwner:
		return RouteFence{}, &notOwnerError{owner: r.OwnerRid}
	case codeUnknownKind:
		return RouteFence{}, fmt.Errorf("%w: %s", ErrUnknownKind, r.ErrorMessage)
	case codeKindMismatch:
		return RouteFence{}, fmt.Errorf("%w: %s", ErrKindMismatch, r.ErrorMessage)
	case codeBadID:
		return RouteFence{}, fmt.Errorf("%w: %s", ErrBadID, r.ErrorMessage)
	}
	return RouteFence{}, fault.Errorf(fault.Unavailable, "actor: %s: %s", r.ErrorCode, r.ErrorMessage)
}

// Directory error codes on the wire.
const (
	codeNotOwner     = "not_owner"
	codeUnknownKind  = "not_found"
	codeKindMismatch = "type_mismatch"
	codeBadID        = "invalid_argument"
	codeUnavailable  = "unavailable"
)

// directoryActor serves lookups from other nodes.
type directoryActor struct{ h *Host }

func (a *directoryActor) Receive(ctx proto.Context) {
	req, ok := ctx.Message().(*meshpb.LookupRequest)
	if !ok {
		return
	}
	ctx.Respond(a.h.serveLookup(req))
}

func (h *Host) serveLookup(req *meshpb.LookupRequest) *meshpb.LookupResponse {
	if !req.PlaceHere {
		if rd, ok := h.dir.(*RendezvousDirectory); ok {
			if owner := rd.ownerOf(req.ActorId, h.node.Membership().Live()); owner.RID != h.node.ID().RID {
				return &meshpb.LookupResponse{ActorId: req.ActorId, ErrorCode: codeNotOwner, OwnerRid: owner.RID}
			}
		}
	}
	f, err := h.activateLocalPlaced(req.Kind, req.ActorId, req.PlaceHere)
	if err != nil {
		code := codeUnavailable
		switch {
		case errors.Is(err, ErrUnknownKind):
			code = codeUnknownKind
		case errors.Is(err, ErrKindMismatch):
			code = codeKindMismatch
		case errors.Is(err, ErrBadID):
			code = codeBadID
		}
		return &meshpb.LookupResponse{ActorId: req.ActorId, ErrorCode: code, ErrorMessage: err.Error()}
	}
	return &meshpb.LookupResponse{
		ActorId: f.ID, ObjectGeneration: f.ObjectGeneration,
		NodeRid: f.Node.RID, NodeGeneration: f.Node.Generation,
		AuthorityOwnerGeneration: f.AuthorityOwnerGeneration, OwnerLeaseGeneration: f.OwnerLeaseGeneration,
	}
}
