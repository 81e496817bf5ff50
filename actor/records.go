package actor

import (
	"fmt"

	"github.com/meshnode/meshnode/mesh"
	"github.com/meshnode/meshnode/mesh/wire"
)

// FenceToWire converts a route fence to its service-wire form.
func FenceToWire(f RouteFence) wire.ActorRouteFence {
	return wire.ActorRouteFence{
		Actor:                            wire.ActorRef{ID: f.ID, Generation: f.ObjectGeneration},
		TargetNodeRID:                    f.Node.RID,
		TargetNodeGeneration:             f.Node.Generation,
		ExpectedAuthorityOwnerGeneration: f.AuthorityOwnerGeneration,
		ExpectedOwnerLeaseGeneration:     f.OwnerLeaseGeneration,
	}
}

// FenceFromWire converts a service-wire route fence.
func FenceFromWire(w wire.ActorRouteFence) RouteFence {
	return RouteFence{
		Ref:                      Ref{ID: w.Actor.ID, ObjectGeneration: w.Actor.Generation},
		Node:                     mesh.NodeID{RID: w.TargetNodeRID, Generation: w.TargetNodeGeneration},
		AuthorityOwnerGeneration: w.ExpectedAuthorityOwnerGeneration,
		OwnerLeaseGeneration:     w.ExpectedOwnerLeaseGeneration,
	}
}

// actorSendRecord builds the one-way record 24 of an Actor-to-Actor message: no
// operation id (one-way), no bound-session tail.
func actorSendRecord(to RouteFence, msg Message) (*wire.Record, error) {
	if msg.Name == "" || len(msg.Name) > 255 {
		return nil, fmt.Errorf("actor: message name must be 1..255 bytes, got %d", len(msg.Name))
	}
	ct := msg.ContentType
	if ct == "" {
		ct = "application/octet-stream"
	}
	body := &wire.ActorSend{TargetActor: FenceToWire(to)}
	if msg.From != nil {
		body.SourceActor = wire.ActorRef{ID: msg.From.ID, Generation: msg.From.ObjectGeneration}
	}
	return &wire.Record{Body: body, Payload: &wire.Payload{PacketName: msg.Name, ContentType: ct, Data: msg.Data}}, nil
}

// decodeActorSend reads an inbound record 24 into the target fence and the message.
func decodeActorSend(rec *wire.Record) (RouteFence, *Message, bool) {
	body, ok := rec.Body.(*wire.ActorSend)
	if !ok || rec.Payload == nil {
		return RouteFence{}, nil, false
	}
	msg := &Message{Name: rec.Payload.PacketName, ContentType: rec.Payload.ContentType, Data: rec.Payload.Data}
	if body.SourceActor.ID != "" {
		msg.From = &Ref{ID: body.SourceActor.ID, ObjectGeneration: body.SourceActor.Generation}
	}
	return FenceFromWire(body.TargetActor), msg, true
}
