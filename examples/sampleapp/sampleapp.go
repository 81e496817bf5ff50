package sampleapp

import (
	"context"
	"encoding/json"

	"github.com/meshnode/meshnode/actor"
	"github.com/meshnode/meshnode/binding"
	"github.com/meshnode/meshnode/fault"
	"github.com/meshnode/meshnode/session"
	"github.com/meshnode/meshnode/session/wire"
	"github.com/meshnode/meshnode/topic"
)

// RoomKind is the name of the sample Actor kind.
const RoomKind = "room"

// Kinds returns the sample Actor kinds.
func Kinds() []actor.Kind {
	return []actor.Kind{{Name: RoomKind, New: func() actor.Actor { return &Room{} },
		// The room's state moves with it when it is relocated, and is kept in the
		// node's store: the room saves before it answers each room.echo, so its served
		// count survives a crash of its node.
		State:   func(a actor.Actor) any { return &a.(*Room).State },
		Persist: actor.SaveExplicitly}}
}

// Mux returns the sample session. With a nil binder only echo and fail work (and the
// topics, with topics); with nil topics, subscribe, unsubscribe, publish and
// room.follow are not served.
func Mux(b *binding.Binder, topics *topic.Hub) *session.Mux {
	m := session.NewMux("sampleapp").
		Request("echo", func(_ context.Context, p *session.Packet) error { return p.Reply(p.Codec, p.Payload) }).
		Send("echo", func(ctx context.Context, p *session.Packet) error {
			return p.Peer.Send(ctx, "echo", p.Codec, p.Payload)
		}).
		Request("fail", func(context.Context, *session.Packet) error {
			return fault.Errorf(fault.Rejected, "the sample app rejects every fail request")
		})
	if topics != nil {
		t := topicHandlers{hub: topics}
		m.Request("subscribe", t.subscribe).
			Request("unsubscribe", t.unsubscribe).
			Request("publish", t.publish).
			Request("room.follow", t.follow).
			Request("room.unfollow", t.unfollow)
	}
	if b == nil {
		return m
	}
	rooms := rooms{b: b}
	return m.Request("bind", rooms.bind).
		Request("unbind", rooms.unbind).
		Prefix("room.", rooms.relay)
}

// Type is the sample session's type. Its handlers keep no Send packet past their
// callback (an echo is copied into the write queue, a relay that must wait holds its
// packet with Retain), so it reuses them.
func Type(b *binding.Binder, topics *topic.Hub) session.SessionType {
	return Mux(b, topics).Type().ReuseSendPackets()
}

type rooms struct{ b *binding.Binder }

type target struct {
	Actor string `json:"actor"`
	Kind  string `json:"kind,omitempty"`
}

func (r rooms) bind(ctx context.Context, p *session.Packet) error {
	var arg target
	if err := p.Decode(&arg); err != nil || arg.Actor == "" {
		return fault.Errorf(fault.InvalidOperation, `bind needs {"actor":ID}`)
	}
	if arg.Kind == "" {
		arg.Kind = RoomKind
	}
	if actor.IsSystemKind(arg.Kind) || arg.Kind == WorkerKind {
		// The runtime's own Actors and the services' session workers are reached through
		// their services (SessionManagement authorises, bounds and creates workers),
		// never bound by a client.
		return fault.Errorf(fault.InvalidOperation, "bind %s of kind %q: the kind is not one a client binds", arg.Actor, arg.Kind)
	}
	peer := p.Peer
	r.b.Session(peer).OnReplaced(func(ctx context.Context, actorID string) {
		_ = peer.SendValue(ctx, "room.replaced", wire.CodecJSON, target{Actor: actorID})
	})
	bd, err := r.b.Bind(ctx, peer, actor.Address{Kind: arg.Kind, ID: arg.Actor})
	if err != nil {
		return err
	}
	return p.ReplyValue(map[string]any{"actor": arg.Actor, "node": bd.Actor.Node.RID, "bindingGeneration": bd.BindingGeneration})
}

func (r rooms) unbind(ctx context.Context, p *session.Packet) error {
	var arg target
	if err := p.Decode(&arg); err != nil || arg.Actor == "" {
		return fault.Errorf(fault.InvalidOperation, `unbind needs {"actor":ID}`)
	}
	if err := r.b.Unbind(ctx, p.Peer, arg.Actor); err != nil {
		return err
	}
	return p.Reply(wire.CodecJSON, []byte(`{}`))
}

func (r rooms) relay(ctx context.Context, p *session.Packet) error {
	id, _ := p.Metadata.Get("actor")
	if err := r.b.Relay(ctx, p, id); err != nil && p.IsRequest() {
		return err
	}
	return nil // a Send that cannot be relayed is dropped
}

// Room is the sample Actor: it answers room.echo and pushes room.say back to its
// bound session. Its state (how many room.echo requests it served) moves with it and
// is saved in the node's store before each room.echo is answered. One
// session at a time is bound to a room: a second bind replaces the first session
// (which gets room.replaced and is closed), so this is a one-client room, not a chat
// room shared by many.
type Room struct {
	State RoomState
}

// roomEcho is the answer to room.echo: a struct rather than a map, which encoding/json
// encodes by reflection on every call (a quarter of a bound request's allocations).
// The fields are in the order the map's sorted keys had, so the bytes are the same.
type roomEcho struct {
	Actor   string          `json:"actor"`
	Node    string          `json:"node"`
	Payload json.RawMessage `json:"payload"`
	Served  int64           `json:"served"`
}

// RoomState is the part of a Room that moves with it to another node.
type RoomState struct {
	Served int64 `msgpack:"served"`
}

// Receive implements actor.Actor.
func (r *Room) Receive(ctx *actor.Context) {
	p, ok := ctx.Message().(*actor.SessionPacket)
	if !ok {
		return
	}
	self := ctx.Self()
	switch {
	case p.Name == "room.echo" && p.Request:
		payload := json.RawMessage(p.Payload)
		if !json.Valid(payload) {
			_ = ctx.ReplyError(fault.Errorf(fault.InvalidOperation, "room.echo needs a JSON payload"))
			return
		}
		r.State.Served++
		// Saved before it is answered: a client never sees a count the store does not
		// have. A failed save answers the error (unavailable, or deadline_exceeded when
		// its outcome is unknown) and the room stops after this turn; the next request
		// finds it anew with its last saved count.
		if err := ctx.Save(); err != nil {
			_ = ctx.ReplyError(err)
			return
		}
		_ = ctx.Reply(roomEcho{Actor: self.ID, Node: self.Node.RID, Payload: payload, Served: r.State.Served})
	case p.Name == "room.say":
		_ = ctx.Push("room.said", p.Payload, actor.WithCodec(p.Codec))
		// Followers (room.follow) get what the room says too, in order, wherever they
		// are connected: the room publishes it to its topic.
		_, _ = ctx.Publish(FollowTopic(self.ID), "room.said", p.Payload, actor.WithCodec(p.Codec))
	case p.Request:
		_ = ctx.ReplyError(fault.Errorf(fault.NotFound, "room has no handler for %s", p.Name))
	}
}
