package binding_test

import (
	"context"
	"testing"
	"time"

	"github.com/meshnode/meshnode/actor"
	"github.com/meshnode/meshnode/mesh/meshpb"
	"github.com/meshnode/meshnode/mesh/meshtest"
	"github.com/meshnode/meshnode/mesh/wire"
	"github.com/meshnode/meshnode/test/fleet"
)

// Forged or stale 36 and 51 records are rejected before any application code, counted,
// and never reach or close the current session.
func TestBadInput_ForgedPushAndReplacementRejected(t *testing.T) {
	f := fleet.Start(t, 2, fleet.Options{})
	id := f.IDOn(t, "room", 1, "forge-")
	c := f.Connect(t, 0)
	said := pushes(c, "room.said")
	replaced := pushes(c, "room.replaced")
	br := mustBind(t, c, id, "room")
	fence, err := f.Actors(1).Lookup(context.Background(), "room", id)
	if err != nil {
		t.Fatal(err)
	}
	owner, actorNode := f.Node(0).ID(), f.Node(1).Mesh()
	send := func(rec *wire.Record) {
		frames, err := wire.Encode(rec)
		if err != nil {
			t.Fatal(err)
		}
		from := actorNode.ID()
		meshtest.SendEnvelope(actorNode, f.Node(0).Mesh().RemoteAddr(), meshtest.RecordsActor, &meshpb.Envelope{FromRid: from.RID, FromGeneration: from.Generation,
			ToRid: owner.RID, ToGeneration: owner.Generation, Frames: frames})
	}
	push := func(fence actor.RouteFence, gen uint64) *wire.Record {
		return &wire.Record{
			Body:    &wire.BoundSessionSend{Actor: actor.FenceToWire(fence), ExpectedBindingGeneration: gen},
			Payload: &wire.Payload{PacketName: "room.said", ContentType: "application/json", Data: []byte(`{"forged":true}`)},
		}
	}
	wrongObj := fence
	wrongObj.ObjectGeneration++
	wrongAuth := fence
	wrongAuth.AuthorityOwnerGeneration++
	send(push(fence, br.BindingGeneration+1000)) // wrong binding generation
	send(push(wrongObj, br.BindingGeneration))   // wrong object generation
	send(push(wrongAuth, br.BindingGeneration))  // wrong authority owner generation
	retired := wire.SessionFence{OwnerNodeRID: owner.RID, OwnerNodeGeneration: owner.Generation, OwnerID: "meshnode-session",
		OwnerLeaseGeneration: owner.Generation, SessionRID: "s999999", BindingGeneration: br.BindingGeneration}
	send(&wire.Record{Body: &wire.BoundSessionReplaced{ActorAuthority: actor.FenceToWire(fence), RetiredSession: retired}}) // wrong session RID
	stale := retired
	stale.OwnerNodeGeneration--
	send(&wire.Record{Body: &wire.BoundSessionReplaced{ActorAuthority: actor.FenceToWire(fence), RetiredSession: stale}}) // old node generation
	eventually(t, "forged records counted", func() bool {
		p, _, r, _ := f.Binder(0).Drops()
		return p == 3 && r == 2
	})
	// The current session is untouched: a real push still arrives, nothing forged did.
	if err := c.Send(t.Context(), "room.say", map[string]int{"real": 1}); err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-said:
		if string(p) != `{"real":1}` {
			t.Fatalf("session received %s", p)
		}
	case <-time.After(wait):
		t.Fatal("real push lost")
	}
	select {
	case p := <-replaced:
		t.Fatalf("forged 51 replaced the session: %s", p)
	default:
	}
	var out echoReply
	if err := request(t, c, "room.echo", map[string]int{}, &out); err != nil {
		t.Fatalf("session disturbed: %v", err)
	}
}

// A forged relay (24) from a node that holds no binding is rejected by the Actor owner
// before the Actor runs.
func TestBadInput_ForgedRelayRejected(t *testing.T) {
	f := fleet.Start(t, 3, fleet.Options{})
	id := f.IDOn(t, "probe", 1, "fr-")
	c := f.Connect(t, 0)
	br := mustBind(t, c, id, "probe")
	fence, err := f.Actors(1).Lookup(context.Background(), "probe", id)
	if err != nil {
		t.Fatal(err)
	}
	forger := f.Node(2).ID()
	rec := &wire.Record{
		Body: &wire.ActorSend{TargetActor: actor.FenceToWire(fence),
			BoundSession: &wire.BoundSessionTail{SourceSessionRID: "s1", SourceBindingGeneration: br.BindingGeneration, SourceSessionSequence: 1}},
		Payload: &wire.Payload{PacketName: "room.say", ContentType: "application/json", Data: []byte(`{}`)},
	}
	frames, err := wire.Encode(rec)
	if err != nil {
		t.Fatal(err)
	}
	target := f.Node(1).ID()
	env := &meshpb.Envelope{FromRid: forger.RID, FromGeneration: forger.Generation,
		ToRid: target.RID, ToGeneration: target.Generation, Frames: frames}
	// Addressed to the activation (as real relays are): judged against its binding.
	meshtest.SendEnvelope(f.Node(2).Mesh(), f.Node(1).Mesh().RemoteAddr(), actor.ActivationName(fence.Ref), env)
	eventually(t, "forged relay dropped by the Actor owner", func() bool {
		_, r, _, _ := f.Binder(1).Drops()
		return r == 1
	})
	// Addressed to the node's record receiver: dropped there too.
	meshtest.SendEnvelope(f.Node(2).Mesh(), f.Node(1).Mesh().RemoteAddr(), meshtest.RecordsActor, env)
	var out echoReply
	if err := request(t, c, "room.echo", map[string]int{}, &out); err != nil {
		t.Fatal(err)
	}
	if n := f.Ev.Count(id, "relayed:room.say"); n != 0 {
		t.Fatalf("forged relay reached the Actor %d times", n)
	}
}
