package actor

import (
	"fmt"
	"sync"

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

// sendScratch holds the record of one Actor send while it is encoded: the transport
// copies the record into its frames, so the structs go back to a pool at once instead
// of being three allocations per message.
type sendScratch struct {
	rec     wire.Record
	body    wire.ActorSend
	payload wire.Payload
}

var sendScratchPool = sync.Pool{New: func() any { return new(sendScratch) }}

// release returns the scratch to the pool (the record was sent: encoded).
func (sc *sendScratch) release() {
	*sc = sendScratch{}
	sendScratchPool.Put(sc)
}

// actorSendRecord builds the record 24 of an Actor-to-Actor message (no bound-session
// tail; an operation id when it is a request) in pooled scratch; sc.release returns it
// (a method, not a closure: a closure would be an allocation per message).
func actorSendRecord(to RouteFence, msg *Message, from *Ref, req *requestInfo) (rec *wire.Record, sc *sendScratch, err error) {
	if msg.Name == "" || len(msg.Name) > 255 {
		return nil, nil, fmt.Errorf("actor: message name must be 1..255 bytes, got %d", len(msg.Name))
	}
	ct := msg.ContentType
	if ct == "" {
		ct = "application/octet-stream"
	}
	sc = sendScratchPool.Get().(*sendScratch)
	sc.body = wire.ActorSend{TargetActor: FenceToWire(to)}
	if from != nil {
		sc.body.SourceActor = wire.ActorRef{ID: from.ID, Generation: from.ObjectGeneration}
	}
	if req != nil {
		sc.body.Operation = wire.OperationID{High: requestOperation, Low: req.corr}
	}
	sc.payload = wire.Payload{PacketName: msg.Name, ContentType: ct, Data: msg.Data}
	sc.rec = wire.Record{Body: &sc.body, Payload: &sc.payload}
	return &sc.rec, sc, nil
}

// requestOperation is the operation id's high word of an Actor request (its low word
// is the requester's correlation); a one-way message has no operation id.
const requestOperation = 1

// inboundSend is an Actor message that arrived as record 24.
type inboundSend struct {
	to   RouteFence
	msg  *Message
	from *Ref
	corr uint64 // the requester's correlation; 0 for a one-way message
}

// decodeActorSend reads an inbound record 24.
func decodeActorSend(rec *wire.Record) (inboundSend, bool) {
	body, ok := rec.Body.(*wire.ActorSend)
	if !ok || rec.Payload == nil {
		return inboundSend{}, false
	}
	in := inboundSend{
		to:  FenceFromWire(body.TargetActor),
		msg: &Message{Name: rec.Payload.PacketName, ContentType: rec.Payload.ContentType, Data: rec.Payload.Data},
	}
	if body.SourceActor.ID != "" {
		in.from = &Ref{ID: body.SourceActor.ID, ObjectGeneration: body.SourceActor.Generation}
	}
	if body.Operation.High == requestOperation {
		in.corr = body.Operation.Low
	}
	return in, true
}
