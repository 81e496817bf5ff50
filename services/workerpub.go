package services

import (
	"encoding/json"
	"sync"
)

// A session worker's publisher: the worker's endpoints (one per attached presentation)
// share it. It watches each published member at most once, while at least one
// presentation subscribes to it, and queues what the member delivers; the worker's
// next turn publishes the queue, in order, to its topic, from which each node with
// attached presentations takes it once and passes it on to the presentations that
// subscribe. A member nobody subscribes to is not published at all.

type publisher struct {
	mu      sync.Mutex // the watch counts (taken before a slot's lock)
	watched map[pubKey]*pubEntry

	omu    sync.Mutex // the queue (taken under a slot's lock, by its watcher)
	outbox []pubItem
	posted bool
	post   func() // asks for a turn of the worker to publish the queue
	closed bool
}

// pubKey is a watched member: its slot, and the address its subscribers use (a
// reference's member is addressed by each holder's own handle).
type pubKey struct {
	sl   *slot
	addr subAddr
}

type pubEntry struct {
	refs int
	stop func()
}

type pubItem struct {
	addr subAddr
	d    *delivery
}

func newPublisher(post func()) *publisher {
	return &publisher{watched: map[pubKey]*pubEntry{}, post: post}
}

// add counts one more subscription of sl (at address a) and returns the snapshot it
// starts from.
func (p *publisher) add(sl *slot, a subAddr) (snapshotReply, func(), *Error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var snap snapshotReply
	k := pubKey{sl: sl, addr: a}
	e := p.watched[k]
	if e == nil {
		stop, err := sl.watchFrom(func(seq uint64, raw json.RawMessage, _ any) {
			snap = snapshotReply{Seq: seq, Value: raw}
		}, func(d *delivery) bool {
			p.enqueue(a, d)
			return true
		}, nil)
		if err != nil {
			return snap, nil, err
		}
		e = &pubEntry{stop: stop}
		p.watched[k] = e
	} else {
		// Watched already: whatever follows this snapshot is queued, and a presentation
		// drops what it covers.
		seq, raw, _, err := sl.snapshot()
		if err != nil {
			return snap, nil, err
		}
		snap = snapshotReply{Seq: seq, Value: raw}
	}
	e.refs++
	var once sync.Once
	return snap, func() { once.Do(func() { p.release(k, e) }) }, nil
}

func (p *publisher) release(k pubKey, e *pubEntry) {
	p.mu.Lock()
	e.refs--
	last := e.refs == 0 && p.watched[k] == e
	if last {
		delete(p.watched, k)
	}
	p.mu.Unlock()
	if last {
		e.stop()
	}
}

// enqueue queues a delivery (under the slot's lock: it must not wait).
func (p *publisher) enqueue(a subAddr, d *delivery) {
	p.omu.Lock()
	if p.closed {
		p.omu.Unlock()
		return
	}
	p.outbox = append(p.outbox, pubItem{addr: a, d: d})
	ask := !p.posted
	p.posted = true
	p.omu.Unlock()
	if ask {
		p.post()
	}
}

// take returns the queue and empties it.
func (p *publisher) take() []pubItem {
	p.omu.Lock()
	defer p.omu.Unlock()
	out := p.outbox
	p.outbox, p.posted = nil, false
	return out
}

// close stops watching (the worker stops or moves) and returns what was not published.
func (p *publisher) close() []pubItem {
	p.mu.Lock()
	watched := p.watched
	p.watched = map[pubKey]*pubEntry{}
	p.mu.Unlock()
	for _, e := range watched {
		e.stop()
	}
	p.omu.Lock()
	defer p.omu.Unlock()
	p.closed = true
	out := p.outbox
	p.outbox = nil
	return out
}
