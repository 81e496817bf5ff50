package binding_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshnode/meshnode"
	"github.com/meshnode/meshnode/binding"
	"github.com/meshnode/meshnode/examples/sampleapp"
	"github.com/meshnode/meshnode/internal/nodert"
	proto "github.com/meshnode/meshnode/internal/protoactor/actor"
	"github.com/meshnode/meshnode/mesh/meshpb"
	swire "github.com/meshnode/meshnode/session/wire"

	"github.com/meshnode/meshnode/actor"
	"github.com/meshnode/meshnode/fault"
	"github.com/meshnode/meshnode/mesh/wire"
	"github.com/meshnode/meshnode/session/connector"
	"github.com/meshnode/meshnode/test/fleet"
)

// Digest §7.18, relocation: a session bound to an Actor that moves keeps its
// connection and its Actor (same ActorId, the state moved), and what it sends during
// the move is processed exactly once, in order.

type servedReply struct {
	Actor  string `json:"actor"`
	Node   string `json:"node"`
	Served int64  `json:"served"`
}

func echo(t *testing.T, c *connector.Connector) servedReply {
	t.Helper()
	var out servedReply
	if err := request(t, c, "room.echo", map[string]int{"n": 1}, &out); err != nil {
		t.Fatalf("room.echo: %v", err)
	}
	return out
}

// §7.18 "connection kept, relay processed on target after commit, ActorRef snapshot
// moves, ids stay"; the sample room's served count moves with it; only the binding
// records (and 42/43/44) cross on the session path.
func TestRelocation718_ConnectionKeptRelayProcessedOnTarget(t *testing.T) {
	f := fleet.Start(t, 3, fleet.Options{})
	id := f.IDOn(t, "room", 1, "room-")
	c := f.Connect(t, 0)
	mustBind(t, c, id, "room")
	for i := 1; i <= 3; i++ {
		if got := echo(t, c); got.Served != int64(i) || got.Node != f.Node(1).ID().RID {
			t.Fatalf("echo %d before the move: %+v", i, got)
		}
	}
	f.Tap().Reset()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	to, err := f.Actors(0).Relocate(ctx, id, f.Node(2).ID().RID)
	if err != nil {
		t.Fatalf("relocate: %v", err)
	}
	got := echo(t, c)
	if got.Actor != id || got.Node != f.Node(2).ID().RID || got.Served != 4 {
		t.Fatalf("echo after the move %+v, want served 4 on %s", got, f.Node(2).ID().RID)
	}
	s := f.Binder(0).Stats()
	if s.Sessions != 1 {
		t.Fatalf("the session did not stay: %+v", s)
	}
	bs := f.Binder(0).SessionsBindings()
	if len(bs) != 1 || len(bs[0]) != 1 || bs[0][0].Actor.Node != to.Node || bs[0][0].Actor.Ref != to.Ref {
		t.Fatalf("the session's binding after the move %+v, want %s", bs, to)
	}
	cmds := f.Tap().Commands()
	for _, cmd := range []wire.Command{wire.CmdSessionRelocationSeal, wire.CmdSessionRelocationSealed, wire.CmdSessionRelocationRoute} {
		if cmds[cmd] == 0 {
			t.Errorf("record %s never crossed during the move (%v)", cmd, cmds)
		}
	}
	// §7.18 wire: 44 has no response: one 44 crossed (out and in), nothing answers it.
	if cmds[wire.CmdSessionRelocationRoute] != 2 {
		t.Errorf("44 crossed %d times (out+in), want 2", cmds[wire.CmdSessionRelocationRoute])
	}
}

// §7.18 "relayed-during-move messages processed once": while the room moves back and
// forth, Sends pipelined on the session come back as pushes exactly once and in order,
// and Requests issued meanwhile each get exactly one reply (the served counts they
// return are 1..N, none lost or counted twice).
func TestRelocation718_RelayedDuringMoveProcessedOnce(t *testing.T) {
	f := fleet.Start(t, 3, fleet.Options{})
	id := f.IDOn(t, "room", 1, "room-")
	c := f.Connect(t, 0)
	said := pushes(c, "room.said")
	mustBind(t, c, id, "room")
	const sends, requesters, perRequester = 600, 4, 40
	var wg sync.WaitGroup
	sendErr := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < sends; i++ {
			if err := c.Send(context.Background(), "room.say", map[string]int{"i": i}); err != nil {
				sendErr <- err
				return
			}
		}
	}()
	served, reqErr := echoers(t, c, requesters, perRequester, &wg)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	for _, to := range []int{2, 1, 2} {
		if _, err := f.Actors(to).Relocate(ctx, id, f.Node(to).ID().RID); err != nil {
			t.Fatalf("relocate to node %d: %v", to, err)
		}
	}
	for i := 0; i < sends; i++ {
		select {
		case p := <-said:
			var v struct{ I int }
			if err := json.Unmarshal(p, &v); err != nil || v.I != i {
				t.Fatalf("push %d is %s: lost, duplicated or reordered", i, p)
			}
		case err := <-sendErr:
			t.Fatalf("send: %v", err)
		case <-ctx.Done():
			t.Fatalf("%d of %d pushes came back", i, sends)
		}
	}
	wg.Wait()
	close(served)
	select {
	case err := <-reqErr:
		t.Fatalf("request during the moves: %v", err)
	default:
	}
	seen := map[int64]bool{}
	for out := range served {
		v := out.Served
		if seen[v] {
			t.Fatalf("served count %d returned twice", v)
		}
		seen[v] = true
	}
	for v := int64(1); v <= requesters*perRequester; v++ {
		if !seen[v] {
			t.Fatalf("served count %d missing: a request was lost or counted twice", v)
		}
	}
	if got := echo(t, c); got.Served != requesters*perRequester+1 || got.Node != f.Node(2).ID().RID {
		t.Fatalf("after the moves %+v", got)
	}
}

// §7.18 "explicit target failure before relay-ready → held messages go to source,
// connection kept": a move to a node that refuses it (draining) fails with a typed
// error; what the session sent meanwhile is served by the source.
func TestRelocation718_TargetFailureBeforeRelayReadyReturnsHeldToSource(t *testing.T) {
	f := fleet.Start(t, 3, fleet.Options{})
	id := f.IDOn(t, "room", 1, "room-")
	c := f.Connect(t, 0)
	mustBind(t, c, id, "room")
	echo(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if _, err := f.Actors(2).Drain(ctx, 1); err != nil {
		t.Fatalf("drain node 2: %v", err)
	}
	const requesters, perRequester = 4, 25
	var wg sync.WaitGroup
	served, reqErr := echoers(t, c, requesters, perRequester, &wg)
	if _, err := f.Actors(1).Relocate(ctx, id, f.Node(2).ID().RID); !errors.Is(err, fault.ShuttingDown) {
		t.Fatalf("move to a draining node: %v", err)
	}
	wg.Wait()
	close(served)
	select {
	case err := <-reqErr:
		t.Fatalf("request during the refused move: %v", err)
	default:
	}
	seen := map[int64]bool{}
	for out := range served {
		if out.Node != f.Node(1).ID().RID || seen[out.Served] {
			t.Fatalf("reply %+v (seen before: %v)", out, seen[out.Served])
		}
		seen[out.Served] = true
	}
	if got := echo(t, c); got.Served != requesters*perRequester+2 || got.Node != f.Node(1).ID().RID {
		t.Fatalf("after the refused move %+v", got)
	}
}

// A session that binds an Actor with the fence it had before it moved (a route cached
// before the move) reaches it through Message Follow.
func TestRelocation_BindWithTheOldFenceFollows(t *testing.T) {
	f := fleet.Start(t, 3, fleet.Options{})
	id := f.IDOn(t, "room", 1, "room-")
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	// Node 0 resolves (and caches) the route before the move.
	if _, err := f.Actors(0).Resolve(ctx, roomAddr(id)); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Actors(1).Relocate(ctx, id, f.Node(2).ID().RID); err != nil {
		t.Fatal(err)
	}
	c := f.Connect(t, 0)
	mustBind(t, c, id, "room")
	if got := echo(t, c); got.Node != f.Node(2).ID().RID || got.Served != 1 {
		t.Fatalf("echo after binding with the old route %+v", got)
	}
}

func roomAddr(id string) actor.Address { return actor.Address{Kind: "room", ID: id} }

// fragile is a room whose Restore, on the target of a move, first runs a hook: the
// test uses it to take the directory entry away from the source just before the
// target's relay-ready, so that the target's compare-and-set fails after it.
type fragile struct{ sampleapp.Room }

var fragileRestore atomic.Pointer[func()]

func (f *fragile) Snapshot() ([]byte, error) { return json.Marshal(f.State) }
func (f *fragile) Restore(b []byte) error {
	if hook := fragileRestore.Load(); hook != nil {
		(*hook)()
	}
	return json.Unmarshal(b, &f.State)
}

// §7.18 "CAS/cutover failure after relay-ready → no source fallback, seal timeout
// cleans up": when the target cannot take the directory entry over after its
// relay-ready, the move fails, the source does not serve again (no 44 abort), the
// session's seal times out and closes it, and the Actor is activated anew on the next
// bind (its state is lost: the error log says location_update_failed).
func TestRelocation718_CASFailureAfterRelayReadyNoSourceFallback(t *testing.T) {
	f := fleet.Start(t, 3, fleet.Options{
		Binding: binding.Options{SessionRelocationSealTimeout: time.Second},
		Config: func(cfg *meshnode.Config) {
			cfg.Kinds = append(cfg.Kinds, actor.Kind{Name: "fragile", New: func() actor.Actor { return &fragile{} }})
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	src, err := f.Actors(0).LookupOn(ctx, "fragile", "frail", f.Node(1).ID().RID)
	if err != nil {
		t.Fatal(err)
	}
	c := f.Connect(t, 0)
	mustBind(t, c, "frail", "fragile")
	if got := echo(t, c); got.Served != 1 {
		t.Fatalf("echo %+v", got)
	}
	hook := func() {
		// Every node is asked; only the holder of "frail" applies it.
		bogus := &meshpb.Fence{ActorId: src.ID, ObjectGeneration: src.ObjectGeneration, NodeRid: src.Node.RID,
			NodeGeneration: src.Node.Generation, AuthorityOwnerGeneration: 1, OwnerLeaseGeneration: 1}
		expected := &meshpb.Fence{ActorId: src.ID, ObjectGeneration: src.ObjectGeneration, NodeRid: src.Node.RID,
			NodeGeneration: src.Node.Generation, AuthorityOwnerGeneration: src.AuthorityOwnerGeneration, OwnerLeaseGeneration: src.OwnerLeaseGeneration}
		system := nodert.SystemOf(f.Node(0).Mesh())
		for i := 0; i < 3; i++ {
			m := f.Node(i).Mesh()
			_, _ = system.Root.RequestFuture(proto.NewPID(m.RemoteAddr(), "$directory"),
				&meshpb.ClaimRequest{Kind: "fragile", ActorId: src.ID, Expected: expected, Next: bogus, ToGeneration: m.ID().Generation}, wait).Result()
		}
	}
	fragileRestore.Store(&hook)
	defer fragileRestore.Store(nil)
	if _, err := f.Actors(1).Relocate(ctx, "frail", f.Node(2).ID().RID); err == nil {
		t.Fatal("the move succeeded although its commit could not take the directory entry")
	}
	fragileRestore.Store(nil)
	// The source does not serve again, the session's seal times out and closes it.
	eventually(t, "the sealed session closed", func() bool { return c.State() != connector.StateConnected })
	if r := c.CloseReason(); r != swire.CloseServerDrain {
		t.Errorf("close reason %v, want ServerDrain", r)
	}
	if n := len(f.Actors(1).Active()) + len(f.Actors(2).Active()); n != 0 {
		for i := 0; i < 3; i++ {
			t.Log(i, f.Actors(i).Active())
		}
		t.Fatalf("%d activations of the lost Actor", n)
	}
	if s := f.Binder(0).Stats(); s.SealTimeouts != 1 {
		t.Fatalf("seal timeouts %d", s.SealTimeouts)
	}
	// A new bind activates it anew: same ActorId, a new ObjectGeneration, fresh state.
	c2 := f.Connect(t, 0)
	mustBind(t, c2, "frail", "fragile")
	if got := echo(t, c2); got.Served != 1 {
		t.Fatalf("echo after the lost move %+v", got)
	}
	again, err := f.Actors(0).Lookup(ctx, "fragile", "frail")
	if err != nil || again.ObjectGeneration == src.ObjectGeneration {
		t.Fatalf("after the lost move %s %v, before %s", again, err, src)
	}
}

// echoers starts requesters goroutines (counted in wg) that each send perRequester
// room.echo requests one after the other; replies and the first error of each come
// back on the channels (sized so that nobody blocks).
func echoers(t *testing.T, c *connector.Connector, requesters, perRequester int, wg *sync.WaitGroup) (chan servedReply, chan error) {
	served := make(chan servedReply, requesters*perRequester)
	reqErr := make(chan error, requesters)
	for r := 0; r < requesters; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perRequester; i++ {
				var out servedReply
				if err := request(t, c, "room.echo", map[string]int{"i": i}, &out); err != nil {
					reqErr <- err
					return
				}
				served <- out
			}
		}()
	}
	return served, reqErr
}
