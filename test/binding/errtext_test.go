package binding_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"

	"github.com/meshnode/meshnode"
	"github.com/meshnode/meshnode/actor"
	"github.com/meshnode/meshnode/fault"
	"github.com/meshnode/meshnode/test/fleet"
)

// failer answers a request (an Actor request, or a relayed session Request) named
// "fail" or "room.fail" whose payload is a fault kind number with an error of that kind.
type failer struct{}

func (failer) Receive(ctx *actor.Context) {
	var data []byte
	switch m := ctx.Message().(type) {
	case *actor.Message:
		data = m.Data
	case *actor.SessionPacket:
		data = m.Payload
	default:
		return
	}
	n, err := strconv.Atoi(string(data))
	if err != nil {
		_ = ctx.ReplyError(fault.Errorf(fault.InvalidOperation, "failer: %q is not a kind", data))
		return
	}
	k := fault.Kind(n)
	_ = ctx.ReplyError(fault.Errorf(k, "failer %s: asked to fail with %s", ctx.Self().ID, k.Code()))
}

// Issue 25, item 4: an error that crosses nodes reads as one message, naming what was
// asked for, and keeps its kind. Every fault kind is walked through an Actor request
// and a relayed session Request to another node; the directory's errors are asked of a
// node that is not their holder; a relay without a binding says so.
func TestIssue25_ErrorTextAcrossNodes(t *testing.T) {
	f := fleet.Start(t, 3, fleet.Options{Config: func(cfg *meshnode.Config) {
		cfg.Kinds = append(cfg.Kinds, actor.Kind{Name: "failer", New: func() actor.Actor { return failer{} }})
	}})
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	id := f.IDOn(t, "failer", 1, "failer-")
	c := f.Connect(t, 0)
	mustBind(t, c, id, "failer")
	for k := fault.NotFound; k <= fault.InternalFailure; k++ {
		want := fmt.Sprintf("failer %s: asked to fail with %s", id, k.Code())
		_, err := f.Actors(0).Request(ctx, actor.Address{Kind: "failer", ID: id},
			actor.Message{Name: "fail", ContentType: "text/plain", Data: []byte(strconv.Itoa(int(k)))})
		if !errors.Is(err, k) || err.Error() != want {
			t.Errorf("Actor request failing with %s: %q (kind %v), want %q", k, err, fault.Code(err), want)
		}
		// Over STREAM an internal failure's text stays on the server (fault.Public).
		wantCode, wantText := k.Code(), want
		if k == fault.InternalFailure {
			wantText = fault.InternalMessage
		}
		_, err = c.RequestRaw(ctx, "room.fail", 0, []byte(strconv.Itoa(int(k))))
		if got := remoteCode(err); got != wantCode || remoteMessage(err) != wantText {
			t.Errorf("relayed request failing with %s: %s %q, want %s %q", k, got, remoteMessage(err), wantCode, wantText)
		}
	}

	// The directory, asked from every node (the holder of the id is one of them).
	room := f.IDOn(t, "room", 1, "room-")
	for i := 0; i < 3; i++ {
		_, err := f.Actors(i).Lookup(ctx, "nope", "x")
		if want := `actor: unknown kind: "nope"`; !errors.Is(err, actor.ErrUnknownKind) || err.Error() != want {
			t.Errorf("lookup of an unknown kind from node %d: %q, want %q", i, err, want)
		}
	}
	check := func(what string, err, is error, want string) {
		t.Helper()
		if !errors.Is(err, is) || err.Error() != want {
			t.Errorf("%s: %q, want %q", what, err, want)
		}
	}
	_, err := f.Actors(0).Relocate(ctx, room, f.Node(1).ID().RID)
	check("relocate to where it is", err, actor.ErrAlreadyThere,
		fmt.Sprintf("actor: the Actor is already on that node: %s is on %s", room, f.Node(1).ID().RID))
	_, err = f.Actors(0).Relocate(ctx, room, "nowhere")
	check("relocate to an unknown node", err, actor.ErrUnknownNode, `actor: no such node: "nowhere"`)
	_, err = f.Actors(0).Request(ctx, actor.Address{Kind: "nope", ID: "x"}, actor.Message{Name: "x"})
	check("request to an unknown kind", err, actor.ErrUnknownKind, `actor: unknown kind: "nope"`)

	// A session that has no binding relays to nothing, and is told so plainly.
	unbound := f.Connect(t, 2)
	err = request(t, unbound, "room.echo", map[string]int{}, nil)
	if want := "binding: the session is not bound to any Actor; bind one first"; remoteCode(err) != fault.InvalidOperation.Code() || remoteMessage(err) != want {
		t.Errorf("relay without a binding: %v, want invalid_operation %q", err, want)
	}
	mustBind(t, unbound, room, "room")
	if err := request(t, unbound, "unbind", map[string]string{"actor": room}, nil); err != nil {
		t.Fatal(err)
	}
	err = request(t, unbound, "room.echo", map[string]int{}, nil)
	if want := "binding: the session unbound " + room + "; bind it again to relay to it"; remoteCode(err) != fault.InvalidOperation.Code() || remoteMessage(err) != want {
		t.Errorf("relay after unbinding: %v, want invalid_operation %q", err, want)
	}
	_, err = bind(t, unbound, "x", "nope")
	if want := `actor: unknown kind: "nope"`; remoteCode(err) != fault.NotFound.Code() || remoteMessage(err) != want {
		t.Errorf("bind of an unknown kind: %v, want not_found %q", err, want)
	}
}

// Issue 30, item 4: once the node of a bound Actor failed, a relay to it fails with
// one retryable code (unavailable) whose message says the binding ended and why, not
// as a caller error; binding again places the Actor on a survivor.
func TestIssue30_RelayAfterTheActorsNodeFailedIsUnavailable(t *testing.T) {
	f := fleet.Start(t, 3, fleet.Options{})
	id := f.IDOn(t, "room", 1, "room-")
	c := f.Connect(t, 0)
	mustBind(t, c, id, "room")
	echo(t, c)
	rid := f.Node(1).ID().RID
	f.Kill(1)
	eventually(t, "node 0 saw node 1 fail", func() bool { return f.Binder(0).Stats().Bindings == 0 })
	err := request(t, c, "room.echo", map[string]int{}, nil)
	want := fmt.Sprintf("binding: the session's binding of %s ended: the node of the bound Actor (%s) failed; bind it again", id, rid)
	if remoteCode(err) != fault.Unavailable.Code() || remoteMessage(err) != want {
		t.Fatalf("relay after the Actor's node failed: %v, want unavailable %q", err, want)
	}
	// Binding again places the room on a survivor, once the directory has failed the
	// dead node's entries over (until then a bind is unavailable too: retryable).
	eventually(t, "binding again succeeds", func() bool {
		_, err := bind(t, c, id, "room")
		return err == nil
	})
	if got := echo(t, c); got.Node == rid {
		t.Fatalf("echo after binding again %+v", got)
	}
}
