package topic

import (
	"context"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/meshnode/meshnode/internal/wake"
	"github.com/meshnode/meshnode/mesh"
	"github.com/meshnode/meshnode/mesh/wire"
)

// The registry: which nodes have subscribers to which topics, and how many. Each node
// tells the others its own counts with topicInterest records (absolute counts, ordered
// by a version per sender lifecycle):
//
//   - at once when a topic gets its first local subscriber or loses its last, the first
//     asking for an acknowledgement (topicInterestAck), which the subscribe waits for;
//   - every PresenceInterval for the other changes (presence is eventually consistent);
//   - its whole set (Reset) to a node that joins, to a node a record could not reach
//     (a full window), and to every node every ResyncInterval, which repairs a view
//     that lost a change.
//
// A node that fails or leaves is dropped from the registry at once. Records are sent
// without waiting (TrySend): the registry never holds up a session or the record
// receiver.

// registry is one node's view of the fleet's interest, and what it sent of its own.
type registry struct {
	h *Hub

	mu      sync.Mutex
	version uint64                            // the last version this node sent
	local   map[string]uint32                 // this node's subscriber counts (nonzero)
	dirty   map[string]struct{}               // changed, not sent yet
	peers   map[mesh.NodeID]*peerInterest     // the other live nodes
	remote  map[string]map[mesh.NodeID]uint32 // topic -> node -> subscribers (nonzero)

	acked wake.Signal   // an acknowledgement came, or a node departed
	kick  chan struct{} // the loop has something to send now
}

// peerInterest is what this node knows of one other node lifecycle.
type peerInterest struct {
	acked  uint64 // the highest of this node's versions it acknowledged
	resync bool   // it gets this node's whole set next (a record to it was lost, it joined)
	told   bool   // it was sent a topic of this node: an empty whole set is news to it

	version uint64            // the highest version it sent this node
	topics  map[string]uint32 // its counts (nonzero)
}

func (r *registry) init(h *Hub) {
	r.h = h
	r.local = map[string]uint32{}
	r.dirty = map[string]struct{}{}
	r.peers = map[mesh.NodeID]*peerInterest{}
	r.remote = map[string]map[mesh.NodeID]uint32{}
	r.kick = make(chan struct{}, 1)
	for _, m := range h.node.Membership().Live() {
		if m.ID != h.self {
			r.peers[m.ID] = &peerInterest{resync: true, topics: map[string]uint32{}}
		}
	}
}

// localChanged records that this node's sessions subscribe n times to topic now and
// tells the others: at once when topic got its first subscriber or lost its last (the
// first asks for an acknowledgement), else with the next flush. It returns the version
// the change goes out under (awaitAcks).
func (r *registry) localChanged(topic string, n int) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	prev := r.local[topic]
	if n == 0 {
		delete(r.local, topic)
	} else {
		r.local[topic] = uint32(n)
	}
	first, last := prev == 0 && n > 0, prev > 0 && n == 0
	if !first && !last {
		r.dirty[topic] = struct{}{}
		return r.version
	}
	delete(r.dirty, topic)
	r.version++
	r.sendLocked(&wire.TopicInterest{Version: r.version, Ack: first, Entries: []wire.TopicCount{{Topic: topic, Subscribers: uint32(n)}}})
	return r.version
}

// sendLocked sends an interest record to every other node that is not waiting for a
// resync (which carries the record's news too). r.mu is held.
func (r *registry) sendLocked(ti *wire.TopicInterest) {
	rec := &wire.Record{Body: ti}
	for id, p := range r.peers {
		if p.resync {
			continue
		}
		p.told = true
		r.trySend(id, p, rec)
	}
}

// trySend sends rec to id without waiting; a record that cannot go makes id get the
// whole set next. r.mu is held.
func (r *registry) trySend(id mesh.NodeID, p *peerInterest, rec *wire.Record) {
	if err := r.h.node.Records().TrySend(id, rec); err != nil {
		r.h.stats.sendFailures.Add(1)
		p.resync = true
		select {
		case r.kick <- struct{}{}:
		default:
		}
	}
}

// awaitAcks waits until every other live node acknowledged version v (or a later one),
// or ctx ends. A node that departs meanwhile is not waited for.
func (r *registry) awaitAcks(ctx context.Context, v uint64) {
	for {
		ch := r.acked.Wait()
		if r.ackedBy(v) {
			return
		}
		select {
		case <-ch:
		case <-ctx.Done():
			r.h.ratelog.Log(r.h.log, slog.LevelWarn, "topic_subscribe_unacknowledged",
				"topic: a subscribe returned before every node acknowledged it; publishes made elsewhere meanwhile may miss it",
				"err", ctx.Err())
			return
		case <-r.h.stop:
			return
		}
	}
}

func (r *registry) ackedBy(v uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.peers {
		if p.acked < v {
			return false
		}
	}
	return true
}

// loop sends the changes that can wait, the whole set to whoever needs it, and the
// periodic resync, until the hub stops.
func (r *registry) loop() {
	defer r.h.wg.Done()
	flush := time.NewTicker(r.h.opts.PresenceInterval)
	defer flush.Stop()
	resync := time.NewTicker(r.h.opts.ResyncInterval)
	defer resync.Stop()
	for {
		select {
		case <-r.h.stop:
			return
		case <-flush.C:
		case <-r.kick:
		case <-resync.C:
			r.mu.Lock()
			for _, p := range r.peers {
				p.resync = true
			}
			r.mu.Unlock()
		}
		r.flush()
	}
}

// flush sends the pending changes, and the whole set to the nodes that need it.
func (r *registry) flush() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.dirty) > 0 {
		entries := make([]wire.TopicCount, 0, len(r.dirty))
		for topic := range r.dirty {
			entries = append(entries, wire.TopicCount{Topic: topic, Subscribers: r.local[topic]})
		}
		clear(r.dirty)
		for len(entries) > 0 {
			n := min(len(entries), wire.MaxInterestEntries)
			r.version++
			r.sendLocked(&wire.TopicInterest{Version: r.version, Entries: entries[:n]})
			entries = entries[n:]
		}
	}
	var whole []wire.TopicCount
	for id, p := range r.peers {
		if !p.resync {
			continue
		}
		if len(r.local) == 0 && !p.told {
			// Nothing to tell a node that was never told anything: it holds nothing of
			// this node (a node with no subscriber sends no records at all).
			p.resync = false
			continue
		}
		if whole == nil {
			whole = make([]wire.TopicCount, 0, len(r.local))
			for topic, n := range r.local {
				whole = append(whole, wire.TopicCount{Topic: topic, Subscribers: n})
			}
			r.version++
		}
		p.resync, p.told = false, true
		r.sendWholeLocked(id, p, whole)
	}
}

// sendWholeLocked sends this node's whole set to one node under r.version: the first
// record resets what it held of this node, the others (a set over one record's bound)
// continue it. r.mu is held.
func (r *registry) sendWholeLocked(id mesh.NodeID, p *peerInterest, whole []wire.TopicCount) {
	first := true
	for first || len(whole) > 0 {
		n := min(len(whole), wire.MaxInterestEntries)
		r.trySend(id, p, &wire.Record{Body: &wire.TopicInterest{Version: r.version, Reset: first, Ack: true, Entries: whole[:n]}})
		whole, first = whole[n:], false
		if p.resync {
			return // a part was lost: the next flush sends it all again
		}
	}
}

// onInterest applies another node's interest record.
func (r *registry) onInterest(from mesh.NodeID, rec *wire.Record) {
	ti, ok := rec.Body.(*wire.TopicInterest)
	if !ok {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.peers[from]
	if p == nil {
		// A member this node has not seen join yet (its event is on the way): the
		// transport checked it is a live member.
		p = &peerInterest{resync: true, topics: map[string]uint32{}}
		r.peers[from] = p
		select {
		case r.kick <- struct{}{}:
		default:
		}
	}
	// A record older than one applied is stale; one of the same version continues a
	// whole set sent in parts, or repeats a change (counts are absolute: applying it
	// again changes nothing). A Reset of a version already applied is a repeat.
	if ti.Version < p.version || ti.Version == p.version && ti.Reset {
		r.h.stats.staleInterest.Add(1)
		r.h.node.Records().DropExpected(from, "topic interest older than what was applied")
	} else {
		if ti.Reset {
			for topic := range p.topics {
				r.setRemote(topic, from, p, 0)
			}
		}
		for _, e := range ti.Entries {
			if CheckName(e.Topic) != nil {
				r.h.node.Records().DropStale(from, "topic interest with a bad topic name")
				continue
			}
			r.setRemote(e.Topic, from, p, e.Subscribers)
		}
		p.version = ti.Version
	}
	if ti.Ack {
		rec := &wire.Record{Body: &wire.TopicInterestAck{Version: p.version}}
		if err := r.h.node.Records().TrySend(from, rec); err != nil {
			r.h.stats.sendFailures.Add(1) // the sender sends its whole set again, asking again
		}
	}
}

// setRemote records that node id has n subscribers of topic. r.mu is held.
func (r *registry) setRemote(topic string, id mesh.NodeID, p *peerInterest, n uint32) {
	nodes := r.remote[topic]
	if n == 0 {
		delete(p.topics, topic)
		if nodes != nil {
			delete(nodes, id)
			if len(nodes) == 0 {
				delete(r.remote, topic)
			}
		}
		return
	}
	p.topics[topic] = n
	if nodes == nil {
		nodes = map[mesh.NodeID]uint32{}
		r.remote[topic] = nodes
	}
	nodes[id] = n
}

// onAck takes another node's acknowledgement of this node's interest records.
func (r *registry) onAck(from mesh.NodeID, rec *wire.Record) {
	ack, ok := rec.Body.(*wire.TopicInterestAck)
	if !ok {
		return
	}
	r.mu.Lock()
	p := r.peers[from]
	if p != nil && ack.Version > p.acked && ack.Version <= r.version {
		p.acked = ack.Version
	}
	r.mu.Unlock()
	if p == nil {
		r.h.node.Records().DropExpected(from, "topic interest acknowledgement from a node not in the registry")
	}
	r.acked.Notify()
}

// onMembership adds a node that joins (it gets this node's whole set) and drops one
// that fails or leaves, with its subscribers.
func (r *registry) onMembership(ev mesh.MemberEvent) {
	id := ev.Member.ID
	if id == r.h.self {
		return
	}
	r.mu.Lock()
	switch ev.Type {
	case mesh.EventJoined:
		if r.peers[id] == nil {
			r.peers[id] = &peerInterest{resync: true, topics: map[string]uint32{}}
		}
		select {
		case r.kick <- struct{}{}:
		default:
		}
	case mesh.EventFailed, mesh.EventLeft:
		if p := r.peers[id]; p != nil {
			for topic := range p.topics {
				r.setRemote(topic, id, p, 0)
			}
			delete(r.peers, id)
		}
	}
	r.mu.Unlock()
	r.acked.Notify()
}

// nodesFor returns the other nodes that have subscribers to topic.
func (r *registry) nodesFor(topic string) []mesh.NodeID {
	r.mu.Lock()
	defer r.mu.Unlock()
	nodes := r.remote[topic]
	if len(nodes) == 0 {
		return nil
	}
	out := make([]mesh.NodeID, 0, len(nodes))
	for id := range nodes {
		out = append(out, id)
	}
	return out
}

// Presence is how many sessions subscribe to a topic, across the fleet, as one node
// knows it: this node's own count is exact; the others' are as they last told it
// (within PresenceInterval of a change, give or take a lost record, repaired within
// ResyncInterval).
type Presence struct {
	Topic       string         `json:"topic"`
	Subscribers int            `json:"subscribers"`
	Nodes       []NodePresence `json:"nodes"`
}

// NodePresence is one node's subscribers to a topic.
type NodePresence struct {
	RID         string `json:"rid"`
	Subscribers int    `json:"subscribers"`
}

// Presence returns how many sessions subscribe to topic across the fleet.
func (h *Hub) Presence(topic string) Presence {
	r := &h.reg
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.presenceLocked(topic)
}

func (r *registry) presenceLocked(topic string) Presence {
	p := Presence{Topic: topic, Nodes: []NodePresence{}}
	if n := r.local[topic]; n > 0 {
		p.Nodes = append(p.Nodes, NodePresence{RID: r.h.self.RID, Subscribers: int(n)})
	}
	for id, n := range r.remote[topic] {
		p.Nodes = append(p.Nodes, NodePresence{RID: id.RID, Subscribers: int(n)})
	}
	sort.Slice(p.Nodes, func(i, j int) bool { return p.Nodes[i].RID < p.Nodes[j].RID })
	for _, n := range p.Nodes {
		p.Subscribers += n.Subscribers
	}
	return p
}

// List returns the presence of every topic with a subscriber anywhere in the fleet, by
// name.
func (h *Hub) List() []Presence {
	r := &h.reg
	r.mu.Lock()
	defer r.mu.Unlock()
	names := make([]string, 0, len(r.local)+len(r.remote))
	for t := range r.local {
		names = append(names, t)
	}
	for t := range r.remote {
		if _, ok := r.local[t]; !ok {
			names = append(names, t)
		}
	}
	sort.Strings(names)
	out := make([]Presence, 0, len(names))
	for _, t := range names {
		out = append(out, r.presenceLocked(t))
	}
	return out
}
