package topic

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"

	"github.com/meshnode/meshnode/actor"
	"github.com/meshnode/meshnode/binding"
	"github.com/meshnode/meshnode/fault"
	"github.com/meshnode/meshnode/internal/ratelog"
	"github.com/meshnode/meshnode/mesh"
	"github.com/meshnode/meshnode/mesh/wire"
	"github.com/meshnode/meshnode/session"
	"github.com/meshnode/meshnode/session/codec"
	swire "github.com/meshnode/meshnode/session/wire"
)

// Defaults of Options.
const (
	DefaultMaxTopicsPerSession   = 100
	DefaultMaxTopicsPerPublisher = 100
	DefaultMaxPayload            = 64 << 10
	DefaultSubscribeWait         = 2 * time.Second
	DefaultPresenceInterval      = 250 * time.Millisecond
	DefaultResyncInterval        = 10 * time.Second
	DefaultReorderWait           = 2 * time.Second
)

// Metadata keys of a delivered message's STREAM Send.
const (
	MetaTopic     = "meshnode.topic"
	MetaSequence  = "meshnode.seq"
	MetaPublisher = "meshnode.publisher"
)

// DroppedName is the Send a subscriber gets when it is dropped from its topics because
// its socket fell behind: JSON {"topics":[...],"reason":"slow consumer"}.
const DroppedName = "topic.dropped"

// Options configures a Hub. The zero value of every field selects its default.
type Options struct {
	// MaxTopicsPerSession bounds the topics one session subscribes to (default 100).
	MaxTopicsPerSession int
	// MaxTopicsPerPublisher bounds the topics one publisher (a session, an Actor)
	// publishes to: each keeps a sequence (default 100).
	MaxTopicsPerPublisher int
	// MaxPayload bounds a published payload, in bytes (default 64 KiB, what a zlink
	// client takes by default).
	MaxPayload int
	// SubscribeWait bounds how long a subscribe that gives this node its first
	// subscriber to a topic waits for the other nodes to acknowledge it (default 2 s).
	SubscribeWait time.Duration
	// PresenceInterval is how often changes of subscriber counts that give no node its
	// first or last subscriber are sent to the other nodes (default 250 ms).
	PresenceInterval time.Duration
	// ResyncInterval is how often each node sends its whole set to the others, which
	// repairs a view that lost a change (default 10 s).
	ResyncInterval time.Duration
	// ReorderWait bounds how long a message of an Actor that moved waits on a node for
	// the messages its previous node sent before it (default 2 s); then what is held
	// is delivered and the gap counted.
	ReorderWait time.Duration

	Codecs        *codec.Registry
	Logger        *slog.Logger
	MeterProvider metric.MeterProvider
}

func (o Options) normalize(node *mesh.Node) Options {
	if o.MaxTopicsPerSession <= 0 {
		o.MaxTopicsPerSession = DefaultMaxTopicsPerSession
	}
	if o.MaxTopicsPerPublisher <= 0 {
		o.MaxTopicsPerPublisher = DefaultMaxTopicsPerPublisher
	}
	if o.MaxPayload <= 0 {
		o.MaxPayload = DefaultMaxPayload
	}
	if o.SubscribeWait <= 0 {
		o.SubscribeWait = DefaultSubscribeWait
	}
	if o.PresenceInterval <= 0 {
		o.PresenceInterval = DefaultPresenceInterval
	}
	if o.ResyncInterval <= 0 {
		o.ResyncInterval = DefaultResyncInterval
	}
	if o.ReorderWait <= 0 {
		o.ReorderWait = DefaultReorderWait
	}
	if o.Codecs == nil {
		o.Codecs = codec.NewRegistry()
	}
	if o.Logger == nil {
		o.Logger = node.Logger()
	}
	if o.MeterProvider == nil {
		o.MeterProvider = otel.GetMeterProvider()
	}
	return o
}

// Message is what a publish delivers: a STREAM Send named Name with Payload in Codec.
type Message struct {
	Name    string
	Codec   swire.Codec
	Payload []byte
}

// Hub is one node's part of the topics: its sessions' subscriptions, its share of the
// registry of which nodes have subscribers, publishes made here and deliveries to its
// sessions. Get it with meshnode's Node.Topics, or New on a bare node.
type Hub struct {
	node   *mesh.Node
	binder *binding.Binder
	opts   Options
	log    *slog.Logger
	self   mesh.NodeID

	mu       sync.RWMutex
	topics   map[string]map[*subscriber]struct{} // local subscribers, by topic
	sessions map[*session.Peer]*subscriber
	locals   map[string]map[*LocalSubscription]struct{} // in-process receivers, by topic
	stopped  bool

	reg   registry
	order orderer

	stats   counters
	ratelog ratelog.Limiter

	unsubscribe func()
	metricsReg  metric.Registration
	stop        chan struct{}
	wg          sync.WaitGroup
}

// subscriber is one session's topic state: what it subscribes to and, as a publisher,
// its sequence per topic.
type subscriber struct {
	peer *session.Peer
	id   string // its publisher identity

	// under Hub.mu
	topics  map[string]struct{}
	closing bool

	pubMu sync.Mutex        // one publish of this session at a time: sequence, then sends
	seqs  map[string]uint64 // under pubMu
}

// counters are the hub's figures (Stats, the metrics).
type counters struct {
	publishes, publishRecords, unheard   atomic.Int64
	deliveries, dropsSlow                atomic.Int64
	staleInterest, gaps, held, duplicate atomic.Int64
	sendFailures, refused                atomic.Int64
}

// Stats are the hub's figures since it started.
type Stats struct {
	Publishes int64 `json:"publishes"` // publishes made on this node
	// PublishRecords counts the topicPublish records sent to other nodes: one per node
	// with subscribers, per publish.
	PublishRecords int64 `json:"publishRecords"`
	// Unheard counts publishes no session of the fleet subscribed to (as this node knew).
	Unheard int64 `json:"unheard"`
	// Deliveries counts STREAM Sends written to this node's subscribers.
	Deliveries int64 `json:"deliveries"`
	// DroppedSlow counts subscribers dropped from their topics because their socket
	// fell behind.
	DroppedSlow int64 `json:"droppedSlow"`
	// SendFailures counts topicPublish and interest records that could not be sent (a
	// full window toward a node, a node that departed).
	SendFailures int64 `json:"sendFailures"`
	// Refused counts subscribes and publishes refused with an error (a bad topic name,
	// too many topics, a payload over the limit, a closing session).
	Refused int64 `json:"refused"`
	// StaleInterest counts interest records refused as older than what was held.
	StaleInterest int64 `json:"staleInterest"`
	// Gaps counts messages of a publisher that never arrived here (a node that died, a
	// record lost), found when a later one was delivered; Held counts messages held for
	// an earlier one of an Actor that moved; Duplicates counts messages refused as
	// delivered already (or older than one delivered).
	Gaps       int64 `json:"gaps"`
	Held       int64 `json:"held"`
	Duplicates int64 `json:"duplicates"`
	// Topics is how many topics this node's sessions subscribe to, Subscriptions how
	// many subscriptions they hold.
	Topics        int `json:"topics"`
	Subscriptions int `json:"subscriptions"`
	// LocalSubscriptions is how many in-process subscriptions (SubscribeLocal: the
	// plugin services' fan-out to their presentations) this node holds.
	LocalSubscriptions int `json:"localSubscriptions"`
}

// New starts the topics of node: binder (nil: no Actor may subscribe its bound
// session) carries an Actor's subscribe to its session's node; actors (nil: no Actor
// publishes) gets the bridge Actors publish through.
func New(node *mesh.Node, actors *actor.Host, binder *binding.Binder, opts Options) (*Hub, error) {
	opts = opts.normalize(node)
	h := &Hub{
		node: node, binder: binder, opts: opts, log: opts.Logger, self: node.ID(),
		topics:   map[string]map[*subscriber]struct{}{},
		sessions: map[*session.Peer]*subscriber{},
		locals:   map[string]map[*LocalSubscription]struct{}{},
		stop:     make(chan struct{}),
	}
	h.reg.init(h)
	h.order.init(h)
	if err := h.registerMetrics(opts.MeterProvider); err != nil {
		return nil, fmt.Errorf("topic: metrics: %w", err)
	}
	node.Records().Handle(wire.CmdTopicPublish, h.onPublish)
	node.Records().Handle(wire.CmdTopicInterest, h.reg.onInterest)
	node.Records().Handle(wire.CmdTopicInterestAck, h.reg.onAck)
	h.unsubscribe = node.Membership().Subscribe(h.reg.onMembership)
	if actors != nil {
		actors.SetTopicBridge(bridge{h: h})
		actors.HandleMoveLayer(moveLayerName, actor.MoveHooks{Capture: captureSeqs, Restore: restoreSeqs})
	}
	if binder != nil {
		binder.HandleControl(controlSubscribe, h.onControl(true))
		binder.HandleControl(controlUnsubscribe, h.onControl(false))
	}
	h.wg.Add(2)
	go h.reg.loop()
	go h.order.loop()
	return h, nil
}

// Stop stops the hub's loops and metrics. Sessions end with their host; records that
// arrive afterwards are dropped.
func (h *Hub) Stop() {
	h.mu.Lock()
	if h.stopped {
		h.mu.Unlock()
		return
	}
	h.stopped = true
	h.mu.Unlock()
	h.unsubscribe()
	close(h.stop)
	h.wg.Wait()
	if h.metricsReg != nil {
		_ = h.metricsReg.Unregister()
	}
}

// Stats returns the hub's figures.
func (h *Hub) Stats() Stats {
	h.mu.RLock()
	st := Stats{Topics: len(h.topics)}
	for _, subs := range h.topics {
		st.Subscriptions += len(subs)
	}
	for _, subs := range h.locals {
		st.LocalSubscriptions += len(subs)
	}
	h.mu.RUnlock()
	c := &h.stats
	st.Publishes, st.PublishRecords, st.Unheard = c.publishes.Load(), c.publishRecords.Load(), c.unheard.Load()
	st.Deliveries, st.DroppedSlow, st.SendFailures = c.deliveries.Load(), c.dropsSlow.Load(), c.sendFailures.Load()
	st.Refused = c.refused.Load()
	st.StaleInterest, st.Gaps, st.Held, st.Duplicates = c.staleInterest.Load(), c.gaps.Load(), c.held.Load(), c.duplicate.Load()
	return st
}

// session returns the topic state of peer's session, making it on first use (it goes
// with the session).
func (h *Hub) session(peer *session.Peer) (*subscriber, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped {
		return nil, ErrStopped
	}
	if s := h.sessions[peer]; s != nil {
		return s, nil
	}
	select {
	case <-peer.Done():
		return nil, ErrSessionClosing
	default:
	}
	s := &subscriber{peer: peer, topics: map[string]struct{}{},
		id: "s:" + h.self.RID + "#" + strconv.FormatUint(h.self.Generation, 10) + "/" + strconv.FormatUint(uint64(peer.RoutingID()), 10)}
	h.sessions[peer] = s
	peer.AfterDisconnect(func(context.Context, swire.CloseReason) { h.sessionGone(s) })
	return s, nil
}

// sessionGone drops a closed session's subscriptions.
func (h *Hub) sessionGone(s *subscriber) {
	h.mu.Lock()
	s.closing = true
	delete(h.sessions, s.peer)
	changed := h.leaveAll(s)
	h.mu.Unlock()
	for topic, n := range changed {
		h.reg.localChanged(topic, n)
	}
}

// leaveAll removes s from every topic it subscribes to and returns the new local
// counts of those topics. h.mu is held.
func (h *Hub) leaveAll(s *subscriber) map[string]int {
	changed := make(map[string]int, len(s.topics))
	for topic := range s.topics {
		changed[topic] = h.leave(s, topic)
	}
	return changed
}

// leave removes s from topic; it returns the topic's local count. h.mu is held.
func (h *Hub) leave(s *subscriber, topic string) int {
	delete(s.topics, topic)
	subs := h.topics[topic]
	delete(subs, s)
	if len(subs) == 0 {
		delete(h.topics, topic)
	}
	return h.countLocked(topic)
}

// countLocked returns how many subscribers topic has on this node: sessions and
// in-process receivers. h.mu is held.
func (h *Hub) countLocked(topic string) int {
	return len(h.topics[topic]) + len(h.locals[topic])
}

// Subscribe subscribes the session of peer to topic: from when it returns, what is
// published to topic anywhere in the mesh reaches it as a STREAM Send (metadata
// MetaTopic, MetaSequence and MetaPublisher say from whom and which), until it
// unsubscribes or closes. Subscribing again is a no-op. When this node had no
// subscriber of topic yet, Subscribe waits (at most Options.SubscribeWait, and ctx)
// until the other nodes know it has one.
func (h *Hub) Subscribe(ctx context.Context, peer *session.Peer, topic string) error {
	return h.subscribe(ctx, peer, topic, true)
}

func (h *Hub) subscribe(ctx context.Context, peer *session.Peer, topic string, wait bool) error {
	err := h.join(ctx, peer, topic, wait)
	if err != nil {
		h.stats.refused.Add(1)
	}
	return err
}

func (h *Hub) join(ctx context.Context, peer *session.Peer, topic string, wait bool) error {
	if err := checkSessionName(topic); err != nil {
		return err
	}
	s, err := h.session(peer)
	if err != nil {
		return err
	}
	h.mu.Lock()
	switch {
	case s.closing:
		h.mu.Unlock()
		return ErrSessionClosing
	case h.stopped:
		h.mu.Unlock()
		return ErrStopped
	}
	if _, ok := s.topics[topic]; ok {
		h.mu.Unlock()
		return nil
	}
	if len(s.topics) >= h.opts.MaxTopicsPerSession {
		h.mu.Unlock()
		return fmt.Errorf("%w: the session subscribes to %d topics already (the bound), not to %q", ErrTooManyTopics, len(s.topics), topic)
	}
	s.topics[topic] = struct{}{}
	subs := h.topics[topic]
	if subs == nil {
		subs = map[*subscriber]struct{}{}
		h.topics[topic] = subs
	}
	subs[s] = struct{}{}
	n := h.countLocked(topic)
	h.mu.Unlock()
	v := h.reg.localChanged(topic, n)
	if n == 1 && wait {
		wctx, cancel := context.WithTimeout(ctx, h.opts.SubscribeWait)
		defer cancel()
		h.reg.awaitAcks(wctx, v)
	}
	return nil
}

// Unsubscribe ends the subscription of peer's session to topic (a no-op when it has
// none).
func (h *Hub) Unsubscribe(peer *session.Peer, topic string) error {
	if err := CheckName(topic); err != nil {
		return err
	}
	h.mu.Lock()
	s := h.sessions[peer]
	if s == nil {
		h.mu.Unlock()
		return nil
	}
	if _, ok := s.topics[topic]; !ok {
		h.mu.Unlock()
		return nil
	}
	n := h.leave(s, topic)
	h.mu.Unlock()
	h.reg.localChanged(topic, n)
	return nil
}

// Topics returns the topics peer's session subscribes to.
func (h *Hub) Topics(peer *session.Peer) []string {
	h.mu.RLock()
	defer h.mu.RUnlock()
	s := h.sessions[peer]
	if s == nil {
		return nil
	}
	out := make([]string, 0, len(s.topics))
	for t := range s.topics {
		out = append(out, t)
	}
	return out
}

// Publish publishes to topic as the session of peer: build gets the publish's
// sequence (this session's n-th message to topic, from 1) and returns the message. It
// returns once the message is handed to every node that has subscribers and written to
// this node's; it never waits for a subscriber (one that falls behind is dropped), at
// most for room toward a node (bounded by ctx).
func (h *Hub) Publish(ctx context.Context, peer *session.Peer, topic string, build func(seq uint64) (Message, error)) (uint64, error) {
	if err := checkSessionName(topic); err != nil {
		h.stats.refused.Add(1)
		return 0, err
	}
	s, err := h.session(peer)
	if err != nil {
		h.stats.refused.Add(1)
		return 0, err
	}
	s.pubMu.Lock()
	defer s.pubMu.Unlock()
	if s.seqs == nil {
		s.seqs = map[string]uint64{}
	}
	return h.publish(ctx, s.id, s.seqs, topic, build)
}

// PublishMessage is Publish of a message that does not depend on its sequence.
func (h *Hub) PublishMessage(ctx context.Context, peer *session.Peer, topic string, m Message) (uint64, error) {
	return h.Publish(ctx, peer, topic, func(uint64) (Message, error) { return m, nil })
}

// publish publishes the next message of publisher pub to topic; seqs is pub's
// sequence per topic, which the caller keeps from concurrent use.
func (h *Hub) publish(ctx context.Context, pub string, seqs map[string]uint64, topic string, build func(seq uint64) (Message, error)) (uint64, error) {
	seq, err := h.publishNext(ctx, pub, seqs, topic, build)
	if err != nil {
		h.stats.refused.Add(1)
	}
	return seq, err
}

func (h *Hub) publishNext(ctx context.Context, pub string, seqs map[string]uint64, topic string, build func(seq uint64) (Message, error)) (uint64, error) {
	seq, known := seqs[topic]
	if !known && len(seqs) >= h.opts.MaxTopicsPerPublisher {
		return 0, fmt.Errorf("%w: the publisher publishes to %d topics already (the bound), not to %q", ErrTooManyTopics, len(seqs), topic)
	}
	seq++
	m, err := build(seq)
	if err != nil {
		return 0, err
	}
	if err := swire.ValidateHeader(&swire.Header{Kind: swire.KindSend, Codec: m.Codec, Name: m.Name}); err != nil {
		return 0, fault.Errorf(fault.InvalidOperation, "topic: publish to %s: %w", topic, err)
	}
	if len(m.Payload) > h.opts.MaxPayload {
		return 0, fmt.Errorf("%w: a %d-byte payload to %s (limit %d)", ErrTooLarge, len(m.Payload), topic, h.opts.MaxPayload)
	}
	select {
	case <-h.stop:
		return 0, ErrStopped
	default:
	}
	seqs[topic] = seq
	h.stats.publishes.Add(1)
	ct := h.opts.Codecs.ContentTypeOf(m.Codec)
	nodes := h.reg.nodesFor(topic)
	if len(nodes) > 0 {
		rec := &wire.Record{Body: &wire.TopicPublish{Topic: topic, Publisher: pub, Sequence: seq},
			Payload: &wire.Payload{PacketName: m.Name, ContentType: ct, Data: m.Payload}}
		for _, n := range nodes {
			if err := h.node.Records().Send(ctx, n, rec); err != nil {
				h.stats.sendFailures.Add(1)
				h.ratelog.Log(h.log, slog.LevelWarn, "topic_publish_not_sent", "topic: a publish did not reach a node with subscribers",
					"topic", topic, "node", n.String(), "err", err)
				continue
			}
			h.stats.publishRecords.Add(1)
		}
	}
	local := h.hasLocal(topic)
	if local {
		h.order.admit(h.self, pub, topic, seq, m.Name, m.Codec, m.Payload)
	}
	if !local && len(nodes) == 0 {
		h.stats.unheard.Add(1)
	}
	return seq, nil
}

func (h *Hub) hasLocal(topic string) bool {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.countLocked(topic) > 0
}

// onPublish takes a topicPublish from another node to this node's subscribers.
func (h *Hub) onPublish(from mesh.NodeID, rec *wire.Record) {
	body, ok := rec.Body.(*wire.TopicPublish)
	if !ok || rec.Payload == nil {
		return
	}
	h.order.admit(from, body.Publisher, body.Topic, body.Sequence, rec.Payload.PacketName,
		h.opts.Codecs.CodecOf(rec.Payload.ContentType), rec.Payload.Data)
}

// deliver writes one message to this node's subscribers of topic: the frame is encoded
// once. A subscriber whose outbound queue is at its soft limit is dropped from its
// topics and told so. In-process receivers (SubscribeLocal) get it first, outside the
// hub's lock, so that a receiver may call the hub.
func (h *Hub) deliver(pub, topic string, seq uint64, name string, c swire.Codec, payload []byte) {
	n := int64(0)
	h.mu.RLock()
	var locals []*LocalSubscription
	if ls := h.locals[topic]; len(ls) > 0 {
		locals = make([]*LocalSubscription, 0, len(ls))
		for l := range ls {
			locals = append(locals, l)
		}
	}
	sessions := len(h.topics[topic])
	h.mu.RUnlock()
	if len(locals) > 0 {
		d := Delivery{Topic: topic, Publisher: pub, Seq: seq, Message: Message{Name: name, Codec: c, Payload: payload}}
		for _, l := range locals {
			if l.receive(d) {
				n++
			}
		}
	}
	if sessions == 0 {
		h.stats.deliveries.Add(n)
		return
	}
	md := swire.Metadata{{Key: MetaTopic, Value: topic}, {Key: MetaSequence, Value: strconv.FormatUint(seq, 10)},
		{Key: MetaPublisher, Value: pub}}
	f, err := session.EncodeSend(name, c, payload, md)
	if err != nil {
		h.stats.deliveries.Add(n)
		h.ratelog.Log(h.log, slog.LevelWarn, "topic_bad_message", "topic: a message could not be encoded for its subscribers",
			"topic", topic, "publisher", pub, "err", err)
		return
	}
	var behind []*subscriber
	h.mu.RLock()
	for s := range h.topics[topic] {
		switch err := s.peer.SendFrame(f); {
		case err == nil:
			n++
		case err == session.ErrBehind:
			behind = append(behind, s)
		}
	}
	h.mu.RUnlock()
	h.stats.deliveries.Add(n)
	for _, s := range behind {
		h.dropSlow(s)
	}
}

// dropSlow drops a subscriber whose socket fell behind from all its topics and queues
// it a Send that says so (in the room a queue keeps for frames that cannot wait).
func (h *Hub) dropSlow(s *subscriber) {
	h.mu.Lock()
	if len(s.topics) == 0 {
		h.mu.Unlock()
		return // dropped already by an earlier message
	}
	topics := make([]string, 0, len(s.topics))
	for t := range s.topics {
		topics = append(topics, t)
	}
	changed := h.leaveAll(s)
	h.mu.Unlock()
	h.stats.dropsSlow.Add(1)
	h.ratelog.Log(h.log, slog.LevelWarn, "topic_slow_subscriber", "topic: a subscriber fell behind and was dropped from its topics",
		"session", s.id, "topics", len(topics))
	payload, _ := json.Marshal(struct {
		Topics []string `json:"topics"`
		Reason string   `json:"reason"`
	}{topics, "slow consumer"})
	_ = s.peer.Send(context.Background(), DroppedName, swire.CodecJSON, payload, session.NonBlocking())
	for topic, n := range changed {
		h.reg.localChanged(topic, n)
	}
}
