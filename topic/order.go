package topic

import (
	"bytes"
	"sort"
	"sync"
	"time"

	"github.com/meshnode/meshnode/mesh"
	swire "github.com/meshnode/meshnode/session/wire"
)

// The order of one publisher's messages to one topic, as a node delivers them to its
// subscribers. Records from one node to another arrive in the order they were sent, so
// a publisher that stays on one node (a session, an Actor between moves) needs
// nothing more. An Actor that moves publishes from its new node while the last
// messages it published on the old one may still be on their way: a message that comes
// from another node than the stream's last and is ahead of it is held (at most
// ReorderWait, and maxHeld per stream) until the ones before it arrive. A message
// older than one delivered is a duplicate and is dropped; a message ahead of the
// stream from the same node means some were lost (a node died, a record could not be
// sent): it is delivered and the gap counted.

// Bounds of the ordering state.
const (
	maxHeld       = 256      // messages one stream holds
	maxHeldBytes  = 16 << 20 // payload bytes all streams hold
	maxStreams    = 100_000  // streams a node tracks; past it, idle ones are forgotten first
	streamIdleTTL = 5 * time.Minute
)

// streamKey names one publisher's messages to one topic.
type streamKey struct{ pub, topic string }

// stream is a publisher's messages to a topic as this node delivers them.
type stream struct {
	mu       sync.Mutex
	next     uint64      // the sequence to deliver next
	from     mesh.NodeID // the node the last delivered message came from
	held     []heldMsg   // ahead of next, by sequence
	since    time.Time   // when the first held one arrived
	lastUsed time.Time
	gone     bool // forgotten: a message that still finds it starts over
}

type heldMsg struct {
	seq     uint64
	from    mesh.NodeID
	name    string
	codec   swire.Codec
	payload []byte // a copy: the record's bytes are not kept
}

// orderer is one node's streams.
type orderer struct {
	h         *Hub
	deliver   func(pub, topic string, seq uint64, name string, c swire.Codec, payload []byte) // Hub.deliver
	mu        sync.Mutex
	streams   map[streamKey]*stream
	heldBytes int
}

func (o *orderer) init(h *Hub) {
	o.h = h
	o.deliver = h.deliver
	o.streams = map[streamKey]*stream{}
}

// admit delivers, holds or drops one message of pub to topic that came from node from
// (this node for a local publish).
func (o *orderer) admit(from mesh.NodeID, pub, topic string, seq uint64, name string, c swire.Codec, payload []byte) {
	now := time.Now()
	k := streamKey{pub, topic}
	for {
		o.mu.Lock()
		st := o.streams[k]
		if st == nil {
			if len(o.streams) >= maxStreams {
				o.mu.Unlock()
				o.deliver(pub, topic, seq, name, c, payload) // untracked: a link keeps its order
				return
			}
			st = &stream{next: seq, from: from}
			o.streams[k] = st
		}
		o.mu.Unlock()
		st.mu.Lock()
		if st.gone {
			st.mu.Unlock()
			continue
		}
		st.lastUsed = now
		o.admitLocked(st, from, pub, topic, seq, name, c, payload, now)
		st.mu.Unlock()
		return
	}
}

// admitLocked: st.mu is held.
func (o *orderer) admitLocked(st *stream, from mesh.NodeID, pub, topic string, seq uint64, name string, c swire.Codec, payload []byte, now time.Time) {
	h := o.h
	switch {
	case seq < st.next:
		h.stats.duplicate.Add(1)
		return
	case seq > st.next && from != st.from:
		// Ahead of the stream, from another node: an Actor that moved; what it sent
		// before is likely on its way.
		if len(st.held) < maxHeld && o.reserve(len(payload)) {
			if len(st.held) == 0 {
				st.since = now
			}
			st.held = insertHeld(st.held, heldMsg{seq: seq, from: from, name: name, codec: c, payload: bytes.Clone(payload)})
			h.stats.held.Add(1)
			return
		}
		o.release(st, pub, topic) // full: what is held goes now, then this
		if seq < st.next {
			h.stats.duplicate.Add(1)
			return
		}
	}
	if seq > st.next {
		h.stats.gaps.Add(int64(seq - st.next))
	}
	o.deliver(pub, topic, seq, name, c, payload)
	st.next, st.from = seq+1, from
	o.drain(st, pub, topic)
}

// drain delivers the held messages that are next in line. st.mu is held.
func (o *orderer) drain(st *stream, pub, topic string) {
	for len(st.held) > 0 && st.held[0].seq <= st.next {
		m := st.held[0]
		st.held = st.held[1:]
		o.unreserve(len(m.payload))
		if m.seq < st.next {
			o.h.stats.duplicate.Add(1)
			continue
		}
		o.deliver(pub, topic, m.seq, m.name, m.codec, m.payload)
		st.next, st.from = m.seq+1, m.from
	}
	if len(st.held) == 0 {
		st.held = nil
	}
}

// release delivers everything st holds, in order, counting the gaps: what it waited
// for did not come in time (or the hold is full). st.mu is held.
func (o *orderer) release(st *stream, pub, topic string) {
	for len(st.held) > 0 {
		if gap := st.held[0].seq - st.next; st.held[0].seq > st.next {
			o.h.stats.gaps.Add(int64(gap))
			st.next = st.held[0].seq
		}
		o.drain(st, pub, topic)
	}
}

func insertHeld(held []heldMsg, m heldMsg) []heldMsg {
	i := sort.Search(len(held), func(i int) bool { return held[i].seq >= m.seq })
	if i < len(held) && held[i].seq == m.seq {
		return held // the same message twice: keep the first
	}
	held = append(held, heldMsg{})
	copy(held[i+1:], held[i:])
	held[i] = m
	return held
}

func (o *orderer) reserve(n int) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.heldBytes+n > maxHeldBytes {
		return false
	}
	o.heldBytes += n
	return true
}

func (o *orderer) unreserve(n int) {
	o.mu.Lock()
	o.heldBytes -= n
	o.mu.Unlock()
}

// loop releases what waited longer than ReorderWait and forgets idle streams, until
// the hub stops.
func (o *orderer) loop() {
	defer o.h.wg.Done()
	tick := time.NewTicker(max(o.h.opts.ReorderWait/4, 10*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-o.h.stop:
			return
		case now := <-tick.C:
			o.sweep(now)
		}
	}
}

func (o *orderer) sweep(now time.Time) {
	o.mu.Lock()
	type entry struct {
		k  streamKey
		st *stream
	}
	all := make([]entry, 0, len(o.streams))
	for k, st := range o.streams {
		all = append(all, entry{k, st})
	}
	o.mu.Unlock()
	ttl := streamIdleTTL
	if len(all) >= maxStreams*9/10 {
		ttl = 10 * time.Second // crowded: forget sooner
	}
	for _, e := range all {
		st := e.st
		st.mu.Lock()
		if len(st.held) > 0 && now.Sub(st.since) >= o.h.opts.ReorderWait {
			o.release(st, e.k.pub, e.k.topic)
		}
		idle := len(st.held) == 0 && now.Sub(st.lastUsed) >= ttl
		if idle {
			st.gone = true
		}
		st.mu.Unlock()
		if idle {
			o.mu.Lock()
			if o.streams[e.k] == st {
				delete(o.streams, e.k)
			}
			o.mu.Unlock()
		}
	}
}
