package wire_test

import (
	"fmt"

	"github.com/meshnode/meshnode/mesh/wire"
)

// An Actor message (command 24) encoded into its frames and decoded back.
func ExampleEncode() {
	rec := &wire.Record{
		Body: &wire.ActorSend{
			TargetActor: wire.ActorRouteFence{
				Actor:                            wire.ActorRef{ID: "room-1", Generation: 1},
				TargetNodeRID:                    "node-a",
				TargetNodeGeneration:             7,
				ExpectedAuthorityOwnerGeneration: 1,
				ExpectedOwnerLeaseGeneration:     1,
			},
		},
		Metadata: wire.Metadata{{Key: "trace", Value: "abc"}},
		Payload:  &wire.Payload{PacketName: "chat.say", ContentType: "application/json", Data: []byte(`"hi"`)},
	}
	frames, err := wire.Encode(rec)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(len(frames), "frames") // head+body, metadata, payload envelope

	got, err := wire.Decode(frames)
	if err != nil {
		fmt.Println(err)
		return
	}
	send := got.Body.(*wire.ActorSend)
	trace, _ := got.Metadata.Get("trace")
	fmt.Println(got.Command(), send.TargetActor.Actor.ID, send.TargetActor.TargetNodeRID, trace)
	fmt.Println(got.Payload.PacketName, got.Payload.ContentType, string(got.Payload.Data))
	// Output:
	// 3 frames
	// actorSend room-1 node-a abc
	// chat.say application/json "hi"
}
