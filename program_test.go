package meshnode_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/meshnode"
	"github.com/meshnode/meshnode/actor"
	"github.com/meshnode/meshnode/fault"
)

// Issue 25, item 7: what a program (not a test kit) needs to run a fleet of its own,
// on the Node API: the address another node joins (MeshAddr), a wait for the fleet's
// members (WaitMembers), and a look-up of where an Actor lives that does not activate
// it (Where).
func TestNode_ProgramAPI_MeshAddrWaitMembersWhere(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	kinds := []actor.Kind{{Name: "answerer", New: func() actor.Actor { return answerer{} }}}
	first := quiet(meshnode.TestConfig())
	first.Kinds = kinds
	a, err := meshnode.Start(ctx, first)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if a.MeshAddr() == "" || a.MeshAddr() != a.Mesh().MeshAddr() {
		t.Fatalf("MeshAddr %q", a.MeshAddr())
	}
	// Nobody else yet: a wait for two members ends with its context, saying so.
	short, cancelShort := context.WithTimeout(ctx, 50*time.Millisecond)
	err = a.WaitMembers(short, 2)
	cancelShort()
	if !errors.Is(err, fault.DeadlineExceeded) || err.Error() != "mesh: 1 of the 2 members waited for are live: context deadline exceeded" {
		t.Fatalf("WaitMembers(2) alone: %v", err)
	}

	second := quiet(meshnode.TestConfig())
	second.Kinds = kinds
	second.Join = []string{a.MeshAddr()}
	b, err := meshnode.Start(ctx, second)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for _, n := range []*meshnode.Node{a, b} {
		if err := n.WaitMembers(ctx, 2); err != nil {
			t.Fatal(err)
		}
	}

	// Where does not activate: an Actor nobody used is not found, and stays inactive.
	if _, _, err := b.Where(ctx, "a-1"); !errors.Is(err, actor.ErrNotFound) {
		t.Fatalf("Where of an inactive Actor: %v, want actor.ErrNotFound", err)
	}
	if n := len(a.Actors().Active()) + len(b.Actors().Active()); n != 0 {
		t.Fatalf("Where activated %d Actors", n)
	}
	placed, err := a.Actors().Lookup(ctx, "answerer", "a-1")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []*meshnode.Node{a, b} {
		kind, at, err := n.Where(ctx, "a-1")
		if err != nil || kind != "answerer" || at != placed {
			t.Fatalf("Where from %s: %s %v %v, want answerer at %v", n.ID().RID, kind, at, err, placed)
		}
	}
}

// Issue 30, item 1: a drain that cannot move an Actor does not drop its state: Drain
// returns ErrDrainIncomplete naming it, and the node keeps running and serving it.
func TestNode_DrainThatCannotMoveAnActorKeepsTheNodeRunning(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	first := quiet(meshnode.TestConfig())
	a, err := meshnode.Start(ctx, first)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	second := quiet(meshnode.TestConfig()) // only this node hosts kind "solo"
	second.Kinds = []actor.Kind{{Name: "solo", New: func() actor.Actor { return answerer{} }}}
	second.Join = []string{a.MeshAddr()}
	b, err := meshnode.Start(ctx, second)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.WaitMembers(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Actors().LookupOn(ctx, "solo", "s-1", b.ID().RID); err != nil {
		t.Fatal(err)
	}
	moved, err := b.Drain(ctx)
	if moved != 0 || !errors.Is(err, meshnode.ErrDrainIncomplete) || !errors.Is(err, actor.ErrUnknownKind) ||
		!strings.Contains(err.Error(), "s-1") {
		t.Fatalf("drain toward a node without the kind: moved %d, %v", moved, err)
	}
	v, err := b.Actors().Request(ctx, actor.Address{Kind: "solo", ID: "s-1"}, actor.Message{Name: "say", Data: []byte("still here")})
	if m, ok := v.(*actor.Message); err != nil || !ok || string(m.Data) != "still here" {
		t.Fatalf("the Actor after the incomplete drain: %v %v", v, err)
	}
}
