// Package sampleapp is the session the meshnode binary serves by default, and its
// `room` Actor kind: a small service that shows the session surface and the binding of
// sessions to Actors anywhere in the mesh.
//
//	Request "echo"      -> Response with the same payload and codec
//	Send "echo"         -> Send "echo" back with the same payload and codec
//	Request "fail"      -> Error with code "rejected"
//	Request "bind"      {"actor":ID} -> binds the session to room ID (placed by the
//	                    directory); answers {"actor":ID,"node":RID,"bindingGeneration":G}
//	Request "unbind"    {"actor":ID} -> unbinds; answers {}
//	Request "room.echo" -> relayed; the room answers {"actor":ID,"node":RID,"payload":<request>}
//	Send "room.say"     -> relayed; the room pushes Send "room.said" with the same payload
//	When another session binds the same room, this one gets Send "room.replaced"
//	{"actor":ID} and is closed. With several rooms bound, metadata key "actor" picks one.
package sampleapp

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/meshnode/meshnode/actor"
	"github.com/meshnode/meshnode/binding"
	"github.com/meshnode/meshnode/fault"
	"github.com/meshnode/meshnode/session"
	"github.com/meshnode/meshnode/session/wire"
)

// RoomKind is the name of the sample Actor kind.
const RoomKind = "room"

// Echo is the sample session.
type Echo struct{ b *binding.Binder }

// New returns a sample session. With a nil binder only echo and fail work.
func New(b *binding.Binder) *Echo { return &Echo{b: b} }

// Type is the sample session's type.
func Type(b *binding.Binder) session.SessionType {
	return session.NewSessionType(func() *Echo { return New(b) })
}

// Register adds the room kind to actors.
func Register(actors *actor.Host, b *binding.Binder) error {
	return actors.Register(actor.Kind{Name: RoomKind, New: func() actor.Actor { return &Room{} }})
}

type actorArg struct {
	Actor string `json:"actor"`
}

// OnPacket implements session.Session.
func (e *Echo) OnPacket(ctx context.Context, pkt *session.Packet) error {
	switch {
	case pkt.Name == "echo" && pkt.Kind == wire.KindRequest:
		return pkt.Reply(pkt.Codec, pkt.Payload)
	case pkt.Name == "echo" && pkt.Kind == wire.KindSend:
		return pkt.Peer.Send(ctx, "echo", pkt.Codec, pkt.Payload)
	case pkt.Name == "fail" && pkt.Kind == wire.KindRequest:
		return pkt.ReplyError(fault.Rejected.Code(), "the sample app rejects every fail request")
	case e.b != nil && pkt.Name == "bind" && pkt.Kind == wire.KindRequest:
		return e.bind(ctx, pkt)
	case e.b != nil && pkt.Name == "unbind" && pkt.Kind == wire.KindRequest:
		var arg actorArg
		if err := pkt.Decode(&arg); err != nil || arg.Actor == "" {
			return pkt.ReplyError(fault.InvalidOperation.Code(), `unbind needs {"actor":ID}`)
		}
		if err := e.b.Session(pkt.Peer).Unbind(ctx, arg.Actor); err != nil {
			return pkt.ReplyError(errorCode(err), err.Error())
		}
		return pkt.Reply(wire.CodecJSON, []byte(`{}`))
	case e.b != nil && len(pkt.Name) > 5 && pkt.Name[:5] == "room.":
		return e.relay(ctx, pkt)
	case pkt.Kind == wire.KindRequest:
		return pkt.ReplyError(fault.NotFound.Code(), "no handler for packet "+pkt.Name)
	}
	return nil
}

func (e *Echo) bind(ctx context.Context, pkt *session.Packet) error {
	var arg struct {
		Actor string `json:"actor"`
		Kind  string `json:"kind"`
	}
	if err := pkt.Decode(&arg); err != nil || arg.Actor == "" {
		return pkt.ReplyError(fault.InvalidOperation.Code(), `bind needs {"actor":ID}`)
	}
	if arg.Kind == "" {
		arg.Kind = RoomKind
	}
	s := e.b.Session(pkt.Peer)
	peer := pkt.Peer
	s.OnReplaced(func(ctx context.Context, actorID string) {
		_ = peer.SendValue(ctx, "room.replaced", wire.CodecJSON, actorArg{Actor: actorID})
	})
	var bd binding.Binding
	var err error
	// An idle room may be collected between the lookup and the bind: the bind then
	// finds no activation, and one more lookup activates the room anew.
	for attempt := 0; attempt < 2; attempt++ {
		var fence actor.RouteFence
		if fence, err = e.b.Actors().Lookup(ctx, arg.Kind, arg.Actor); err != nil {
			return pkt.ReplyError(errorCode(err), err.Error())
		}
		if bd, err = s.Bind(ctx, fence); !errors.Is(err, fault.NotFound) {
			break
		}
	}
	if err != nil {
		return pkt.ReplyError(errorCode(err), err.Error())
	}
	return pkt.ReplyValue(map[string]any{"actor": arg.Actor, "node": bd.Actor.Node.RID, "bindingGeneration": bd.BindingGeneration})
}

func (e *Echo) relay(ctx context.Context, pkt *session.Packet) error {
	s := e.b.Session(pkt.Peer)
	id, ok := pkt.Metadata.Get("actor")
	if !ok {
		if bs := s.Bindings(); len(bs) == 1 {
			id = bs[0].Actor.ID
		}
	}
	if err := s.Relay(ctx, id, pkt); err != nil {
		if pkt.IsRequest() {
			return pkt.ReplyError(errorCode(err), err.Error())
		}
		return nil
	}
	return nil
}

// errorCode is the Error reply code of err: the wire code of its fault kind.
func errorCode(err error) string { return fault.Code(err) }

// Room is the sample Actor: it answers room.echo and pushes room.say back to its
// bound session.
type Room struct{}

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
		_ = ctx.Reply(map[string]any{"actor": self.ID, "node": self.Node.RID, "payload": payload})
	case p.Name == "room.say":
		_ = ctx.Push("room.said", p.Payload, actor.WithCodec(p.Codec))
	case p.Request:
		_ = ctx.ReplyError(fault.Errorf(fault.NotFound, "room has no handler for %s", p.Name))
	}
}
