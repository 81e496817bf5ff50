package actor

import (
	"github.com/meshnode/meshnode/fault"
	"github.com/meshnode/meshnode/session/wire"
)

// What an Actor does with topics: it publishes to them, subscribes the STREAM session
// bound to it, and asks how many sessions follow one. The topic layer (package topic)
// carries it out; the actor package only hands the turn over.

// TopicBridge is what the topic layer does for Actors. Installed with
// Host.SetTopicBridge (package topic does it).
type TopicBridge interface {
	// Publish publishes payload, in codec c, as a STREAM Send named name to every
	// session subscribed to topic, as the publisher this activation is (its sequence
	// to topic carries on across moves). It returns the publish's sequence.
	Publish(t *Turn, topic, name string, c wire.Codec, payload []byte) (seq uint64, err error)
	// SubscribeSession subscribes (or unsubscribes) the session bound to the Actor.
	SubscribeSession(t *Turn, topic string, subscribe bool) error
	// Subscribers returns how many sessions of the fleet subscribe to topic, as this
	// node knows it (eventually consistent).
	Subscribers(topic string) int
}

// ErrNoTopics: the node runs no topic layer (kind NotConfigured).
var ErrNoTopics = fault.New(fault.NotConfigured, "actor: topics are not set up on this node")

// SetTopicBridge installs the topic layer's bridge (package topic does it).
func (h *Host) SetTopicBridge(b TopicBridge) {
	h.turnHandlers.mu.Lock()
	h.topics = b
	h.turnHandlers.mu.Unlock()
}

func (h *Host) topicBridge() TopicBridge {
	h.turnHandlers.mu.RLock()
	defer h.turnHandlers.mu.RUnlock()
	return h.topics
}

// Publish publishes v to topic: every session subscribed to it, on any node, receives
// a STREAM Send named name with v encoded as JSON (WithCodec for another codec; a
// []byte goes as it is, as raw bytes unless WithCodec names their codec), in the order
// this Actor published, across its moves. It returns the publish's sequence (from 1,
// per Actor and topic), which subscribers see with it.
func (c *Context) Publish(topic, name string, v any, opts ...PushOption) (uint64, error) {
	b := c.host.topicBridge()
	if b == nil {
		return 0, ErrNoTopics
	}
	codec, payload, err := c.encodeOut(v, opts)
	if err != nil {
		return 0, fault.Errorf(fault.InvalidOperation, "actor: publish %s to %s: %w", name, topic, err)
	}
	return b.Publish(c.turn(), topic, name, codec, payload)
}

// SubscribeSession subscribes the session bound to this Actor to topic: it receives
// what is published there until it unsubscribes or closes. Without a bound session it
// fails with ErrNotBound.
func (c *Context) SubscribeSession(topic string) error {
	b := c.host.topicBridge()
	if b == nil {
		return ErrNoTopics
	}
	return b.SubscribeSession(c.turn(), topic, true)
}

// UnsubscribeSession unsubscribes the session bound to this Actor from topic.
func (c *Context) UnsubscribeSession(topic string) error {
	b := c.host.topicBridge()
	if b == nil {
		return ErrNoTopics
	}
	return b.SubscribeSession(c.turn(), topic, false)
}

// Subscribers returns how many sessions of the fleet subscribe to topic, as this node
// knows it: eventually consistent (docs/topics.md); 0 without a topic layer.
func (c *Context) Subscribers(topic string) int {
	if b := c.host.topicBridge(); b != nil {
		return b.Subscribers(topic)
	}
	return 0
}
