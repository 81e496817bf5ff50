package topic

import (
	"context"
	"fmt"
	"sync"
)

// In-process subscribers: a layer above topics that serves clients of its own (the
// plugin services' server, which passes a session worker's updates on to the
// presentations attached to it, over STREAM or in-process) subscribes its node once and
// dispatches each message itself. A local subscription counts as a subscriber of its
// node in the registry, so publishes reach the node exactly as they reach a node with
// session subscribers: once per node, in publish order per publisher, across the
// publisher's moves.

// Delivery is one published message as an in-process receiver gets it.
type Delivery struct {
	Topic     string
	Publisher string // as MetaPublisher: s:... for a session, a:ID@generation for an Actor
	Seq       uint64 // the publisher's sequence to the topic (from 1)
	// Message.Payload is read-only and valid only during the receiver's call: it may
	// point into the record that carried it. Copy what is kept.
	Message Message
}

// Receiver gets the messages of a local subscription. It runs on whichever goroutine
// delivers (the record receiver, a publisher), one message of a topic at a time in
// order, and must not block: what it cannot handle at once it drops or queues under a
// bound of its own. It reports whether it took the message (deliveries are counted).
type Receiver func(d Delivery) bool

// LocalSubscription is an in-process subscription of this node to one topic
// (SubscribeLocal). Close ends it.
type LocalSubscription struct {
	h       *Hub
	topic   string
	receive Receiver
	once    sync.Once
}

// SubscribeLocal subscribes receive, in this process, to topic: from when it returns,
// what is published to topic anywhere in the mesh reaches receive, until Close. Like
// Subscribe, when this node had no subscriber of topic yet, it waits (at most
// Options.SubscribeWait, and ctx) until the other nodes know it has one.
func (h *Hub) SubscribeLocal(ctx context.Context, topic string, receive Receiver) (*LocalSubscription, error) {
	if err := CheckName(topic); err != nil {
		h.stats.refused.Add(1)
		return nil, err
	}
	if receive == nil {
		h.stats.refused.Add(1)
		return nil, fmt.Errorf("%w: a local subscription of %q needs a receiver", ErrBadName, topic)
	}
	l := &LocalSubscription{h: h, topic: topic, receive: receive}
	h.mu.Lock()
	if h.stopped {
		h.mu.Unlock()
		h.stats.refused.Add(1)
		return nil, ErrStopped
	}
	subs := h.locals[topic]
	if subs == nil {
		subs = map[*LocalSubscription]struct{}{}
		h.locals[topic] = subs
	}
	subs[l] = struct{}{}
	n := h.countLocked(topic)
	h.mu.Unlock()
	v := h.reg.localChanged(topic, n)
	if n == 1 {
		wctx, cancel := context.WithTimeout(ctx, h.opts.SubscribeWait)
		defer cancel()
		h.reg.awaitAcks(wctx, v)
	}
	return l, nil
}

// Topic returns the subscription's topic.
func (l *LocalSubscription) Topic() string { return l.topic }

// Close ends the subscription; messages being delivered may still reach the receiver
// while it returns, none after. Closing again does nothing.
func (l *LocalSubscription) Close() {
	l.once.Do(func() {
		h := l.h
		h.mu.Lock()
		subs := h.locals[l.topic]
		delete(subs, l)
		if len(subs) == 0 {
			delete(h.locals, l.topic)
		}
		n := h.countLocked(l.topic)
		stopped := h.stopped
		h.mu.Unlock()
		if !stopped {
			h.reg.localChanged(l.topic, n)
		}
	})
}
