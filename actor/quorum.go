package actor

import (
	"sort"
	"sync"

	"github.com/meshnode/meshnode/mesh"
)

// quorum is keep-majority, as Akka's split-brain resolver keeps the majority side of a
// partition: a node places and serves Actors only while it sees a majority of the last
// agreed membership as live. The agreed membership follows the live one while the node
// has a majority: a member that fails is dropped from it then (the majority side
// "downs" it), a member that joins is added, a member that leaves gracefully is dropped
// at once. A node on the minority side keeps the agreed membership it had, so it
// cannot talk itself into a majority; when the partition heals and enough of those
// members are live again, it has one. An even split keeps the side that holds the
// agreed member with the lowest RID.
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
		q.agreed = liveSet
	}
	changed = now != q.ok
	q.ok = now
	return now, changed
}
