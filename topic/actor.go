package topic

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"strconv"

	"github.com/meshnode/meshnode/actor"
	"github.com/meshnode/meshnode/binding"
	"github.com/meshnode/meshnode/fault"
	swire "github.com/meshnode/meshnode/session/wire"
)

// What Actors do with topics (actor.Context.Publish, SubscribeSession, Subscribers):
// the hub's bridge. An Actor's sequence per topic is an attachment of its activation,
// carried to its target when it moves (the move layer "topic"), so its subscribers see
// one sequence across its moves. An Actor subscribes its bound session through the
// binding: a control packet on record 36 to the session's node, whose hub subscribes
// the session there.

// Control packet names on record 36 (the "$zlink." control namespace the binding keeps
// for its own packets, which no client can send).
const (
	controlSubscribe   = "$zlink.meshnode.subscribe"
	controlUnsubscribe = "$zlink.meshnode.unsubscribe"
)

// moveLayerName is the name the Actor's sequences travel under in a move.
const moveLayerName = "topic"

// seqsKey is the attachment key of an activation's sequences.
type seqsKey struct{}

func seqsOf(t *actor.Turn) map[string]uint64 {
	if m, ok := t.Attachment(seqsKey{}).(map[string]uint64); ok {
		return m
	}
	m := map[string]uint64{}
	t.SetAttachment(seqsKey{}, m)
	return m
}

// actorPublisher is the publisher identity of an activation: its ActorId and
// ObjectGeneration, which a move keeps (a new activation after a stop is a new
// publisher, whose sequence starts again at 1).
func actorPublisher(f actor.RouteFence) string {
	return "a:" + f.ID + "@" + strconv.FormatUint(f.ObjectGeneration, 10)
}

type bridge struct{ h *Hub }

func (b bridge) Publish(t *actor.Turn, topic, name string, c swire.Codec, payload []byte) (uint64, error) {
	if err := CheckName(topic); err != nil {
		return 0, err
	}
	m := Message{Name: name, Codec: c, Payload: payload}
	return b.h.publish(t.Context(), actorPublisher(t.Fence()), seqsOf(t), topic, func(uint64) (Message, error) { return m, nil })
}

func (b bridge) SubscribeSession(t *actor.Turn, topic string, subscribe bool) error {
	if err := CheckName(topic); err != nil {
		return err
	}
	if b.h.binder == nil {
		return fault.Errorf(fault.NotConfigured, "topic: this node binds no sessions")
	}
	name := controlUnsubscribe
	if subscribe {
		name = controlSubscribe
	}
	if err := b.h.binder.SendControl(t, name, []byte(topic)); err != nil {
		return fmt.Errorf("topic: subscribe the bound session to %s: %w", topic, err)
	}
	return nil
}

func (b bridge) Subscribers(topic string) int { return b.h.Presence(topic).Subscribers }

// onControl handles an Actor's subscribe (or unsubscribe) of its bound session, on the
// session's node. It runs on the record receiver: it does not wait for the other
// nodes' acknowledgement (the Actor did not wait either). A refusal (a closing session,
// its bound of topics) is counted and logged.
func (h *Hub) onControl(subscribe bool) func(s *binding.Session, data []byte) {
	return func(s *binding.Session, data []byte) {
		topic := string(data)
		var err error
		if subscribe {
			err = h.subscribe(context.Background(), s.Peer(), topic, false)
		} else {
			err = h.Unsubscribe(s.Peer(), topic)
		}
		if err != nil {
			h.ratelog.Log(h.log, slog.LevelWarn, "topic_actor_subscribe_refused", "topic: an Actor's subscribe of its session was refused",
				"topic", topic, "subscribe", subscribe, "err", err)
		}
	}
}

// captureSeqs carries an activation's sequences to its move's target:
// u16 count, then per topic u8 length, topic, u64 sequence (big-endian).
func captureSeqs(t *actor.Turn) ([]byte, error) {
	m, ok := t.Attachment(seqsKey{}).(map[string]uint64)
	if !ok || len(m) == 0 {
		return nil, nil
	}
	return encodeSeqs(m), nil
}

func restoreSeqs(t *actor.Turn, data []byte) error {
	m, err := decodeSeqs(data)
	if err != nil {
		return err
	}
	t.SetAttachment(seqsKey{}, m)
	return nil
}

func encodeSeqs(m map[string]uint64) []byte {
	out := binary.BigEndian.AppendUint16(nil, uint16(len(m)))
	for topic, seq := range m {
		out = append(out, byte(len(topic)))
		out = append(out, topic...)
		out = binary.BigEndian.AppendUint64(out, seq)
	}
	return out
}

// decodeSeqs decodes what captureSeqs encoded; bytes that do not decode are a
// ProtocolError (the move fails before the target serves).
func decodeSeqs(b []byte) (map[string]uint64, error) {
	bad := func(why string) error { return fault.Errorf(fault.ProtocolError, "topic: move of sequences: %s", why) }
	if len(b) < 2 {
		return nil, bad("truncated count")
	}
	n := int(binary.BigEndian.Uint16(b))
	b = b[2:]
	if n > len(b)/10 { // each entry takes at least 10 bytes
		return nil, bad("count past the data")
	}
	m := make(map[string]uint64, n)
	for i := 0; i < n; i++ {
		if len(b) < 1 || len(b) < 1+int(b[0])+8 {
			return nil, bad("truncated entry")
		}
		topic := string(b[1 : 1+int(b[0])])
		if err := CheckName(topic); err != nil {
			return nil, bad(err.Error())
		}
		b = b[1+int(b[0]):]
		m[topic] = binary.BigEndian.Uint64(b)
		b = b[8:]
	}
	if len(b) != 0 {
		return nil, bad("trailing bytes")
	}
	return m, nil
}
