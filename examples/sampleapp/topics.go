package sampleapp

import (
	"context"
	"encoding/json"

	"github.com/meshnode/meshnode/fault"
	"github.com/meshnode/meshnode/session"
	"github.com/meshnode/meshnode/session/wire"
	"github.com/meshnode/meshnode/topic"
)

// The sample's topics: a session subscribes to a topic, unsubscribes, publishes to it
// (the session is the publisher), and follows a room (the room publishes what it is
// told to say to the topic FollowTopic(room)).

// MessageName is the Send every subscriber of a topic gets for a publish of the
// sample: JSON {"topic":T,"payload":ANY,"seq":N}, N counting the publisher's messages
// to T from 1.
const MessageName = "topic.message"

// FollowTopic is the topic a room publishes what it says to.
func FollowTopic(room string) string { return "room:" + room }

type topicHandlers struct{ hub *topic.Hub }

type topicArg struct {
	Topic   string          `json:"topic"`
	Payload json.RawMessage `json:"payload"`
}

var empty = []byte(`{}`)

func (t topicHandlers) subscribe(ctx context.Context, p *session.Packet) error {
	var arg topicArg
	if err := p.Decode(&arg); err != nil {
		return fault.Errorf(fault.InvalidOperation, `subscribe needs {"topic":T}: %v`, err)
	}
	if err := t.hub.Subscribe(ctx, p.Peer, arg.Topic); err != nil {
		return err
	}
	return p.Reply(wire.CodecJSON, empty)
}

func (t topicHandlers) unsubscribe(_ context.Context, p *session.Packet) error {
	var arg topicArg
	if err := p.Decode(&arg); err != nil {
		return fault.Errorf(fault.InvalidOperation, `unsubscribe needs {"topic":T}: %v`, err)
	}
	if err := t.hub.Unsubscribe(p.Peer, arg.Topic); err != nil {
		return err
	}
	return p.Reply(wire.CodecJSON, empty)
}

// message is what a subscriber of a sample topic receives.
type message struct {
	Topic   string          `json:"topic"`
	Payload json.RawMessage `json:"payload"`
	Seq     uint64          `json:"seq"`
}

func (t topicHandlers) publish(ctx context.Context, p *session.Packet) error {
	var arg topicArg
	if err := p.Decode(&arg); err != nil {
		return fault.Errorf(fault.InvalidOperation, `publish needs {"topic":T,"payload":ANY}: %v`, err)
	}
	if len(arg.Payload) == 0 {
		arg.Payload = json.RawMessage("null")
	}
	_, err := t.hub.Publish(ctx, p.Peer, arg.Topic, func(seq uint64) (topic.Message, error) {
		b, err := json.Marshal(message{Topic: arg.Topic, Payload: arg.Payload, Seq: seq})
		return topic.Message{Name: MessageName, Codec: wire.CodecJSON, Payload: b}, err
	})
	if err != nil {
		return err
	}
	return p.Reply(wire.CodecJSON, empty)
}

type roomArg struct {
	Actor string `json:"actor"`
}

func (t topicHandlers) follow(ctx context.Context, p *session.Packet) error {
	var arg roomArg
	if err := p.Decode(&arg); err != nil || arg.Actor == "" {
		return fault.Errorf(fault.InvalidOperation, `room.follow needs {"actor":ID}`)
	}
	if err := t.hub.Subscribe(ctx, p.Peer, FollowTopic(arg.Actor)); err != nil {
		return err
	}
	return p.Reply(wire.CodecJSON, empty)
}

func (t topicHandlers) unfollow(_ context.Context, p *session.Packet) error {
	var arg roomArg
	if err := p.Decode(&arg); err != nil || arg.Actor == "" {
		return fault.Errorf(fault.InvalidOperation, `room.unfollow needs {"actor":ID}`)
	}
	if err := t.hub.Unsubscribe(p.Peer, FollowTopic(arg.Actor)); err != nil {
		return err
	}
	return p.Reply(wire.CodecJSON, empty)
}
