package actor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	proto "github.com/meshnode/meshnode/internal/protoactor/actor"

	"github.com/meshnode/meshnode/fault"
	"github.com/meshnode/meshnode/mesh"
	"github.com/meshnode/meshnode/mesh/meshpb"
)

// The directory actor serves other nodes: lookups for ids this node holds, explicit
// activations, compare-and-set claims, sync requests and reports, retirements, and the
// relocation traffic (a move's prepare, a relocation asked of the node hosting an
// Actor). Work that may wait (a lookup waits for a placement, a prepare for the
// restore) runs on a task of the host's own, bounded: past maxDirectoryTasks a request
// is answered unavailable at once instead of queueing without bound.

// maxDirectoryTasks bounds the directory requests a node serves at once.
const maxDirectoryTasks = 256

// syncTimeout bounds how long a rebuild waits for each member's sync answer.
const syncTimeout = 2 * time.Second

// directoryActor receives the directory traffic of one node.
type directoryActor struct{ h *Host }

func (a *directoryActor) Receive(ctx proto.Context) {
	h := a.h
	if !h.forThisLifecycle(ctx.Message()) {
		// Directory traffic is not a record: it is not counted with the record drops.
		h.log.Debug("actor: directory message for an earlier lifecycle of this node dropped", "type", fmt.Sprintf("%T", ctx.Message()))
		return
	}
	switch m := ctx.Message().(type) {
	case *meshpb.SyncRequest:
		ctx.Respond(&meshpb.SyncResponse{Hosted: h.hosted()})
	case *meshpb.SyncResponse:
		// An unsolicited report: a node hosts Actors this node holds the entries of.
		h.rdir.merge(m.Hosted)
	case *meshpb.Retire:
		h.retireDuplicate(fenceFromPB(m.Fence), fenceFromPB(m.Winner))
	case *meshpb.ClaimRequest:
		if m.Kind == "$hosts" {
			ctx.Respond(&meshpb.ClaimResponse{Applied: m.Expected != nil && h.hostsFence(fenceFromPB(m.Expected))})
			return
		}
		if m.Kind == "$delete" {
			// A release, one-way: the entry goes if it still names that activation.
			if m.Expected != nil {
				h.rdir.compareAndSet("", m.ActorId, fencePtrFromPB(m.Expected), nil)
			}
			return
		}
		h.serveAsync(ctx, m)
	case *meshpb.LookupRequest:
		// The common case, an Actor that has an entry, is answered in this turn; only
		// a placement (which may wait) takes a task.
		if m.Stale == nil {
			if f, ok := h.rdir.entryNow(m.Kind, m.ActorId); ok {
				ctx.Respond(lookupResponse(f, nil))
				return
			}
		}
		h.serveAsync(ctx, m)
	case *meshpb.ActivateRequest, *meshpb.RelocateRequest, *meshpb.MovePrepare:
		h.serveAsync(ctx, m)
	}
}

// serveAsync serves a request that may wait on a host task, or answers it busy.
func (h *Host) serveAsync(ctx proto.Context, m any) {
	sender := ctx.Sender()
	if !h.startTask(func(tctx context.Context) { h.serveSlow(tctx, sender, m) }) {
		h.dirBusy.Add(1)
		if sender != nil {
			ctx.Respond(busyAnswer(m, h.node.ID().RID))
		}
	}
}

// busyAnswer is the answer to a request node self has no room to serve now; it names
// the request.
func busyAnswer(m any, self string) any {
	var what string
	switch m := m.(type) {
	case *meshpb.LookupRequest:
		what = "lookup of " + m.ActorId
	case *meshpb.ActivateRequest:
		what = "activation of " + m.ActorId
	case *meshpb.ClaimRequest:
		what = "claim of " + m.ActorId
	case *meshpb.RelocateRequest:
		what = "relocation of " + m.ActorId + " to " + m.ToRid
	case *meshpb.MovePrepare:
		what = "move of " + fenceFromPB(m.Source).ID
	default:
		what = fmt.Sprintf("%T", m)
	}
	msg := fmt.Sprintf("actor: %s: the directory of %s serves its bound of %d requests already", what, self, maxDirectoryTasks)
	switch m.(type) {
	case *meshpb.RelocateRequest:
		return &meshpb.RelocateResponse{ErrorCode: fault.Unavailable.Code(), ErrorMessage: msg}
	case *meshpb.MovePrepare:
		return &meshpb.MoveReady{ErrorCode: fault.Unavailable.Code(), ErrorMessage: msg}
	case *meshpb.ClaimRequest:
		return &meshpb.ClaimResponse{ErrorCode: fault.Unavailable.Code(), ErrorMessage: msg}
	}
	return &meshpb.LookupResponse{ErrorCode: fault.Unavailable.Code(), ErrorMessage: msg}
}

// serveSlow serves one request that may wait, on a host task.
func (h *Host) serveSlow(ctx context.Context, sender *proto.PID, m any) {
	var answer any
	switch m := m.(type) {
	case *meshpb.LookupRequest:
		if from := (mesh.NodeID{RID: m.FromRid, Generation: m.FromGeneration}); from.RID != "" && from != h.node.ID() {
			// The asker sees this node as the holder; if this node does not see the
			// asker yet, its view is the one behind: wait (briefly) to catch up.
			for i := 0; i < 100 && !h.node.Membership().IsLive(from) && ctx.Err() == nil; i++ {
				_ = sleepCtx(ctx, 20*time.Millisecond)
			}
		}
		if holder := h.rdir.holderOf(m.ActorId); holder != h.node.ID() {
			answer = &meshpb.LookupResponse{ActorId: m.ActorId, ErrorCode: codeNotOwner, OwnerRid: holder.RID}
			break
		}
		f, err := h.rdir.serve(ctx, m.Kind, m.ActorId, m.PlaceOn, fencePtrFromPB(m.Stale))
		if ne := (*notOwnerError)(nil); errors.As(err, &ne) {
			// The holder changed while the lookup waited here.
			answer = &meshpb.LookupResponse{ActorId: m.ActorId, ErrorCode: codeNotOwner, OwnerRid: ne.owner}
			break
		}
		answer = lookupResponse(f, err)
	case *meshpb.ActivateRequest:
		var f RouteFence
		err := ErrNoQuorum
		if h.draining.Load() {
			err = fault.Errorf(fault.ShuttingDown, "actor: node %s is draining", h.node.ID().RID)
		} else if h.quorum.has() {
			f, err = h.activateLocal(ctx, m.Kind, m.ActorId)
		}
		answer = lookupResponse(f, err)
	case *meshpb.RelocateRequest:
		f, err := h.Relocate(ctx, m.ActorId, m.ToRid)
		r := &meshpb.RelocateResponse{}
		if err != nil {
			r.ErrorCode, r.ErrorMessage = errorCode(err), err.Error()
		} else {
			r.Fence = fenceToPB(f)
		}
		answer = r
	case *meshpb.MovePrepare:
		answer = h.prepareMove(ctx, m)
	case *meshpb.ClaimRequest:
		answer = h.rdir.serveClaim(ctx, m)
	}
	if sender != nil && answer != nil {
		h.system.Root.Send(sender, answer)
	}
}

// startTask runs fn on a task the host owns (stopped and waited for at Close); it
// reports false when the host is closed or at maxDirectoryTasks.
func (h *Host) startTask(fn func(ctx context.Context)) bool {
	select {
	case h.taskSlots <- struct{}{}:
	default:
		return false
	}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		<-h.taskSlots
		return false
	}
	h.tasks.Add(1)
	h.mu.Unlock()
	go func() {
		defer func() {
			<-h.taskSlots
			h.tasks.Done()
		}()
		ctx, cancel := context.WithTimeout(h.closing, defaultLookupTimeout)
		defer cancel()
		fn(ctx)
	}()
	return true
}

// serveClaim answers a claim (or, with neither expected nor next, a query of the entry).
func (d *RendezvousDirectory) serveClaim(ctx context.Context, m *meshpb.ClaimRequest) *meshpb.ClaimResponse {
	if holder := d.holderOf(m.ActorId); holder != d.host.node.ID() {
		return &meshpb.ClaimResponse{ErrorCode: fault.Unavailable.Code(), ErrorMessage: "not the directory holder of " + m.ActorId + " (" + holder.RID + " is)"}
	}
	// A claim waits for the rebuild after a membership change: the entry it compares
	// against may still be coming in.
	if err := d.usable(ctx); err != nil {
		return &meshpb.ClaimResponse{ErrorCode: errorCode(err), ErrorMessage: err.Error()}
	}
	if m.Expected == nil && m.Next == nil {
		d.mu.Lock()
		e, ok := d.entries[m.ActorId]
		d.mu.Unlock()
		if !ok || !d.host.node.Membership().IsLive(e.fence.Node) {
			return &meshpb.ClaimResponse{}
		}
		return &meshpb.ClaimResponse{Current: fenceToPB(e.fence), Kind: e.kind}
	}
	applied, cur, found := d.compareAndSet(m.Kind, m.ActorId, fencePtrFromPB(m.Expected), fencePtrFromPB(m.Next))
	r := &meshpb.ClaimResponse{Applied: applied}
	if found {
		r.Current, r.Kind = fenceToPB(cur.fence), cur.kind
	}
	return r
}

// hosted lists this node's activations for a sync (those still arriving by a move are
// not yet this node's: the directory names their source until the move commits).
func (h *Host) hosted() []*meshpb.Hosted {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]*meshpb.Hosted, 0, len(h.acts))
	for _, a := range h.acts {
		if a.arriving.Load() {
			continue
		}
		out = append(out, &meshpb.Hosted{Kind: a.kind, Fence: fenceToPB(a.fence)})
	}
	// An Actor that moved away but whose target has not committed yet is still this
	// node's in the directory: a rebuild that missed it would place it anew.
	for _, e := range h.departing {
		out = append(out, &meshpb.Hosted{Kind: e.Kind, Fence: fenceToPB(e.Fence)})
	}
	return out
}

// membershipChanged starts (or restarts) the rebuild of the entries this node holds.
// Until it is done the node answers for ids it has an entry of, and makes lookups of
// the others wait. It reports false when the host is closed (no rebuild runs).
func (d *RendezvousDirectory) membershipChanged() bool {
	d.mu.Lock()
	d.syncGen++
	if d.rebuilding {
		d.mu.Unlock()
		return true
	}
	d.rebuilding = true
	d.releasedDuring = map[RouteFence]bool{}
	d.ready = make(chan struct{})
	d.mu.Unlock()
	if !d.host.startOwned(d.rebuild) {
		d.mu.Lock()
		d.rebuilding = false
		d.releasedDuring = nil
		close(d.ready)
		d.mu.Unlock()
		return false
	}
	return true
}

// rebuild pushes this node's activations to their holders and pulls every live
// member's, until a round ends with no membership change in between.
func (d *RendezvousDirectory) rebuild(ctx context.Context) {
	h := d.host
	for {
		d.mu.Lock()
		gen := d.syncGen
		d.mu.Unlock()
		self := h.node.ID()
		live := h.node.Membership().Live()
		own := h.hosted()
		// Push: activations placed here while the holder's view was older reach it.
		reports := map[mesh.NodeID][]*meshpb.Hosted{}
		for _, a := range own {
			if holder := ownerOf(a.Fence.ActorId, live); holder.RID != "" && holder != self {
				reports[holder] = append(reports[holder], a)
			}
		}
		for holder, list := range reports {
			if mem, ok := h.node.Membership().Member(holder.RID); ok {
				h.system.Root.Send(proto.NewPID(mem.RemoteAddr, directoryActorName), &meshpb.SyncResponse{Hosted: list, ToGeneration: mem.ID.Generation})
			}
		}
		// Pull: every member's activations, for the ids this node now holds. When the
		// view only grew since the last complete rebuild (members joined, none left or
		// failed), this node holds a subset of the ids it held (rendezvous hashing moves
		// ids only to the new members) and its entries of them are current (placements,
		// moves and stops all go through the holder): only the members it has not merged
		// yet are asked. A join then costs each member one pull, not one per member.
		var mu sync.Mutex
		all := append([]*meshpb.Hosted(nil), own...)
		synced := map[mesh.NodeID]bool{self: true}
		liveSet := make(map[mesh.NodeID]bool, len(live))
		for _, m := range live {
			liveSet[m.ID] = true
		}
		d.mu.Lock()
		if d.syncedLive != nil && grewFrom(d.syncedLive, liveSet) {
			for id := range d.synced {
				if liveSet[id] {
					synced[id] = true
				}
			}
		}
		d.mu.Unlock()
		var ask []mesh.Member
		for _, m := range live {
			if !synced[m.ID] {
				ask = append(ask, m)
			}
		}
		var wg sync.WaitGroup
		for _, m := range ask {
			wg.Add(1)
			go func(id mesh.NodeID) {
				defer wg.Done()
				sctx, cancel := context.WithTimeout(ctx, syncTimeout)
				defer cancel()
				h.dirPulls.Add(1)
				res, err := h.ask(sctx, id, &meshpb.SyncRequest{FromRid: self.RID, FromGeneration: self.Generation})
				if err != nil {
					h.log.Debug("actor: directory sync request failed", "member", id.String(), "err", err)
					return
				}
				if r, ok := res.(*meshpb.SyncResponse); ok {
					mu.Lock()
					all = append(all, r.Hosted...)
					synced[id] = true
					mu.Unlock()
				}
			}(m.ID)
		}
		wg.Wait()
		d.mu.Lock()
		if gen != d.syncGen && ctx.Err() == nil {
			d.mu.Unlock()
			continue
		}
		recent := h.failedWithinMargin()
		handOff := map[mesh.NodeID][]*meshpb.Hosted{}
		for id, e := range d.entries {
			_, failing := recent[e.fence.Node]
			owner := ownerOf(id, live)
			nodeLive := h.node.Membership().IsLive(e.fence.Node)
			if owner != self || (!nodeLive && !failing) {
				// Entries of a node that failed within the failover margin stay: a
				// lookup waits out the margin before it places the Actor anew.
				delete(d.entries, id)
				if owner != self && owner.RID != "" && nodeLive {
					handOff[owner] = append(handOff[owner], &meshpb.Hosted{Kind: e.kind, Fence: fenceToPB(e.fence)})
				}
			}
		}
		d.mu.Unlock()
		// An entry this node gives up goes to the id's new holder, which merges it
		// (the later authority wins). The activations' own reports are not enough: a
		// move that committed here while the new holder pulled them is reported by
		// neither side (the target was still arriving, the source no longer names it
		// as its own, or names its old fence), and the new holder would keep the
		// move's source, failing the Actor's next move.
		for owner, list := range handOff {
			if mem, ok := h.node.Membership().Member(owner.RID); ok {
				h.system.Root.Send(proto.NewPID(mem.RemoteAddr, directoryActorName), &meshpb.SyncResponse{Hosted: list, ToGeneration: mem.ID.Generation})
			}
		}
		d.merge(all)
		d.mu.Lock()
		d.synced = synced
		d.syncedLive = liveSet
		d.rebuilding = false
		d.releasedDuring = nil
		close(d.ready)
		d.mu.Unlock()
		return
	}
}

// grewFrom reports whether every member of before is still in now.
func grewFrom(before, now map[mesh.NodeID]bool) bool {
	for id := range before {
		if !now[id] {
			return false
		}
	}
	return true
}

// merge enters reported activations (and entries handed over by a former holder) of the
// ids this node holds. Two fences of one incarnation (same Ref) are a move's source and
// target: the later authority is current. Two activations of one ActorId (a partition
// healed, or two placements raced while membership changed): the one with the higher
// authority owner generation (the later failover or move) stays, and the other's node
// is told to retire it.
func (d *RendezvousDirectory) merge(list []*meshpb.Hosted) {
	h := d.host
	self := h.node.ID()
	live := h.node.Membership().Live()
	type loser struct{ lost, won RouteFence }
	var losers []loser
	d.mu.Lock()
	for _, a := range list {
		f := fenceFromPB(a.Fence)
		if f.ID == "" || ownerOf(f.ID, live) != self || !h.node.Membership().IsLive(f.Node) || d.releasedDuring[f] {
			continue
		}
		if f.Node == self && !h.hostsFence(f) {
			continue // stopped since this node listed it
		}
		e, ok := d.entries[f.ID]
		switch {
		case !ok || !h.node.Membership().IsLive(e.fence.Node):
			d.entries[f.ID] = dirEntry{kind: a.Kind, fence: f}
		case e.fence == f:
		case f.Ref == e.fence.Ref:
			// One incarnation at two places: a move's source and its target (a report
			// taken before the commit, or an entry handed over). The later authority
			// is where it moved; the other stopped with the move.
			if f.AuthorityOwnerGeneration > e.fence.AuthorityOwnerGeneration {
				d.entries[f.ID] = dirEntry{kind: a.Kind, fence: f}
			}
		case f.AuthorityOwnerGeneration > e.fence.AuthorityOwnerGeneration:
			losers = append(losers, loser{lost: e.fence, won: f})
			d.entries[f.ID] = dirEntry{kind: a.Kind, fence: f}
		default:
			losers = append(losers, loser{lost: f, won: e.fence})
		}
	}
	d.mu.Unlock()
	for _, l := range losers {
		h.log.Warn("actor: two activations of one Actor; retiring the older authority", "actor", l.lost.ID, "retired", l.lost.String(), "kept", l.won.String())
		h.duplicates.Add(1)
		if l.lost.Node == self {
			h.retireDuplicate(l.lost, l.won)
			continue
		}
		if mem, ok := h.node.Membership().Member(l.lost.Node.RID); ok {
			h.system.Root.Send(proto.NewPID(mem.RemoteAddr, directoryActorName), &meshpb.Retire{Fence: fenceToPB(l.lost), Winner: fenceToPB(l.won), ToGeneration: mem.ID.Generation})
		}
	}
}

// retireDuplicate stops the local activation under fence lost (another activation of
// the same Actor won).
func (h *Host) retireDuplicate(lost, won RouteFence) {
	a, ok := h.local(lost.ID)
	if !ok || a.fence != lost || a.fence == won {
		return
	}
	h.Deactivate(lost.ID)
}

// startOwned runs fn on a goroutine the host owns: its ctx ends when the host closes,
// and Close waits for it.
func (h *Host) startOwned(fn func(ctx context.Context)) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return false
	}
	h.tasks.Add(1)
	go func() {
		defer h.tasks.Done()
		fn(h.closing)
	}()
	return true
}

// quorumChanged acts on a change of keep-majority: a node that lost its majority stops
// every activation (the majority side activates them anew, and after the partition
// heals only theirs remain); one that regained it serves again.
func (h *Host) quorumChanged(ok bool) {
	if ok {
		h.log.Info("actor: this node sees a majority of the mesh again; placing Actors")
		return
	}
	h.log.Warn("actor: this node lost its majority of the mesh (keep-majority): stopping its Actors and refusing lookups until it is back")
	h.mu.Lock()
	ids := make([]string, 0, len(h.acts))
	for id := range h.acts {
		ids = append(ids, id)
	}
	h.mu.Unlock()
	for _, id := range ids {
		h.Deactivate(id)
	}
}

// entryNow returns id's entry when this node holds it, is not rebuilding, has its
// majority and the entry names a live node of the same kind: an answer that needs no
// wait.
func (d *RendezvousDirectory) entryNow(kind, id string) (RouteFence, bool) {
	h := d.host
	if !h.quorum.has() || d.holderOf(id) != h.node.ID() {
		return RouteFence{}, false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	select {
	case <-d.ready:
	default:
		return RouteFence{}, false
	}
	e, ok := d.entries[id]
	if !ok || (kind != "" && e.kind != kind) || !h.node.Membership().IsLive(e.fence.Node) {
		return RouteFence{}, false
	}
	return e.fence, true
}
