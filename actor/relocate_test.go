package actor_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshnode/meshnode"
	"github.com/meshnode/meshnode/actor"
	"github.com/meshnode/meshnode/fault"
	"github.com/meshnode/meshnode/internal/nodert"
	proto "github.com/meshnode/meshnode/internal/protoactor/actor"
	"github.com/meshnode/meshnode/mesh/meshpb"
	"github.com/meshnode/meshnode/mesh/meshtest"
)

// Relocation and the authoritative directory, through the Actor host's public surface.

type Add struct{ N int }
type Get struct{}
type Count struct {
	N     int
	Moved bool
}

// Block makes the counter's turn wait until the channel registered for the test closes.
type Block struct{}

var counterMessages = []actor.MessageType{
	actor.MessageOf[Add]("reloc.add"),
	actor.MessageOf[Get]("reloc.get"),
	actor.MessageOf[Count]("reloc.count"),
	actor.MessageOf[Block]("reloc.block"),
}

type counterState struct {
	N int
}

// counter counts what it was added; the "counter" kind moves its state, "fresh" does
// not.
type counter struct {
	st    counterState
	moved bool
	block <-chan struct{}
	// linger, when set, is what the Actor's Stopping turn waits for (an Actor that
	// takes its time to stop).
	linger <-chan struct{}
	// stops is told each Stopping's Moved.
	stops chan<- bool
}

func (c *counter) Receive(ctx *actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		c.moved = m.Moved
	case *Add:
		c.st.N += m.N
	case *Get:
		_ = ctx.Reply(&Count{N: c.st.N, Moved: c.moved})
	case *Block:
		<-c.block
	case *actor.Stopping:
		select {
		case c.stops <- m.Moved:
		default:
		}
		if c.linger != nil {
			<-c.linger
		}
	}
}

type relocCluster struct {
	*meshtest.Cluster
	block  chan struct{}
	linger chan struct{} // the "lingering" kind's Stopping turns wait for it
	stops  chan bool     // each counter's Stopping says whether it moved away
}

func (c *relocCluster) host(i int) *actor.Host { return c.Node(i).Actors() }

func startReloc(t *testing.T, n int) *relocCluster {
	c := &relocCluster{block: make(chan struct{}), linger: make(chan struct{}), stops: make(chan bool, 64)}
	c.Cluster = meshtest.Start(t, n, meshtest.Options{Config: func(i int, cfg *meshnode.Config) {
		cfg.Messages = counterMessages
		cfg.Kinds = []actor.Kind{
			{Name: "counter", New: func() actor.Actor { return &counter{block: c.block, stops: c.stops} },
				State: func(a actor.Actor) any { return &a.(*counter).st }},
			{Name: "fresh", New: func() actor.Actor { return &counter{block: c.block} }},
			{Name: "lingering", New: func() actor.Actor { return &counter{block: c.block, linger: c.linger} },
				State: func(a actor.Actor) any { return &a.(*counter).st }},
		}
		if i == 2 {
			// Node 2 hosts only counters: a move of another kind there is refused.
			cfg.Kinds = cfg.Kinds[:1]
		}
	}})
	// Registered after the cluster's own clean-up, so it runs first: turns waiting on
	// these channels end before the nodes stop.
	t.Cleanup(func() {
		for _, ch := range []chan struct{}{c.block, c.linger} {
			select {
			case <-ch:
			default:
				close(ch)
			}
		}
	})
	return c
}

// nodeIndex returns the index of the node a fence names.
func (c *relocCluster) nodeIndex(t *testing.T, f actor.RouteFence) int {
	t.Helper()
	for _, i := range c.Running() {
		if c.Node(i).ID() == f.Node {
			return i
		}
	}
	t.Fatalf("%s is on no running node", f)
	return -1
}

func (c *relocCluster) count(t *testing.T, from int, to actor.Target) Count {
	t.Helper()
	v, err := c.host(from).Request(reqCtx(t), to, &Get{})
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	return *v.(*Count)
}

// placeThenMove activates addr on node 0, adds n to it and moves it to node 1; it
// returns its fence on node 0 and on node 1.
func (c *relocCluster) placeThenMove(t *testing.T, addr actor.Address, n int) (home, there actor.RouteFence) {
	t.Helper()
	ctx := reqCtx(t)
	home, err := c.host(0).LookupOn(ctx, addr.Kind, addr.ID, c.Node(0).ID().RID)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.host(0).Send(ctx, addr, &Add{N: n}); err != nil {
		t.Fatal(err)
	}
	there, err = c.host(0).Relocate(ctx, addr.ID, c.Node(1).ID().RID)
	if err != nil {
		t.Fatalf("move to node 1: %v", err)
	}
	return home, there
}

// activations counts the live activations of id on every running node, asked of each.
func (c *relocCluster) activations(id string) int {
	n := 0
	for _, i := range c.Running() {
		for _, a := range c.host(i).Active() {
			if a.ID == id {
				n++
			}
		}
	}
	return n
}

// An Actor moves with its state: same ActorId and ObjectGeneration, a new node and a
// higher authority owner generation; the directory, asked from every node, names the
// target; the source no longer hosts it; the Actor knows it moved.
func TestRelocation_StateMovesIdentityStays(t *testing.T) {
	c := startReloc(t, 3)
	ctx := reqCtx(t)
	addr := actor.Address{Kind: "counter", ID: "c1"}
	before, err := c.host(0).Lookup(ctx, addr.Kind, addr.ID)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 5; i++ {
		if err := c.host(0).Send(ctx, addr, &Add{N: i}); err != nil {
			t.Fatal(err)
		}
	}
	if got := c.count(t, 0, addr); got.N != 15 {
		t.Fatalf("count before the move %d, want 15", got.N)
	}
	src := c.nodeIndex(t, before)
	dst := (src + 1) % 3
	after, err := c.host(0).Relocate(ctx, addr.ID, c.Node(dst).ID().RID)
	if err != nil {
		t.Fatalf("relocate: %v", err)
	}
	if after.Ref != before.Ref || after.Node != c.Node(dst).ID() || after.AuthorityOwnerGeneration <= before.AuthorityOwnerGeneration {
		t.Fatalf("after the move %s, before %s", after, before)
	}
	for i := 0; i < 3; i++ {
		f, err := c.host(i).Lookup(ctx, addr.Kind, addr.ID)
		if err != nil {
			t.Fatal(err)
		}
		if f != after {
			t.Fatalf("node %d's directory says %s, want %s", i, f, after)
		}
	}
	if n := c.activations(addr.ID); n != 1 {
		t.Fatalf("%d activations after the move", n)
	}
	got := c.count(t, src, addr)
	if got.N != 15 || !got.Moved {
		t.Fatalf("count on the target %+v, want 15 and moved", got)
	}
	if s := c.host(src).Stats(); s.Moves != 1 {
		t.Fatalf("source counted %d moves", s.Moves)
	}
	// The activation left behind is told it moved away: it lives on at the target.
	select {
	case moved := <-c.stops:
		if !moved {
			t.Fatal("the source's Stopping does not say it moved away")
		}
	case <-time.After(wait):
		t.Fatal("the source's activation never stopped")
	}
}

// An Actor moved away and straight back finds the activation it left on its first
// node still stopping (here its Stopping turn takes its time, as one that flushes
// something would); that activation still holds the Actor's name there, so the move
// back waits for it to stop, then arrives with the state, instead of being refused.
func TestRelocation_MovedBackWhileItsFormerActivationStillStops(t *testing.T) {
	c := startReloc(t, 2)
	ctx := reqCtx(t)
	addr := actor.Address{Kind: "lingering", ID: "back-and-forth"}
	home, _ := c.placeThenMove(t, addr, 7)
	// The activation left on node 0 is in its Stopping turn until linger closes.
	back := make(chan error, 1)
	go func() {
		_, err := c.host(1).Relocate(ctx, addr.ID, c.Node(0).ID().RID)
		back <- err
	}()
	if err := c.WaitUntil(wait, func() bool { return c.host(0).Stats().StopWaits == 1 }); err != nil {
		select {
		case err := <-back:
			t.Fatalf("the move back ended without waiting for the former activation: %v", err)
		default:
		}
		t.Fatalf("the move back never waited for the former activation: %v (stats %+v)", err, c.host(0).Stats())
	}
	close(c.linger)
	if err := <-back; err != nil {
		t.Fatalf("move back to node 0: %v", err)
	}
	f, err := c.host(1).Lookup(ctx, addr.Kind, addr.ID)
	if err != nil {
		t.Fatal(err)
	}
	if f.Node != c.Node(0).ID() || f.Ref != home.Ref {
		t.Fatalf("after the move back the directory says %s, want %s on node 0", f, home.Ref)
	}
	if got := c.count(t, 1, addr); got.N != 7 || !got.Moved {
		t.Fatalf("count after the move back %+v, want 7 and moved", got)
	}
	if n := c.activations(addr.ID); n != 1 {
		t.Fatalf("%d activations after the move back", n)
	}
}

// A former activation that does not stop in time (its Stopping turn never ends) makes
// the move back fail with a clear error, within the move's bounds; the Actor stays
// where it was, with its state.
func TestRelocation_MoveBackRefusedWhileItsFormerActivationNeverStops(t *testing.T) {
	c := startReloc(t, 2)
	ctx := reqCtx(t)
	addr := actor.Address{Kind: "lingering", ID: "stuck-behind"}
	_, there := c.placeThenMove(t, addr, 3)
	_, err := c.host(1).Relocate(ctx, addr.ID, c.Node(0).ID().RID)
	if kind, _ := fault.Of(err); err == nil || kind != fault.Unavailable || !strings.Contains(err.Error(), "previous activation here has not stopped") {
		t.Fatalf("move back while the former activation never stops: %v, want its refusal (unavailable)", err)
	}
	if f, err := c.host(0).Lookup(ctx, addr.Kind, addr.ID); err != nil || f != there {
		t.Fatalf("after the refused move the directory says %s (%v), want %s", f, err, there)
	}
	if got := c.count(t, 0, addr); got.N != 3 {
		t.Fatalf("count after the refused move %+v, want 3", got)
	}
}

// A kind without State or Snapshotter starts fresh on the target (documented), with
// the same identity.
func TestRelocation_KindWithoutStateStartsFresh(t *testing.T) {
	c := startReloc(t, 2)
	ctx := reqCtx(t)
	addr := actor.Address{Kind: "fresh", ID: "f1"}
	if err := c.host(0).Send(ctx, addr, &Add{N: 7}); err != nil {
		t.Fatal(err)
	}
	if got := c.count(t, 0, addr); got.N != 7 {
		t.Fatalf("count %d", got.N)
	}
	before, _ := c.host(0).Lookup(ctx, addr.Kind, addr.ID)
	after, err := c.host(1).Relocate(ctx, addr.ID, c.Node(1-c.nodeIndex(t, before)).ID().RID)
	if err != nil {
		t.Fatal(err)
	}
	if after.Ref != before.Ref {
		t.Fatalf("identity changed: %s -> %s", before, after)
	}
	if got := c.count(t, 0, addr); got.N != 0 || !got.Moved {
		t.Fatalf("fresh kind after the move %+v, want 0 and moved", got)
	}
}

// Messages sent while the Actor moves (from every node, Sends and Requests, addressed
// by Address, so by a route cached before the move) are each processed exactly once:
// the counter equals what was added, and every request got exactly one answer.
func TestRelocation_MessagesDuringTheMoveProcessedOnce(t *testing.T) {
	c := startReloc(t, 3)
	ctx := reqCtx(t)
	addr := actor.Address{Kind: "counter", ID: "busy"}
	f, err := c.host(0).Lookup(ctx, addr.Kind, addr.ID)
	if err != nil {
		t.Fatal(err)
	}
	cur := c.nodeIndex(t, f)
	var added atomic.Int64
	var answered atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for from := 0; from < 3; from++ {
		wg.Add(1)
		go func(from int) {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if i%10 == 9 {
					if _, err := c.host(from).Request(ctx, addr, &Get{}); err != nil {
						t.Errorf("request from node %d during the moves: %v", from, err)
						return
					}
					answered.Add(1)
					continue
				}
				if err := c.host(from).Send(ctx, addr, &Add{N: 1}); err != nil {
					t.Errorf("send from node %d during the moves: %v", from, err)
					return
				}
				added.Add(1)
			}
		}(from)
	}
	for move := 0; move < 4; move++ {
		next := (cur + 1) % 3
		if _, err := c.host(move%3).Relocate(ctx, addr.ID, c.Node(next).ID().RID); err != nil {
			t.Errorf("move %d: %v", move, err)
			break
		}
		cur = next
	}
	close(stop)
	wg.Wait()
	if t.Failed() {
		return
	}
	want := int(added.Load())
	// Sends are one-way: wait until the last ones ran.
	if err := c.WaitUntil(wait, func() bool { return c.count(t, 0, addr).N == want }); err != nil {
		t.Fatalf("counter %d, added %d (%d requests answered)", c.count(t, 0, addr).N, want, answered.Load())
	}
	if n := c.activations(addr.ID); n != 1 {
		t.Fatalf("%d activations after the moves", n)
	}
}

// A message addressed to the Actor's old fence after the move reaches the target once
// (Message Follow); a request with the old fence is answered from the target.
func TestRelocation_MessageFollowForwardsTheOldFence(t *testing.T) {
	c := startReloc(t, 2)
	ctx := reqCtx(t)
	old, err := c.host(0).Lookup(ctx, "counter", "follow")
	if err != nil {
		t.Fatal(err)
	}
	src := c.nodeIndex(t, old)
	if _, err := c.host(0).Relocate(ctx, "follow", c.Node(1-src).ID().RID); err != nil {
		t.Fatal(err)
	}
	for from := 0; from < 2; from++ {
		if err := c.host(from).Send(ctx, old, &Add{N: 2}); err != nil {
			t.Fatalf("send to the old fence from node %d: %v", from, err)
		}
	}
	if err := c.WaitUntil(wait, func() bool { return c.count(t, 0, old).N == 4 }); err != nil {
		t.Fatalf("count through the old fence %d, want 4", c.count(t, 0, old).N)
	}
	if s := c.host(src).Stats(); s.Followed == 0 {
		t.Fatal("the source forwarded nothing")
	}
}

// Bad relocations are refused with typed errors and the Actor keeps serving where it
// is: to the node it is on, to an unknown node, of an Actor that is mid-move, of an
// unknown Actor, of a kind the target does not host.
func TestRelocation_BadRequestsAreRefused(t *testing.T) {
	c := startReloc(t, 3)
	ctx := reqCtx(t)
	f, err := c.host(0).LookupOn(ctx, "fresh", "here", c.Node(0).ID().RID)
	if err != nil {
		t.Fatal(err)
	}
	if f.Node != c.Node(0).ID() {
		t.Fatalf("placed on %s", f.Node)
	}
	if _, err := c.host(0).Relocate(ctx, "here", c.Node(0).ID().RID); !errors.Is(err, actor.ErrAlreadyThere) || !errors.Is(err, fault.InvalidOperation) {
		t.Fatalf("move to its own node: %v", err)
	}
	if _, err := c.host(1).Relocate(ctx, "here", "no-such-node"); !errors.Is(err, actor.ErrUnknownNode) || !errors.Is(err, fault.NotFound) {
		t.Fatalf("move to an unknown node: %v", err)
	}
	if _, err := c.host(0).Relocate(ctx, "never-activated", c.Node(1).ID().RID); !errors.Is(err, fault.NotFound) {
		t.Fatalf("move of an Actor that is not active: %v", err)
	}
	// Node 2 has no "fresh" kind: refused before relay-ready, the Actor serves at the source.
	if _, err := c.host(0).Relocate(ctx, "here", c.Node(2).ID().RID); !errors.Is(err, actor.ErrUnknownKind) {
		t.Fatalf("move to a node without the kind: %v", err)
	}
	if err := c.host(1).Send(ctx, f, &Add{N: 3}); err != nil {
		t.Fatal(err)
	}
	if got := c.count(t, 1, f); got.N != 3 || got.Moved {
		t.Fatalf("after a refused move %+v", got)
	}
	// Mid-move: two moves at once while the Actor's turn is blocked: one seals (and
	// times out behind the blocked turn), the other is refused at once.
	if err := c.host(0).Send(ctx, f, &Block{}); err != nil {
		t.Fatal(err)
	}
	results := make(chan error, 2)
	for k := 0; k < 2; k++ {
		go func() {
			_, err := c.host(0).Relocate(ctx, "here", c.Node(1).ID().RID)
			results <- err
		}()
	}
	first, second := <-results, <-results
	if !errors.Is(first, actor.ErrMoving) {
		first, second = second, first
	}
	if !errors.Is(first, actor.ErrMoving) || !errors.Is(second, fault.Unavailable) {
		t.Fatalf("two moves at once: %v and %v", first, second)
	}
	close(c.block)
	if got := c.count(t, 1, actor.Address{Kind: "fresh", ID: "here"}); got.N != 3 && !got.Moved {
		t.Fatalf("after the moves %+v", got)
	}
	if n := c.activations("here"); n != 1 {
		t.Fatalf("%d activations", n)
	}
}

// A node that joins takes over the directory entries of some ids: the Actors stay
// where they are, and lookups from every node, including the new one, find them (no
// second activation).
func TestDirectory_JoinMovesEntriesNotActors(t *testing.T) {
	c := startReloc(t, 3)
	ctx := reqCtx(t)
	c.Stop(2)
	if err := c.WaitConverged(wait); err != nil {
		t.Fatal(err)
	}
	fences := map[string]actor.RouteFence{}
	for i := 0; i < 40; i++ {
		id := fmt.Sprintf("j%d", i)
		f, err := c.host(i%2).Lookup(ctx, "counter", id)
		if err != nil {
			t.Fatal(err)
		}
		fences[id] = f
	}
	c.Restart(2)
	if err := c.WaitConverged(wait); err != nil {
		t.Fatal(err)
	}
	for id, want := range fences {
		for i := 0; i < 3; i++ {
			f, err := c.host(i).Lookup(ctx, "counter", id)
			if err != nil {
				t.Fatal(err)
			}
			if f != want {
				t.Fatalf("after the join node %d finds %s at %s, want %s", i, id, f, want)
			}
		}
		if n := c.activations(id); n != 1 {
			t.Fatalf("%s has %d activations after the join", id, n)
		}
	}
}

// A join costs the directory one pull per member, not one per pair: the members that
// saw the view only grow ask only the newcomer for its activations (their entries are
// current, and rendezvous hashing moves ids only to the newcomer), and the newcomer
// asks each of them. Lookups from every node still agree afterwards.
func TestDirectory_JoinPullsOnlyFromTheNewMember(t *testing.T) {
	c := startReloc(t, 5)
	ctx := reqCtx(t)
	c.Stop(4)
	if err := c.WaitConverged(wait); err != nil {
		t.Fatal(err)
	}
	want := map[string]actor.RouteFence{}
	for i := 0; i < 20; i++ {
		id := fmt.Sprintf("p%d", i)
		f, err := c.host(i%4).Lookup(ctx, "counter", id) // every node has rebuilt since the departure
		if err != nil {
			t.Fatal(err)
		}
		want[id] = f
	}
	pulls := func(nodes int) (n int64) {
		for i := range nodes {
			n += c.host(i).Stats().DirectoryPulls
		}
		return n
	}
	before := pulls(4)
	c.Restart(4)
	if err := c.WaitConverged(wait); err != nil {
		t.Fatal(err)
	}
	for id, f := range want {
		for i := range 5 { // a lookup waits for its node's rebuild
			got, err := c.host(i).Lookup(ctx, "counter", id)
			if err != nil {
				t.Fatal(err)
			}
			if got != f {
				t.Fatalf("after the join node %d finds %s at %s, want %s", i, id, got, f)
			}
		}
	}
	// A node answers from the entries pushed to it while its own rebuild still runs:
	// wait for the pulls themselves. (The newcomer pulls when it first needs to place an
	// Actor: it joined before its directory listened for membership changes.)
	if err := c.WaitUntil(wait, func() bool { return pulls(4)-before >= 4 }); err != nil {
		t.Fatalf("the members made %d pulls after the join, want one each", pulls(4)-before)
	}
	old := pulls(4) - before
	t.Logf("the join cost %d pulls by the 4 members", old)
	// Every member asking every other (as before) would be 16 by the four; now each
	// asks the newcomer, once, or again if a membership change interrupted it.
	if old > 8 {
		t.Errorf("the 4 members made %d pulls for one join, want 4 (at most 8)", old)
	}
}

// When the node holding some directory entries is killed, the new holders rebuild the
// entries from what the survivors host: Actors on survivors are found where they are,
// Actors of the dead node are activated anew, never twice.
func TestDirectory_HolderKilledEntriesRebuilt(t *testing.T) {
	c := startReloc(t, 3)
	ctx := reqCtx(t)
	fences := map[string]actor.RouteFence{}
	for i := 0; i < 40; i++ {
		id := fmt.Sprintf("k%d", i)
		// Placed on node 1 or 2 explicitly, whoever holds the entry.
		f, err := c.host(0).LookupOn(ctx, "counter", id, c.Node(1+i%2).ID().RID)
		if err != nil {
			t.Fatal(err)
		}
		fences[id] = f
	}
	c.Kill(0)
	if err := c.WaitUntil(wait, func() bool {
		return len(c.Node(1).Mesh().Membership().Live()) == 2 && len(c.Node(2).Mesh().Membership().Live()) == 2
	}); err != nil {
		t.Fatal(err)
	}
	for id, want := range fences {
		for _, i := range []int{1, 2} {
			f, err := c.host(i).Lookup(ctx, "counter", id)
			if err != nil {
				t.Fatal(err)
			}
			if f != want {
				t.Fatalf("after the kill node %d finds %s at %s, want %s", i, id, f, want)
			}
		}
		if n := c.activations(id); n != 1 {
			t.Fatalf("%s has %d activations", id, n)
		}
	}
}

// Keep-majority: a node that sees only a minority of the mesh stops its Actors and
// refuses lookups (unavailable); when the others are back it serves again, with one
// activation per Actor. The survivor is the node with the highest RID: after the first
// failure the agreed membership is the two left, and an even split keeps the side with
// the lowest RID, which the survivor is not.
func TestDirectory_MinorityRefusesAndStopsItsActors(t *testing.T) {
	c := startReloc(t, 3)
	ctx := reqCtx(t)
	survivor, others := 0, []int{}
	for i := 1; i < 3; i++ {
		if c.Node(i).ID().RID > c.Node(survivor).ID().RID {
			survivor = i
		}
	}
	for i := 0; i < 3; i++ {
		if i != survivor {
			others = append(others, i)
		}
	}
	f, err := c.host(others[0]).LookupOn(ctx, "counter", "lonely", c.Node(survivor).ID().RID)
	if err != nil {
		t.Fatal(err)
	}
	if f.Node != c.Node(survivor).ID() {
		t.Fatalf("placed on %s", f.Node)
	}
	c.Kill(others[0])
	c.Kill(others[1])
	if err := c.WaitUntil(wait, func() bool { return len(c.host(survivor).Active()) == 0 && !c.host(survivor).Stats().Quorum }); err != nil {
		t.Fatal("the minority node kept its Actors")
	}
	if _, err := c.host(survivor).Lookup(ctx, "counter", "lonely"); !errors.Is(err, actor.ErrNoQuorum) || !errors.Is(err, fault.Unavailable) {
		t.Fatalf("lookup on the minority: %v", err)
	}
	// Whichever failure the survivor saw last, that node is still in its agreed
	// membership (the first was dropped while it had a majority): with both back it
	// has a majority again.
	c.Restart(others[0])
	c.Restart(others[1])
	if err := c.WaitUntil(wait, func() bool {
		_, err := c.host(survivor).Lookup(ctx, "counter", "lonely")
		return err == nil
	}); err != nil {
		_, err := c.host(survivor).Lookup(ctx, "counter", "lonely")
		t.Fatalf("the node did not serve again after the others came back: %v; live %v; quorum %v", err, c.Node(survivor).Membership().Live(), c.host(survivor).Stats().Quorum)
	}
	if n := c.activations("lonely"); n != 1 {
		f, err := c.host(survivor).Lookup(ctx, "counter", "lonely")
		for _, i := range c.Running() {
			t.Log(i, c.Node(i).ID(), c.host(i).Active(), c.host(i).Stats().Quorum, c.host(i).DirectoryEntries()["lonely"])
		}
		t.Fatalf("%d activations; lookup %s %v", n, f, err)
	}
}

// brittle restores nothing: its Restore always fails.
type brittle struct{ counter }

func (b *brittle) Snapshot() ([]byte, error) { return []byte("x"), nil }
func (b *brittle) Restore([]byte) error      { return errors.New("brittle: cannot restore") }

// A state the kind cannot restore and a state whose CRC-32C does not match are refused
// by the target with ErrBadState (DataLost), counted, and the Actor keeps serving at
// the source; a move to a node that is dead is Unavailable.
func TestRelocation_BadStateAndDeadTargetAreRefused(t *testing.T) {
	c := &relocCluster{block: make(chan struct{})}
	c.Cluster = meshtest.Start(t, 3, meshtest.Options{Config: func(i int, cfg *meshnode.Config) {
		cfg.Messages = counterMessages
		cfg.Kinds = []actor.Kind{
			{Name: "brittle", New: func() actor.Actor { return &brittle{} }},
			{Name: "counter", New: func() actor.Actor { return &counter{} }, State: func(a actor.Actor) any { return &a.(*counter).st }},
		}
	}})
	ctx := reqCtx(t)
	f, err := c.host(0).LookupOn(ctx, "brittle", "b", c.Node(0).ID().RID)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.host(0).Send(ctx, f, &Add{N: 4}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.host(0).Relocate(ctx, "b", c.Node(1).ID().RID); !errors.Is(err, actor.ErrBadState) || !errors.Is(err, fault.DataLost) {
		t.Fatalf("move of a state the target cannot restore: %v", err)
	}
	if s := c.host(1).Stats(); s.MovesRefused != 1 {
		t.Fatalf("target counted %d refused moves", s.MovesRefused)
	}
	if got := c.count(t, 2, actor.Address{Kind: "brittle", ID: "b"}); got.N != 4 || got.Moved {
		t.Fatalf("after the refused move %+v", got)
	}

	// A prepare whose CRC-32C does not match its bytes, as a peer would send it.
	system := nodert.SystemOf(c.Node(0).Mesh())
	target := c.Node(1).Mesh()
	res, err := system.Root.RequestFuture(proto.NewPID(target.RemoteAddr(), "$directory"), &meshpb.MovePrepare{
		RelocationHigh: 1, RelocationLow: 2, Kind: "counter",
		Source: &meshpb.Fence{ActorId: "forged", ObjectGeneration: f.ObjectGeneration, NodeRid: f.Node.RID,
			NodeGeneration: f.Node.Generation, AuthorityOwnerGeneration: 1, OwnerLeaseGeneration: 1},
		State: []byte{0x81, 0xa1, 0x4e, 0x05}, Crc32C: 12345, ToGeneration: target.ID().Generation,
	}, wait).Result()
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := res.(*meshpb.MoveReady); !ok || r.ErrorCode != "bad_state" || !strings.Contains(r.ErrorMessage, "CRC") {
		t.Fatalf("forged prepare answered %+v", res)
	}
	if s := c.host(1).Stats(); s.MovesRefused != 2 || s.Active != 0 {
		t.Fatalf("after a forged prepare: %+v", s)
	}

	// A dead target.
	c.Kill(2)
	if err := c.WaitUntil(wait, func() bool {
		return len(c.Node(0).Membership().Live()) == 2 && len(c.Node(1).Membership().Live()) == 2
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.host(0).Relocate(ctx, "b", c.Node(2).ID().RID); !errors.Is(err, fault.Unavailable) {
		t.Fatalf("move to a dead node: %v", err)
	}
	if got := c.count(t, 1, actor.Address{Kind: "brittle", ID: "b"}); got.N != 4 {
		t.Fatalf("after the move to a dead node %+v", got)
	}
}

// A drain that starts while an Actor is arriving on the node by a move loses neither
// the Actor nor its state, and reports no error: either the arrival is refused (the
// Actor serves at its source again) or the drain waits for it to commit and moves it
// on.
func TestDrain_AnActorArrivingWhenTheDrainStartsKeepsItsState(t *testing.T) {
	c := startReloc(t, 3)
	ctx := reqCtx(t)
	addr := actor.Address{Kind: "counter", ID: "d1"}
	if _, err := c.host(0).LookupOn(ctx, addr.Kind, addr.ID, c.Node(0).ID().RID); err != nil {
		t.Fatal(err)
	}
	if err := c.host(0).Send(ctx, addr, &Add{N: 7}); err != nil {
		t.Fatal(err)
	}
	if got := c.count(t, 0, addr); got.N != 7 {
		t.Fatalf("count %d, want 7", got.N)
	}
	// The move's restore on node 1 waits until the drain of node 1 has begun.
	entered, release := make(chan struct{}), make(chan struct{})
	c.host(0).HandleMove(actor.MoveHooks{Capture: func(*actor.Turn) ([]byte, error) { return []byte("layer"), nil }})
	c.host(1).HandleMove(actor.MoveHooks{Restore: func(*actor.Turn, []byte) error {
		close(entered)
		<-release
		return nil
	}})
	moved := make(chan error, 1)
	go func() {
		_, err := c.host(0).Relocate(ctx, addr.ID, c.Node(1).ID().RID)
		moved <- err
	}()
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("the move never reached its restore")
	}
	type drained struct {
		n   int
		err error
	}
	drain := make(chan drained, 1)
	go func() {
		n, err := c.host(1).Drain(ctx, 2)
		drain <- drained{n, err}
	}()
	if err := c.WaitUntil(wait, c.host(1).Draining); err != nil {
		close(release)
		t.Fatal("the drain never began")
	}
	close(release)
	d := <-drain
	if d.err != nil {
		t.Fatalf("drain: %v", d.err)
	}
	mvErr := <-moved
	where, err := c.host(2).Lookup(ctx, addr.Kind, addr.ID)
	if err != nil {
		t.Fatal(err)
	}
	if where.Node == c.Node(1).ID() {
		t.Fatalf("the Actor is still on the drained node (move: %v, drain moved %d)", mvErr, d.n)
	}
	if got := c.count(t, 2, addr); got.N != 7 {
		t.Fatalf("count after the drain %d, want 7 (move: %v, drain moved %d)", got.N, mvErr, d.n)
	}
	if n := c.activations(addr.ID); n != 1 {
		t.Fatalf("%d activations of %s", n, addr.ID)
	}
}
