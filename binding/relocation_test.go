package binding_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/meshnode/actor"
	"github.com/meshnode/meshnode/binding"
	"github.com/meshnode/meshnode/internal/testkit"
	"github.com/meshnode/meshnode/mesh"
	"github.com/meshnode/meshnode/mesh/wire"
	"github.com/meshnode/meshnode/session/connector"
	swire "github.com/meshnode/meshnode/session/wire"
	"github.com/meshnode/meshnode/test/fleet"
)

// The session owner's side of a relocation, against a real session: node 0 owns the
// session, node 1 hosts the bound probe Actor and plays the relocation's source (42,
// 44 abort). Until the Actor host moves Actors, node 1 also plays the target of the
// commit (44), which names the same activation under a new authority owner generation:
// the relays the commit releases then reach an Actor the test can watch, and its
// replies carry the activation's previous fence, as replies sent before a move do.

type relocFixture struct {
	f     *fleet.Fleet
	c     *connector.Connector
	id    string
	s     *binding.Session
	bound binding.Binding
}

func startRelocation(t *testing.T, opts binding.Options) *relocFixture {
	t.Helper()
	f := fleet.Start(t, 2, fleet.Options{Binding: opts})
	x := &relocFixture{f: f, id: f.IDOn(t, "probe", 1, "reloc-"), c: f.Connect(t, 0)}
	ctx, cancel := context.WithTimeout(context.Background(), fleet.Wait)
	defer cancel()
	var out map[string]any
	if err := x.c.Request(ctx, "bind", map[string]string{"actor": x.id, "kind": "probe"}, &out); err != nil {
		t.Fatalf("bind: %v", err)
	}
	ss := f.Binder(0).SessionsForTest()
	if len(ss) != 1 {
		t.Fatalf("%d sessions on the session owner", len(ss))
	}
	x.s = ss[0]
	var ok bool
	if x.bound, ok = x.s.Binding(x.id); !ok || x.bound.Actor.Node != f.Node(1).ID() {
		t.Fatalf("binding %+v %v: want one on node 1", x.bound, ok)
	}
	return x
}

func (x *relocFixture) stats() binding.Stats { return x.f.Binder(0).Stats() }

func (x *relocFixture) coordinator() wire.CoordinatorFence {
	src := x.f.Node(1).ID()
	return wire.CoordinatorFence{OwnerID: "meshnode-relocation", LeaseGeneration: 1, NodeRID: src.RID, NodeGeneration: src.Generation,
		ExpectedAuthorityStoreVersion: "v1"}
}

func (x *relocFixture) sessionFence() wire.SessionFence {
	owner := x.f.Node(0).ID()
	return wire.SessionFence{OwnerNodeRID: owner.RID, OwnerNodeGeneration: owner.Generation, OwnerID: binding.DefaultOwnerID,
		OwnerLeaseGeneration: owner.Generation, SessionRID: x.s.RIDForTest(), BindingGeneration: x.bound.BindingGeneration}
}

// seal is the 42 the source sends.
func (x *relocFixture) seal(id wire.RelocationID) *wire.Record {
	return &wire.Record{Body: &wire.SessionRelocationSeal{Relocation: id, Coordinator: x.coordinator(), SenderRole: wire.RoleSource,
		Actor: actor.FenceToWire(x.bound.Actor), Session: x.sessionFence()}}
}

// commit is the 44 commit that names node 1 under authority owner generation auth.
func (x *relocFixture) commit(id wire.RelocationID, auth uint64) *wire.Record {
	src := x.bound.Actor
	return &wire.Record{Body: &wire.SessionRelocationRoute{Relocation: id, Coordinator: x.coordinator(), SenderRole: wire.RoleTarget,
		Actor: wire.ActorRef{ID: src.ID, Generation: src.ObjectGeneration}, Session: x.sessionFence(),
		Route: wire.RouteUpdate{Commit: &wire.RouteCommit{PreviousAuthorityOwnerGeneration: src.AuthorityOwnerGeneration,
			TargetAuthorityOwnerGeneration: auth, TargetNodeRID: src.Node.RID, TargetNodeGeneration: src.Node.Generation,
			TargetOwnerLeaseGeneration: src.OwnerLeaseGeneration}}}}
}

// abort is the 44 abort the source sends.
func (x *relocFixture) abort(id wire.RelocationID) *wire.Record {
	src := x.bound.Actor
	return &wire.Record{Body: &wire.SessionRelocationRoute{Relocation: id, Coordinator: x.coordinator(), SenderRole: wire.RoleSource,
		Actor: wire.ActorRef{ID: src.ID, Generation: src.ObjectGeneration}, Session: x.sessionFence(),
		Route: wire.RouteUpdate{Abort: &wire.RouteAbort{CurrentAuthorityOwnerGeneration: src.AuthorityOwnerGeneration}}}}
}

// fromActorNode sends rec from node 1 to the session owner's record receiver.
func (x *relocFixture) fromActorNode(t *testing.T, rec *wire.Record) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), fleet.Wait)
	defer cancel()
	if err := x.f.Node(1).Mesh().Records().Send(ctx, x.f.Node(0).ID(), rec); err != nil {
		t.Fatal(err)
	}
}

// meta sends the Send room.meta with metadata n=i: the probe records it as
// "meta request=false n=i".
func (x *relocFixture) meta(t *testing.T, i int) {
	t.Helper()
	if err := x.c.Send(t.Context(), "room.meta", map[string]int{}, connector.WithMetadata("n", strconv.Itoa(i))); err != nil {
		t.Fatal(err)
	}
}

// echo sends the Request room.echo; its outcome arrives on the returned channel. The
// goroutine is the test's: it ends with the request, which the fleet's wait bounds.
func (x *relocFixture) echo(t *testing.T) <-chan error {
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), fleet.Wait)
		defer cancel()
		var out map[string]any
		done <- x.c.Request(ctx, "room.echo", map[string]int{"n": 0}, &out)
	}()
	return done
}

// seen returns the relays the Actor took, in order: its meta records and echoes.
func (x *relocFixture) seen() []string {
	var out []string
	for _, e := range x.f.Ev.Of(x.id) {
		if strings.HasPrefix(e, "meta ") || e == "relayed:room.echo" {
			out = append(out, e)
		}
	}
	return out
}

func metaSeen(i int) string { return "meta request=false n=" + strconv.Itoa(i) }

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testkit.Eventually(t, fleet.Wait, what, cond)
}

// A 42 seals the binding: relays to that Actor are held (counted in the window, not
// sent). The 44 commit switches the route and sends the held relays, in order, before
// any later relay; the reply the Actor sends from its previous fence still completes
// the Request relayed before the commit.
func TestRelocation_SealHoldsRelaysCommitFlushesThemInOrder(t *testing.T) {
	x := startRelocation(t, binding.Options{})
	id := wire.RelocationID{High: 1, Low: 1}
	x.fromActorNode(t, x.seal(id))
	eventually(t, "seal installed", func() bool { return x.stats().RelocationSeals == 1 })
	for i := 1; i <= 3; i++ {
		x.meta(t, i)
	}
	echo := x.echo(t)
	eventually(t, "four relays held", func() bool { return x.stats().Held == 4 })
	if got := x.seen(); len(got) != 0 {
		t.Fatalf("the Actor took relays while its binding was sealed: %v", got)
	}
	if st := x.stats(); st.Relayed < 4 || st.RelayedRequests != 1 {
		t.Fatalf("held relays not counted in the window and pending requests: %+v", st)
	}

	auth := x.bound.Actor.AuthorityOwnerGeneration + 1
	x.fromActorNode(t, x.commit(id, auth))
	eventually(t, "route committed, held relays flushed", func() bool {
		st := x.stats()
		return st.RelocationCommits == 1 && st.Held == 0
	})
	if err := testkit.Await(t, echo, fleet.Wait, "reply to the held Request"); err != nil {
		t.Fatalf("held Request: %v", err)
	}
	x.meta(t, 4)
	want := []string{metaSeen(1), metaSeen(2), metaSeen(3), "relayed:room.echo", metaSeen(4)}
	eventually(t, "held relays in order, then the later one", func() bool { return slices.Equal(x.seen(), want) })
	if bd, ok := x.s.Binding(x.id); !ok || bd.Actor.AuthorityOwnerGeneration != auth || bd.Actor.Node != x.f.Node(1).ID() ||
		bd.BindingGeneration != x.bound.BindingGeneration {
		t.Fatalf("binding after the commit %+v %v: want the same binding at the committed route", bd, ok)
	}
	// The commit again is a duplicate: nothing changes.
	x.fromActorNode(t, x.commit(id, auth))
	x.fromActorNode(t, x.commit(id, auth+1)) // same relocation, other content
	eventually(t, "conflicting commit refused", func() bool { return x.stats().RelocationProtocolErrors == 1 })
	if st := x.stats(); st.RelocationCommits != 1 || st.LateRouteUpdates != 0 {
		t.Fatalf("duplicate commits changed something: %+v", st)
	}
}

// A 44 abort releases the seal and sends the held relays to the source route, which
// did not change.
func TestRelocation_AbortSendsHeldRelaysToTheSource(t *testing.T) {
	x := startRelocation(t, binding.Options{})
	id := wire.RelocationID{High: 2, Low: 1}
	x.fromActorNode(t, x.seal(id))
	eventually(t, "seal installed", func() bool { return x.stats().RelocationSeals == 1 })
	x.meta(t, 1)
	eventually(t, "relay held", func() bool { return x.stats().Held == 1 })
	x.fromActorNode(t, x.abort(id))
	eventually(t, "abort applied, held relay delivered at the source", func() bool {
		return x.stats().RelocationAborts == 1 && slices.Equal(x.seen(), []string{metaSeen(1)})
	})
	if bd, _ := x.s.Binding(x.id); bd.Actor != x.bound.Actor {
		t.Fatalf("abort moved the route: %+v, was %+v", bd.Actor, x.bound.Actor)
	}
	// Another relocation's abort is stale: a warning, no effect.
	x.fromActorNode(t, x.abort(wire.RelocationID{High: 2, Low: 2}))
	eventually(t, "other relocation's abort counted late", func() bool { return x.stats().LateRouteUpdates == 1 })
}

// §7.18 "no 44 within 3,000 ms": the session is closed (ServerDrain) and the held
// relays are never delivered; a 44 after that is a late route update.
func TestRelocation718_NoCommitWithinSealTimeoutClosesSessionHeldNeverDelivered(t *testing.T) {
	x := startRelocation(t, binding.Options{SessionRelocationSealTimeout: time.Second})
	id := wire.RelocationID{High: 3, Low: 1}
	x.fromActorNode(t, x.seal(id))
	eventually(t, "seal installed", func() bool { return x.stats().RelocationSeals == 1 })
	echo := x.echo(t)
	err := testkit.Await(t, echo, fleet.Wait, "the held Request to fail with the session")
	var re *connector.RemoteError
	if err == nil || errors.As(err, &re) {
		// An Error reply would mean it was refused, not held and dropped with the session.
		t.Fatalf("held Request: %v, want the connection's failure", err)
	}
	eventually(t, "session closed", func() bool { return x.c.State() != connector.StateConnected })
	if r := x.c.CloseReason(); r != swire.CloseServerDrain {
		t.Errorf("close reason %v, want ServerDrain", r)
	}
	if st := x.stats(); st.SealTimeouts != 1 || st.Held != 0 {
		t.Fatalf("after the seal timeout: %+v", st)
	}
	if got := x.seen(); len(got) != 0 {
		t.Fatalf("held relays delivered after the seal timeout: %v", got)
	}
	x.fromActorNode(t, x.commit(id, x.bound.Actor.AuthorityOwnerGeneration+1))
	eventually(t, "late commit counted", func() bool { return x.stats().LateRouteUpdates == 1 })
	if got := x.seen(); len(got) != 0 {
		t.Fatalf("late commit delivered relays: %v", got)
	}
}

// A duplicate 42 is answered again without a second transition; the same relocation
// with other content is refused; a seal from a node the binding does not route to is
// stale. Other Actors of the session are not sealed.
func TestRelocation_DuplicateAndForeignSeals(t *testing.T) {
	x := startRelocation(t, binding.Options{})
	id := wire.RelocationID{High: 4, Low: 1}
	x.f.Tap().Reset()
	x.fromActorNode(t, x.seal(id))
	x.fromActorNode(t, x.seal(id))
	sealedAtSource := func() int {
		n := 0
		for _, r := range x.f.Tap().Records() {
			if r.Command == wire.CmdSessionRelocationSealed && r.To == x.f.Node(1).ID() && r.Direction == mesh.Inbound {
				n++
			}
		}
		return n
	}
	eventually(t, "both seals answered", func() bool { return sealedAtSource() == 2 })
	if st := x.stats(); st.RelocationSeals != 1 {
		t.Fatalf("%d seals installed, want 1", st.RelocationSeals)
	}
	conflicting := x.seal(id)
	conflicting.Body.(*wire.SessionRelocationSeal).Actor.ExpectedAuthorityOwnerGeneration++
	x.fromActorNode(t, conflicting)
	eventually(t, "conflicting seal refused", func() bool { return x.stats().RelocationProtocolErrors == 1 })

	// Node 0 does not host the Actor: its seal is stale, and unanswered.
	ctx, cancel := context.WithTimeout(context.Background(), fleet.Wait)
	defer cancel()
	other := x.seal(wire.RelocationID{High: 4, Low: 2})
	if err := x.f.Node(0).Mesh().Records().Send(ctx, x.f.Node(0).ID(), other); err != nil {
		t.Fatal(err)
	}
	eventually(t, "foreign seal stale", func() bool { return x.stats().StaleSeals == 1 })
	if n := sealedAtSource(); n != 2 {
		t.Fatalf("%d seals answered, want 2", n)
	}
}
