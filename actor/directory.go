package actor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	proto "github.com/meshnode/meshnode/internal/protoactor/actor"

	"github.com/meshnode/meshnode/fault"
	"github.com/meshnode/meshnode/mesh"
	"github.com/meshnode/meshnode/mesh/meshpb"
	"github.com/meshnode/meshnode/store"
)

// Directory answers, from any node, where an ActorId lives, activating it on demand.
// The embedded default is RendezvousDirectory; an external store can implement this
// interface instead.
type Directory interface {
	// Lookup returns the route fence of the Actor id of kind. onRID, when not empty,
	// asks for explicit placement on that node if the Actor has no activation.
	Lookup(ctx context.Context, kind, id, onRID string) (RouteFence, error)
}

// directoryActorName is the name of each node's directory actor: it serves lookups,
// activations, compare-and-set claims, sync requests and relocation traffic from other
// nodes.
const directoryActorName = "$directory"

// defaultLookupTimeout bounds a remote lookup when ctx has no deadline.
const defaultLookupTimeout = 5 * time.Second

// ErrNoQuorum: this node is on the minority side of a partition (keep-majority): it
// neither places nor serves Actors until it is back with a majority.
var ErrNoQuorum = fault.New(fault.Unavailable, "actor: this node does not see a majority of the mesh")

// RendezvousDirectory is the authoritative directory (the Location Store) built into
// every node. Each ActorId has one entry (kind and route fence) held by its holder:
// the live member with the highest rendezvous (highest-random-weight) score for the
// id, so every node finds the holder from its own view of the membership with one hop
// and no shared store. The holder changes an entry only by compare-and-set: on-demand
// activation inserts it (one activation at a time per id), a relocation's target moves
// it, a stopping activation deletes it. When membership changes, the holder of each id
// may change too: every node then asks every live member for what it hosts and rebuilds
// the entries it now holds (SyncRequest), and answers for ids it has no entry of only
// once those answers are in. Only a node that sees a majority of the last agreed
// membership places Actors (keep-majority, quorum.go).
//
// Actors stay where they are activated: a join moves directory entries, not Actors.
type RendezvousDirectory struct {
	host *Host

	mu             sync.Mutex
	entries        map[string]dirEntry      // the ids this node holds
	creating       map[string]chan struct{} // ids being placed now: later lookups wait
	ready          chan struct{}            // closed once the latest rebuild is done
	syncGen        uint64                   // the latest rebuild
	rebuilding     bool
	synced         map[mesh.NodeID]bool // members whose activations the last rebuild merged
	syncedLive     map[mesh.NodeID]bool // the live members the last complete rebuild saw
	releasedDuring map[RouteFence]bool  // activations released while a rebuild runs
}

// dirEntry is the directory entry of one ActorId.
type dirEntry struct {
	kind  string
	fence RouteFence
}

func newRendezvousDirectory(h *Host) *RendezvousDirectory {
	ready := make(chan struct{})
	close(ready)
	return &RendezvousDirectory{host: h, entries: map[string]dirEntry{}, creating: map[string]chan struct{}{}, ready: ready,
		synced: map[mesh.NodeID]bool{h.node.ID(): true}}
}

// Lookup implements Directory.
func (d *RendezvousDirectory) Lookup(ctx context.Context, kind, id, onRID string) (RouteFence, error) {
	return d.lookup(ctx, kind, id, onRID, nil)
}

// lookup is Lookup with the fence an earlier lookup returned that named no activation.
func (d *RendezvousDirectory) lookup(ctx context.Context, kind, id, onRID string, stale *RouteFence) (RouteFence, error) {
	h := d.host
	if id == "" || len(id) > 255 {
		return RouteFence{}, fmt.Errorf("%w: %q", ErrBadID, id)
	}
	holder := d.holderOf(id)
	if holder.RID == "" {
		return RouteFence{}, fault.Errorf(fault.Unavailable, "actor: no live member")
	}
	if holder == h.node.ID() {
		f, err := d.serve(ctx, kind, id, onRID, stale)
		var ne *notOwnerError
		if errors.As(err, &ne) && ne.owner != "" && ne.owner != h.node.ID().RID {
			// The membership changed while the lookup waited for the directory: the id
			// has another holder now, which answers.
			return d.remoteLookup(ctx, ne.owner, kind, id, onRID, stale)
		}
		return f, err
	}
	f, err := d.remoteLookup(ctx, holder.RID, kind, id, onRID, stale)
	var ne *notOwnerError
	if errors.As(err, &ne) && ne.owner != "" && ne.owner != holder.RID {
		// Our view of the membership and the holder's differ for a moment: follow its
		// answer once.
		if ne.owner == h.node.ID().RID {
			return d.serve(ctx, kind, id, onRID, stale)
		}
		return d.remoteLookup(ctx, ne.owner, kind, id, onRID, stale)
	}
	return f, err
}

// Where returns the directory entry of id without activating anything: NotFound when
// the Actor has no activation.
func (d *RendezvousDirectory) Where(ctx context.Context, id string) (string, RouteFence, error) {
	holder := d.holderOf(id)
	if holder.RID == "" {
		return "", RouteFence{}, fault.Errorf(fault.Unavailable, "actor: no live member")
	}
	if holder == d.host.node.ID() {
		if err := d.usable(ctx); err != nil {
			return "", RouteFence{}, err
		}
		d.mu.Lock()
		e, ok := d.entries[id]
		d.mu.Unlock()
		if !ok || !d.host.node.Membership().IsLive(e.fence.Node) {
			return "", RouteFence{}, fmt.Errorf("%w: %s", ErrNotFound, id)
		}
		return e.kind, e.fence, nil
	}
	res, err := d.host.ask(ctx, holder, &meshpb.ClaimRequest{ActorId: id})
	if err != nil {
		return "", RouteFence{}, err
	}
	r, ok := res.(*meshpb.ClaimResponse)
	if !ok {
		return "", RouteFence{}, fault.Errorf(fault.Unavailable, "actor: unexpected answer %T", res)
	}
	if r.ErrorCode != "" {
		return "", RouteFence{}, codeError(r.ErrorCode, r.ErrorMessage)
	}
	if r.Current == nil {
		return "", RouteFence{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	return r.Kind, fenceFromPB(r.Current), nil
}

// holderOf returns the member that holds id's directory entry in this node's view.
func (d *RendezvousDirectory) holderOf(id string) mesh.NodeID {
	return ownerOf(id, d.host.node.Membership().Live())
}

// ownerOf returns the member rendezvous hashing chooses for id.
func ownerOf(id string, members []mesh.Member) mesh.NodeID {
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

// usable waits until the latest rebuild is done and was for the members this node sees
// live now, and fails while this node has no quorum.
//
// The membership view changes a moment before its event reaches the directory (the
// event starts the rebuild). In between, a member that left has handed ids to this
// node whose activations it has not pulled yet: a lookup there would place a second
// activation, and the merge that follows would keep the fresh one and stop the one
// with the state (found by the chaos suite). So a view the last rebuild did not see
// starts the rebuild here, without waiting for the event.
func (d *RendezvousDirectory) usable(ctx context.Context) error {
	for {
		if !d.host.quorum.has() {
			return ErrNoQuorum
		}
		d.mu.Lock()
		ready := d.ready
		d.mu.Unlock()
		select {
		case <-ready:
		case <-ctx.Done():
			return fault.Errorf(fault.Unavailable, "actor: the directory is rebuilding after a membership change: %w", ctx.Err())
		}
		live := d.host.node.Membership().Live()
		d.mu.Lock()
		current, rebuilding := d.rebuiltForLocked(live), d.rebuilding
		d.mu.Unlock()
		if current {
			return nil
		}
		if !rebuilding && !d.membershipChanged() {
			return fault.Errorf(fault.ShuttingDown, "actor: the host is closing")
		}
	}
}

// rebuiltForLocked reports whether the last complete rebuild was for exactly the live
// members live. d.mu is held.
func (d *RendezvousDirectory) rebuiltForLocked(live []mesh.Member) bool {
	if len(live) != len(d.syncedLive) {
		return false
	}
	for _, m := range live {
		if !d.syncedLive[m.ID] {
			return false
		}
	}
	return true
}

// serveHook, when set (by tests, export_test.go), runs in serve once the directory is
// usable, before the holder and the entry are looked at: a test holds a lookup there
// while the membership changes.
var serveHook atomic.Pointer[func(id string)]

// serve answers a lookup for an id this node holds: the entry when it names a live
// node, otherwise a new activation (on placeOn, or here), entered before it is
// returned. Lookups of one id that race wait for the first.
func (d *RendezvousDirectory) serve(ctx context.Context, kind, id, placeOn string, stale *RouteFence) (RouteFence, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, defaultLookupTimeout)
		defer cancel()
	}
	if err := d.usable(ctx); err != nil {
		return RouteFence{}, err
	}
	if hook := serveHook.Load(); hook != nil {
		(*hook)(id)
	}
	h := d.host
	for {
		// This node was the holder when the lookup began; the membership may have
		// changed while it waited (for a rebuild, a creation, the failover margin),
		// and a node that is no longer the holder must not place the Actor: the
		// holder's entry may name a live activation this node's rebuild dropped.
		if holder := d.holderOf(id); holder != h.node.ID() {
			if holder.RID == "" {
				return RouteFence{}, fault.Errorf(fault.Unavailable, "actor: no live member")
			}
			return RouteFence{}, &notOwnerError{owner: holder.RID}
		}
		d.mu.Lock()
		if e, ok := d.entries[id]; ok {
			if kind != "" && e.kind != kind {
				d.mu.Unlock()
				return RouteFence{}, fmt.Errorf("%w: %s is a %s", ErrKindMismatch, id, e.kind)
			}
			if h.node.Membership().IsLive(e.fence.Node) {
				d.mu.Unlock()
				if stale == nil || *stale != e.fence || d.hosts(ctx, e.fence) {
					return e.fence, nil
				}
				// The caller found no activation behind the entry, and its node
				// confirms it: the entry is stale (its release was lost or overtaken).
				d.compareAndSet("", id, &e.fence, nil)
				stale = nil
				continue
			}
			// Its node failed or left: the Actor is activated anew (failover), once the
			// failover margin has passed.
			if wait := h.failoverWait(id, e.fence.Node, true); wait > 0 {
				d.mu.Unlock()
				if err := sleepCtx(ctx, wait); err != nil {
					return RouteFence{}, fault.Errorf(fault.Unavailable, "actor: %s's node failed; failover after the margin (%s more): %w", id, wait.Round(time.Millisecond), err)
				}
				continue
			}
			delete(d.entries, id)
		} else if wait := h.failoverWait(id, mesh.NodeID{}, false); wait > 0 {
			d.mu.Unlock()
			if err := sleepCtx(ctx, wait); err != nil {
				return RouteFence{}, fault.Errorf(fault.Unavailable, "actor: the directory holder of %s failed; placing it after the margin (%s more): %w", id, wait.Round(time.Millisecond), err)
			}
			continue
		}
		if wait, busy := d.creating[id]; busy {
			d.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return RouteFence{}, fault.Errorf(fault.Unavailable, "actor: lookup of %s: %w", id, ctx.Err())
			}
		}
		if !d.syncedWithLiveLocked() {
			// A member this node has not merged the activations of yet (it joined a
			// moment ago, or this node did) may host the Actor: rebuild first.
			d.mu.Unlock()
			d.membershipChanged()
			if err := d.usable(ctx); err != nil {
				return RouteFence{}, err
			}
			d.mu.Lock()
			synced := d.syncedWithLiveLocked()
			d.mu.Unlock()
			if !synced {
				if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
					return RouteFence{}, fault.Errorf(fault.Unavailable, "actor: the directory could not hear from every member before placing %s: %w", id, err)
				}
			}
			continue
		}
		done := make(chan struct{})
		d.creating[id] = done
		d.mu.Unlock()
		f, err := d.place(ctx, kind, id, placeOn)
		d.mu.Lock()
		delete(d.creating, id)
		if err == nil {
			d.entries[id] = dirEntry{kind: kind, fence: f}
		}
		close(done)
		d.mu.Unlock()
		return f, err
	}
}

// place activates id on placeOn (or here).
func (d *RendezvousDirectory) place(ctx context.Context, kind, id, placeOn string) (RouteFence, error) {
	h := d.host
	if kind == "" {
		return RouteFence{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if h.draining.Load() && (placeOn == "" || placeOn == h.node.ID().RID) {
		// A draining node places nothing on itself: the Actor goes where placement
		// would put it without this node.
		others := h.node.Membership().Live()
		others = slices.DeleteFunc(slices.Clone(others), func(m mesh.Member) bool { return m.ID == h.node.ID() })
		if placeOn = ownerOf(id, others).RID; placeOn == "" {
			return RouteFence{}, fault.Errorf(fault.ShuttingDown, "actor: this node is draining and no other member can host %s", id)
		}
	}
	if placeOn == "" || placeOn == h.node.ID().RID {
		return h.activateLocal(ctx, kind, id)
	}
	mem, ok := h.node.Membership().Member(placeOn)
	if !ok || !h.node.Membership().IsLive(mem.ID) {
		return RouteFence{}, fault.Errorf(fault.Unavailable, "actor: node %s is not a live member", placeOn)
	}
	res, err := h.ask(ctx, mem.ID, &meshpb.ActivateRequest{Kind: kind, ActorId: id})
	if err != nil {
		return RouteFence{}, err
	}
	r, ok := res.(*meshpb.LookupResponse)
	if !ok {
		return RouteFence{}, fault.Errorf(fault.Unavailable, "actor: activation of %s on %s: unexpected answer %T", id, placeOn, res)
	}
	return responseFence(r)
}

// claim is the directory's compare-and-set at the holder of id: the entry goes from
// expected (nil: absent) to next (nil: deleted) only if it is expected now. It returns
// whether it applied and the entry as it is after.
func (d *RendezvousDirectory) claim(ctx context.Context, kind, id string, expected, next *RouteFence) (bool, error) {
	holder := d.holderOf(id)
	if holder.RID == "" {
		return false, fault.Errorf(fault.Unavailable, "actor: no live member")
	}
	if holder == d.host.node.ID() {
		if err := d.usable(ctx); err != nil {
			return false, err
		}
		applied, _, _ := d.compareAndSet(kind, id, expected, next)
		return applied, nil
	}
	req := &meshpb.ClaimRequest{Kind: kind, ActorId: id, Expected: fenceToPBPtr(expected), Next: fenceToPBPtr(next)}
	res, err := d.host.ask(ctx, holder, req)
	if err != nil {
		return false, err
	}
	r, ok := res.(*meshpb.ClaimResponse)
	if !ok {
		return false, fault.Errorf(fault.Unavailable, "actor: claim of %s: unexpected answer %T", id, res)
	}
	if r.ErrorCode != "" {
		return false, codeError(r.ErrorCode, r.ErrorMessage)
	}
	return r.Applied, nil
}

// compareAndSet applies a claim at the holder.
func (d *RendezvousDirectory) compareAndSet(kind, id string, expected, next *RouteFence) (applied bool, cur dirEntry, found bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	cur, found = d.entries[id]
	switch {
	case expected == nil && found:
		return false, cur, found
	case expected != nil && (!found || cur.fence != *expected):
		return false, cur, found
	}
	if next == nil {
		delete(d.entries, id)
		if d.rebuilding && expected != nil {
			// A report a rebuild collected before this release must not bring the
			// entry back.
			d.releasedDuring[*expected] = true
		}
		return true, dirEntry{}, false
	}
	if kind == "" {
		kind = cur.kind
	}
	e := dirEntry{kind: kind, fence: *next}
	d.entries[id] = e
	return true, e, true
}

// released deletes id's entry if it still names f (the activation stopped). It never
// waits: the holder is told one-way.
func (d *RendezvousDirectory) released(kind string, f RouteFence) {
	holder := d.holderOf(f.ID)
	if holder.RID == "" {
		return
	}
	if holder == d.host.node.ID() {
		d.compareAndSet(kind, f.ID, &f, nil)
		return
	}
	if mem, ok := d.host.node.Membership().Member(holder.RID); ok {
		d.host.system.Root.Send(proto.NewPID(mem.RemoteAddr, directoryActorName),
			&meshpb.ClaimRequest{Kind: "$delete", ActorId: f.ID, Expected: fenceToPB(f), ToGeneration: mem.ID.Generation})
	}
}

type notOwnerError struct{ owner string }

func (e *notOwnerError) Error() string {
	return "actor: lookup reached a node that is not the directory holder; holder " + e.owner
}

func (d *RendezvousDirectory) remoteLookup(ctx context.Context, rid, kind, id, placeOn string, stale *RouteFence) (RouteFence, error) {
	h := d.host
	mem, ok := h.node.Membership().Member(rid)
	if !ok || !h.node.Membership().IsLive(mem.ID) {
		return RouteFence{}, fault.Errorf(fault.Unavailable, "actor: node %s is not a live member", rid)
	}
	self := h.node.ID()
	res, err := h.ask(ctx, mem.ID, &meshpb.LookupRequest{Kind: kind, ActorId: id, PlaceOn: placeOn, FromRid: self.RID, FromGeneration: self.Generation, Stale: fenceToPBPtr(stale)})
	if err != nil {
		return RouteFence{}, err
	}
	resp, ok := res.(*meshpb.LookupResponse)
	if !ok {
		return RouteFence{}, fault.Errorf(fault.Unavailable, "actor: lookup of %s on %s: unexpected answer %T", id, rid, res)
	}
	return responseFence(resp)
}

// ask sends a directory message to the directory actor of node and waits for the
// answer, within ctx (defaultLookupTimeout without a deadline).
func (h *Host) ask(ctx context.Context, node mesh.NodeID, msg any) (any, error) {
	mem, ok := h.node.Membership().Member(node.RID)
	if !ok || !h.node.Membership().IsLive(mem.ID) {
		return nil, fault.Errorf(fault.Unavailable, "actor: node %s is not a live member", node.RID)
	}
	timeout := defaultLookupTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	if timeout <= 0 {
		return nil, fault.Errorf(fault.DeadlineExceeded, "actor: directory request to %s: %w", node.RID, context.DeadlineExceeded)
	}
	stamp(msg, mem.ID.Generation)
	res, err := h.system.Root.RequestFuture(proto.NewPID(mem.RemoteAddr, directoryActorName), msg, timeout).Result()
	if err != nil {
		return nil, fault.Errorf(fault.Unavailable, "actor: directory request to %s: %v", node.RID, err)
	}
	return res, nil
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
	}
	return RouteFence{}, codeError(r.ErrorCode, r.ErrorMessage)
}

// codeError turns a directory error code back into the error it stands for.
func codeError(code, message string) error {
	// The peer's message is the whole message (it starts with its sentinel's text or
	// says what failed); only the identity is rebuilt here, never a second prefix.
	if message == "" {
		message = "actor: " + code
	}
	for _, sc := range sentinelCodes {
		if sc.code == code {
			return fault.WithText(sc.err, message)
		}
	}
	if k, ok := fault.KindOf(code); ok {
		return fault.WithText(k, message)
	}
	return fault.WithText(fault.Unavailable, message+" ("+code+")")
}

// errorCode is the directory wire code of err.
func errorCode(err error) string {
	for _, sc := range sentinelCodes {
		if errors.Is(err, sc.err) {
			return sc.code
		}
	}
	return fault.Code(err)
}

// Directory error codes on the wire.
const (
	codeNotOwner     = "not_owner"
	codeUnknownKind  = "unknown_kind"
	codeKindMismatch = "kind_mismatch"
	codeBadID        = "bad_id"
	codeNoQuorum     = "no_quorum"
	codeNotActive    = "not_active"
	codeUnknownNode  = "unknown_node"
	codeMoving       = "moving"
	codeAlreadyThere = "already_there"
	codeBadState     = "bad_state"
	codeStateCorrupt = "state_corrupt"
	codeStoreDown    = "store_unavailable"
	codeStateUnknown = "store_outcome_unknown"
	codeStateFenced  = "state_conflict"
)

// sentinelCodes are the errors that keep their identity across nodes (the directory
// code names them; any other error keeps its fault kind).
var sentinelCodes = []struct {
	err  error
	code string
}{
	{ErrUnknownKind, codeUnknownKind}, {ErrKindMismatch, codeKindMismatch}, {ErrBadID, codeBadID},
	{ErrNoQuorum, codeNoQuorum}, {ErrNotFound, codeNotActive}, {ErrUnknownNode, codeUnknownNode},
	{ErrMoving, codeMoving}, {ErrAlreadyThere, codeAlreadyThere}, {ErrBadState, codeBadState},
	{store.ErrCorrupt, codeStateCorrupt}, {store.ErrUnavailable, codeStoreDown}, {store.ErrUnknownOutcome, codeStateUnknown},
	{store.ErrConflict, codeStateFenced},
}

func fenceToPB(f RouteFence) *meshpb.Fence {
	return &meshpb.Fence{ActorId: f.ID, ObjectGeneration: f.ObjectGeneration, NodeRid: f.Node.RID, NodeGeneration: f.Node.Generation,
		AuthorityOwnerGeneration: f.AuthorityOwnerGeneration, OwnerLeaseGeneration: f.OwnerLeaseGeneration}
}

func fenceToPBPtr(f *RouteFence) *meshpb.Fence {
	if f == nil {
		return nil
	}
	return fenceToPB(*f)
}

func fenceFromPB(f *meshpb.Fence) RouteFence {
	if f == nil {
		return RouteFence{}
	}
	return RouteFence{Ref: Ref{ID: f.ActorId, ObjectGeneration: f.ObjectGeneration},
		Node:                     mesh.NodeID{RID: f.NodeRid, Generation: f.NodeGeneration},
		AuthorityOwnerGeneration: f.AuthorityOwnerGeneration, OwnerLeaseGeneration: f.OwnerLeaseGeneration}
}

func fencePtrFromPB(f *meshpb.Fence) *RouteFence {
	if f == nil {
		return nil
	}
	r := fenceFromPB(f)
	return &r
}

func lookupResponse(f RouteFence, err error) *meshpb.LookupResponse {
	if err != nil {
		return &meshpb.LookupResponse{ActorId: f.ID, ErrorCode: errorCode(err), ErrorMessage: err.Error()}
	}
	return &meshpb.LookupResponse{
		ActorId: f.ID, ObjectGeneration: f.ObjectGeneration,
		NodeRid: f.Node.RID, NodeGeneration: f.Node.Generation,
		AuthorityOwnerGeneration: f.AuthorityOwnerGeneration, OwnerLeaseGeneration: f.OwnerLeaseGeneration,
	}
}

// hosts asks the node of f whether it hosts the activation f (or it arrives there by a
// move); an unanswered question counts as yes (the entry is kept).
func (d *RendezvousDirectory) hosts(ctx context.Context, f RouteFence) bool {
	h := d.host
	if f.Node == h.node.ID() {
		return h.hostsFence(f)
	}
	res, err := h.ask(ctx, f.Node, &meshpb.ClaimRequest{Kind: "$hosts", ActorId: f.ID, Expected: fenceToPB(f)})
	if err != nil {
		return true
	}
	r, ok := res.(*meshpb.ClaimResponse)
	return !ok || r.Applied
}

// hostsFence reports whether this node hosts the activation f, or f is an Actor that
// is moving away from here and not committed on its target yet.
func (h *Host) hostsFence(f RouteFence) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if a, ok := h.acts[f.ID]; ok && a.fence == f {
		return true
	}
	e, ok := h.departing[f.ID]
	return ok && e.Fence == f
}

// DirectoryEntry is one entry this node holds in the built-in directory.
type DirectoryEntry struct {
	Kind  string
	Fence RouteFence
}

// DirectoryEntries lists the directory entries this node holds (nil with another
// Directory), by ActorId.
func (h *Host) DirectoryEntries() map[string]DirectoryEntry {
	if h.rdir == nil {
		return nil
	}
	d := h.rdir
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[string]DirectoryEntry, len(d.entries))
	for id, e := range d.entries {
		out[id] = DirectoryEntry{Kind: e.kind, Fence: e.fence}
	}
	return out
}

// addressed is a directory or relocation message addressed to one node lifecycle.
type addressed interface{ GetToGeneration() uint64 }

// forThisLifecycle reports whether m is for this node lifecycle: protoactor remote
// delivers what it queued for an address once the address answers again, which may be
// a later lifecycle of the node (a restart on the same port). Those are dropped.
func (h *Host) forThisLifecycle(m any) bool {
	a, ok := m.(addressed)
	return !ok || a.GetToGeneration() == 0 || a.GetToGeneration() == h.node.ID().Generation
}

// stamp addresses m to the node lifecycle gen.
func stamp(m any, gen uint64) {
	switch m := m.(type) {
	case *meshpb.LookupRequest:
		m.ToGeneration = gen
	case *meshpb.ActivateRequest:
		m.ToGeneration = gen
	case *meshpb.ClaimRequest:
		m.ToGeneration = gen
	case *meshpb.SyncRequest:
		m.ToGeneration = gen
	case *meshpb.SyncResponse:
		m.ToGeneration = gen
	case *meshpb.RelocateRequest:
		m.ToGeneration = gen
	case *meshpb.MovePrepare:
		m.ToGeneration = gen
	case *meshpb.Retire:
		m.ToGeneration = gen
	case *meshpb.MoveCutover:
		m.ToGeneration = gen
	case *meshpb.Followed:
		m.ToGeneration = gen
	}
}

// claimRetrying is claim retried while the answer is unavailable (the holder changed
// or is rebuilding after a membership change) until ctx ends: a move's commit must not
// fail for a moment of membership churn.
func (d *RendezvousDirectory) claimRetrying(ctx context.Context, kind, id string, expected, next *RouteFence) (bool, error) {
	for {
		applied, err := d.claim(ctx, kind, id, expected, next)
		if err == nil || !errors.Is(err, fault.Unavailable) || errors.Is(err, ErrNoQuorum) {
			return applied, err
		}
		select {
		case <-ctx.Done():
			return false, err
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// sleepCtx waits d, or until ctx ends (its error, when d is longer than ctx has left).
func sleepCtx(ctx context.Context, d time.Duration) error {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d {
		return context.DeadlineExceeded
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// syncedWithLiveLocked reports whether the last rebuild was for the members this node
// sees live and merged the activations of every one of them. d.mu is held.
func (d *RendezvousDirectory) syncedWithLiveLocked() bool {
	live := d.host.node.Membership().Live()
	for _, m := range live {
		if !d.synced[m.ID] {
			return false
		}
	}
	return d.rebuiltForLocked(live)
}
