package actor

import (
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/meshnode/meshnode/mesh"
)

// quorum is keep-majority, as Akka's split-brain resolver keeps the majority side of a
// partition: a node places and serves Actors only while it sees a majority of the last
// agreed membership as live. A member that joins while the node has a majority is
// added to the agreed membership, one that leaves gracefully is dropped at once, and
// one that fails is dropped only once the node has kept its majority for a stable
// period after the failure (settle; the host calls it FailureBound after a failure):
// on the minority side the other members' failures arrive one by one, and dropping the
// first at once would turn the second into an even split the minority could win. A
// node on the minority side keeps the agreed membership it had, so it cannot talk
// itself into a majority; when the partition heals and enough of those members are
// live again, it has one. An even split keeps the side that holds the agreed member
// with the lowest RID.
type quorum struct {
	mu     sync.Mutex
	self   string
	agreed map[string]bool // RIDs
	ok     bool
}

func newQuorum(self string) *quorum {
	return &quorum{self: self, agreed: map[string]bool{self: true}, ok: true}
}

// has reports whether this node has a majority now.
func (q *quorum) has() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.ok
}

// update takes a membership event and the live members after it; it returns whether
// the node has a majority now and whether that changed.
func (q *quorum) update(ev mesh.MemberEvent, live []mesh.Member) (ok, changed bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if ev.Type == mesh.EventLeft {
		delete(q.agreed, ev.Member.ID.RID)
	}
	liveSet := map[string]bool{q.self: true}
	for _, m := range live {
		liveSet[m.ID.RID] = true
	}
	count := 0
	agreed := make([]string, 0, len(q.agreed))
	for rid := range q.agreed {
		agreed = append(agreed, rid)
		if liveSet[rid] {
			count++
		}
	}
	sort.Strings(agreed)
	n := len(agreed)
	now := 2*count > n || (n > 0 && 2*count == n && liveSet[agreed[0]])
	if now {
		for rid := range liveSet {
			q.agreed[rid] = true
		}
	}
	changed = now != q.ok
	q.ok = now
	return now, changed
}

// settle drops the failed members from the agreed membership if the node has its
// majority now.
func (q *quorum) settle(live []mesh.Member) {
	ok, _ := q.update(mesh.MemberEvent{}, live)
	if !ok {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	liveSet := map[string]bool{q.self: true}
	for _, m := range live {
		liveSet[m.ID.RID] = true
	}
	q.agreed = liveSet
}

// noteFailure remembers when a member failed (the failover margin) and settles the
// agreed membership once the failure has been stable for the mesh's failure bound.
func (h *Host) noteFailure(id mesh.NodeID) {
	h.failMu.Lock()
	if len(h.failedAt) >= maxFailedRemembered {
		clear(h.failedAt)
	}
	h.failedAt[id] = time.Now()
	h.failMu.Unlock()
	time.AfterFunc(h.node.Membership().FailureBound(), func() {
		if h.closing.Err() != nil {
			return
		}
		h.quorum.settle(h.node.Membership().Live())
	})
}

// maxFailedRemembered bounds the failure times a node keeps.
const maxFailedRemembered = 1024

// failedWithinMargin returns, for each member that failed less than the failover
// margin ago, how long it still has to wait.
func (h *Host) failedWithinMargin() map[mesh.NodeID]time.Duration {
	margin := h.node.Membership().FailureBound()
	now := time.Now()
	h.failMu.Lock()
	defer h.failMu.Unlock()
	var out map[mesh.NodeID]time.Duration
	for id, at := range h.failedAt {
		if left := margin - now.Sub(at); left > 0 {
			if out == nil {
				out = map[mesh.NodeID]time.Duration{}
			}
			out[id] = left
		} else {
			delete(h.failedAt, id)
		}
	}
	return out
}

// failoverWait returns how long a placement of id must wait: an Actor whose node (or
// whose directory holder) failed less than the failover margin ago may still be
// served on the other side of a partition until that side has given up (its own
// failure detection is slower: nobody confirms its suspicions). 0: no wait.
func (h *Host) failoverWait(id string, entryNode mesh.NodeID, hasEntry bool) time.Duration {
	recent := h.failedWithinMargin()
	if len(recent) == 0 {
		return 0
	}
	if hasEntry {
		return recent[entryNode]
	}
	live := h.node.Membership().Live()
	var wait time.Duration
	for id2, left := range recent {
		// Did the failed node hold id's entry? Then the entry went with it.
		if ownerOf(id, append(slices.Clone(live), mesh.Member{ID: id2, State: mesh.StateAlive})) == id2 {
			wait = max(wait, left)
		}
	}
	return wait
}
