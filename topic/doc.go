// Package topic fans messages out from one publisher to many STREAM sessions across
// the mesh: a session (from its handlers) or an Actor subscribes sessions to a topic,
// and whatever is published to it reaches every subscribed session on every node as a
// STREAM Send.
//
// A publish crosses to each node that has subscribers exactly once (meshnode's own
// record topicPublish), and that node encodes the STREAM frame once and writes it to
// its local subscribers. Which nodes have subscribers to which topics is a registry
// every node holds, spread by meshnode's topicInterest records on subscribe,
// unsubscribe, session close and node failure; a subscribe that gives a node its first
// subscriber to a topic returns once the other nodes acknowledged it, so a publish
// made after it returned reaches the new subscriber wherever it is made.
//
// Messages of one publisher to one topic reach every subscriber in publish order and
// never twice; each carries the publisher's sequence (from 1) so that a client sees a
// gap. The publisher is a session, or an Actor, whose sequence carries on across its
// moves. A subscriber whose socket falls behind is dropped from its topics with a Send
// that says so, and a publisher never waits for a subscriber. docs/topics.md describes
// the guarantees and the bounds.
package topic
