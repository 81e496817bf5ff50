package actor_test

import (
	"bytes"
	"context"
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
	"github.com/meshnode/meshnode/internal/testkit"
	"github.com/meshnode/meshnode/mesh/meshtest"
	"github.com/meshnode/meshnode/store"
)

// Persistence (docs/persistence.md) through the Actor host's public surface, on
// in-process fleets sharing one store as a fleet shares a PostgreSQL server.

type Deposit struct{ N int }
type Balance struct {
	N       int
	Version uint64
}
type Forget struct{}

var ledgerMessages = []actor.MessageType{
	actor.MessageOf[Deposit]("ledger.deposit"),
	actor.MessageOf[Balance]("ledger.balance"),
	actor.MessageOf[Forget]("ledger.forget"),
}

type ledgerState struct {
	N   int
	Pad []byte // grows a state past the store's limit
}

// ledger answers each Deposit with its new balance. The "ledger" kind saves after
// every turn; "ledger-explicit" saves when asked (Deposit) and not otherwise.
type ledger struct {
	st       ledgerState
	explicit bool
	// started, when set, is told the balance each Started turn sees.
	started chan<- int
	// stopSaves, when set, is told what Save and DeleteState answer in the Stopping
	// turn of an activation that moved away (which first changes the balance, so that
	// a save would write something new).
	stopSaves chan<- stopSave
}

// stopSave is what a moved-away ledger's Stopping turn got from Save and DeleteState.
type stopSave struct{ save, del error }

func (l *ledger) Receive(ctx *actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		if l.started != nil {
			l.started <- l.st.N
		}
	case *actor.Stopping:
		if l.stopSaves != nil && m.Moved {
			l.st.N += 1000
			r := stopSave{save: ctx.Save()}
			r.del = ctx.DeleteState()
			l.stopSaves <- r
		}
	case *Deposit:
		l.st.N += m.N
		if m.N < 0 {
			l.st.Pad = bytes.Repeat([]byte{1}, -m.N)
		}
		if l.explicit {
			if err := ctx.Save(); err != nil {
				_ = ctx.ReplyError(err)
				return
			}
		}
		_ = ctx.Reply(&Balance{N: l.st.N})
	case *Forget:
		if err := ctx.DeleteState(); err != nil {
			_ = ctx.ReplyError(err)
			return
		}
		_ = ctx.Reply(&Balance{})
	}
}

func ledgerKinds() []actor.Kind {
	state := func(a actor.Actor) any { return &a.(*ledger).st }
	return []actor.Kind{
		{Name: "ledger", New: func() actor.Actor { return &ledger{} }, State: state, Persist: actor.SaveEveryTurn},
		{Name: "ledger-explicit", New: func() actor.Actor { return &ledger{explicit: true} }, State: state, Persist: actor.SaveExplicitly},
	}
}

// gatedStore wraps a store: Save can be held (gate) or the whole store taken down.
type gatedStore struct {
	store.Store
	down  atomic.Bool
	mu    sync.Mutex
	gate  chan struct{}
	saves chan struct{} // a Save reached the gate
	// returned counts the Saves that returned from the store behind the gate.
	returned atomic.Int64
}

func (g *gatedStore) hold() {
	g.mu.Lock()
	g.gate, g.saves = make(chan struct{}), make(chan struct{}, 16)
	g.mu.Unlock()
}

func (g *gatedStore) release() {
	g.mu.Lock()
	close(g.gate)
	g.gate = nil
	g.mu.Unlock()
}

func (g *gatedStore) Claim(ctx context.Context, k store.Key) (store.Record, error) {
	if g.down.Load() {
		return store.Record{}, fmt.Errorf("%w: the test took it down", store.ErrUnavailable)
	}
	return g.Store.Claim(ctx, k)
}

func (g *gatedStore) Save(ctx context.Context, k store.Key, v uint64, d []byte) (uint64, error) {
	if g.down.Load() {
		return 0, fmt.Errorf("%w: the test took it down", store.ErrUnavailable)
	}
	g.mu.Lock()
	gate, saves := g.gate, g.saves
	g.mu.Unlock()
	if gate != nil {
		saves <- struct{}{}
		<-gate
	}
	defer g.returned.Add(1)
	return g.Store.Save(ctx, k, v, d)
}

func startLedgers(t *testing.T, n int, st func(i int) store.Store) *meshtest.Cluster {
	return meshtest.Start(t, n, meshtest.Options{Config: func(i int, cfg *meshnode.Config) {
		cfg.Kinds = ledgerKinds()
		cfg.Messages = ledgerMessages
		cfg.MaxStateSize = 0
		if st != nil {
			if s := st(i); s != nil {
				cfg.Store = s
			}
		}
	}})
}

func deposit(t *testing.T, h *actor.Host, kind, id string, n int) (*Balance, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	v, err := h.Request(ctx, actor.Address{Kind: kind, ID: id}, Deposit{N: n})
	if err != nil {
		return nil, err
	}
	return v.(*Balance), nil
}

func mustDeposit(t *testing.T, h *actor.Host, kind, id string, n, want int) {
	t.Helper()
	b, err := deposit(t, h, kind, id, n)
	if err != nil || b.N != want {
		t.Fatalf("deposit %d to %s: %+v %v, want balance %d", n, id, b, err, want)
	}
}

// stored returns the record of (kind, id) in s.
func stored(t *testing.T, s store.Store, kind, id string) store.Record {
	t.Helper()
	r, err := s.Load(context.Background(), store.Key{Kind: kind, ID: id})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Item 1: a SaveEveryTurn turn's reply is released only once its save is durable.
func TestPersistence_SaveEveryTurnRepliesOnlyOnceDurable(t *testing.T) {
	g := &gatedStore{Store: store.NewMemory(0)}
	c := startLedgers(t, 1, func(int) store.Store { return g })
	h := c.Node(0).Actors()
	mustDeposit(t, h, "ledger", "acct", 5, 5)
	g.hold()
	// RequestFunc calls done from the goroutine that completes the request: for a
	// local one, the turn that replies. A reply released before the save would have
	// called it before the turn reached the store, so once the save is seen held,
	// done must not have run; no time window is needed.
	var early atomic.Bool // answered before the second deposit's save returned
	answered := make(chan error, 1)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	h.RequestFunc(ctx, actor.Address{Kind: "ledger", ID: "acct"}, Deposit{N: 2}, func(_ any, err error) {
		early.Store(g.returned.Load() < 2)
		answered <- err
	})
	testkit.Await(t, g.saves, wait, "the turn's save reaching the store")
	select {
	case err := <-answered:
		t.Fatalf("the request was answered (%v) before its turn's save was durable", err)
	default:
	}
	g.release()
	if err := testkit.Await(t, answered, wait, "the answer after the save"); err != nil {
		t.Fatal(err)
	}
	if early.Load() {
		t.Fatal("the request was answered before its turn's save returned")
	}
	r := stored(t, g, "ledger", "acct")
	// Version 1 is the activation's claim; one save per deposit.
	if r.Version != 3 {
		t.Fatalf("stored version %d, want 3 (claim, two saves)", r.Version)
	}
	if s := h.StoreStats(); s.Saves != 2 || s.Loads != 1 || s.SaveFailures != 0 {
		t.Fatalf("store stats %+v", s)
	}
}

// Item 6: the store unreachable: a turn that saves fails with unavailable at once,
// nothing is half-written, the Actor does not run ahead of its store, and it recovers
// when the store is back.
func TestPersistence_StoreDownFailsUnavailableAndRecovers(t *testing.T) {
	g := &gatedStore{Store: store.NewMemory(0)}
	c := startLedgers(t, 1, func(int) store.Store { return g })
	h := c.Node(0).Actors()
	for _, kind := range []string{"ledger", "ledger-explicit"} {
		id := "acct-" + kind
		mustDeposit(t, h, kind, id, 10, 10)
		before := stored(t, g, kind, id)
		g.down.Store(true)
		start := time.Now()
		for i := 0; i < 3; i++ {
			_, err := deposit(t, h, kind, id, 1)
			if !errors.Is(err, fault.Unavailable) {
				t.Fatalf("%s: deposit %d with the store down: %v, want unavailable", kind, i, err)
			}
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("%s: three requests with the store down took %v: they should fail at once", kind, d)
		}
		if r := stored(t, g, kind, id); r.Version != before.Version || !bytes.Equal(r.Data, before.Data) {
			t.Fatalf("%s: the store changed while it was down: %+v, was %+v", kind, r, before)
		}
		g.down.Store(false)
		// Back: the Actor continues from its last saved balance, not from the
		// increments that failed.
		mustDeposit(t, h, kind, id, 1, 11)
	}
	if s := h.StoreStats(); s.SaveFailures != 2 || s.LoadFailures != 4 || s.Stops != 2 {
		t.Fatalf("store stats %+v, want 2 failed saves (each stopping its activation) and 4 failed loads", s)
	}
}

// Item 6 and bad input: a stored state that does not decode fails the activation with
// a typed error (DataLost) on every node that asks, is counted, and is left as it is.
func TestPersistence_CorruptStateFailsTheActivationTyped(t *testing.T) {
	c := startLedgers(t, 2, nil)
	st := c.Store()
	garbage := map[string][]byte{
		"short":    []byte("MS"),
		"no-magic": []byte("not an envelope at all"),
		"bad-crc":  append([]byte{'M', 'S', 1, 1, 0, 0, 0, 0}, 0x91, 0x05),
		"bad-body": encodeEnvelope(1, []byte{0xc1}), // msgpack's never-used byte
	}
	for id, blob := range garbage {
		if _, err := st.Save(context.Background(), store.Key{Kind: "ledger", ID: id}, 0, blob); err != nil {
			t.Fatal(err)
		}
	}
	for id, blob := range garbage {
		for i := 0; i < 2; i++ {
			_, err := deposit(t, c.Node(i).Actors(), "ledger", id, 1)
			if !errors.Is(err, store.ErrCorrupt) || !errors.Is(err, fault.DataLost) {
				t.Fatalf("%s from node %d: %v, want store.ErrCorrupt (DataLost)", id, i, err)
			}
		}
		if r := stored(t, st, "ledger", id); !bytes.Equal(r.Data, blob) {
			t.Fatalf("%s: the corrupt record was replaced: %q", id, r.Data)
		}
	}
	var corrupt int64
	for i := 0; i < 2; i++ {
		corrupt += c.Node(i).Actors().StoreStats().Corrupt
		if n := len(c.Node(i).Actors().Active()); n != 0 {
			t.Fatalf("node %d has %d activations of corrupt Actors", i, n)
		}
	}
	if corrupt != int64(2*len(garbage)) {
		t.Fatalf("corrupt count %d, want %d", corrupt, 2*len(garbage))
	}
}

// encodeEnvelope builds a well-formed envelope around payload.
func encodeEnvelope(enc byte, payload []byte) []byte { return actor.EncodeStateEnvelope(enc, payload) }

// Item 2: an activation whose record another activation claimed since (a healed
// partition, a racing placement) cannot save: its save fails with a typed conflict,
// is counted, overwrites nothing, and the activation stops; the next request reaches a
// new activation that continues from the newer state.
func TestPersistence_StaleActivationSaveRefusedByTheFence(t *testing.T) {
	c := startLedgers(t, 1, nil)
	h, st := c.Node(0).Actors(), c.Store()
	for _, kind := range []string{"ledger", "ledger-explicit"} {
		id := "acct-" + kind
		mustDeposit(t, h, kind, id, 7, 7)
		// Another activation elsewhere claims the record and saves a newer state.
		k := store.Key{Kind: kind, ID: id}
		rec, err := st.Claim(context.Background(), k)
		if err != nil {
			t.Fatal(err)
		}
		newer := actor.EncodeStateEnvelope(1, mustMsgpack(t, ledgerState{N: 100}))
		if _, err := st.Save(context.Background(), k, rec.Version, newer); err != nil {
			t.Fatal(err)
		}
		_, err = deposit(t, h, kind, id, 1)
		if !errors.Is(err, store.ErrConflict) || !errors.Is(err, fault.Unavailable) {
			t.Fatalf("%s: deposit by the stale activation: %v, want store.ErrConflict", kind, err)
		}
		if r := stored(t, st, kind, id); !bytes.Equal(r.Data, newer) || r.Version != rec.Version+1 {
			t.Fatalf("%s: the stale activation's save changed the record: version %d", kind, r.Version)
		}
		// The stale activation stopped; the next request activates the Actor anew from
		// the newer state.
		mustDeposit(t, h, kind, id, 1, 101)
	}
	if s := h.StoreStats(); s.Conflicts != 2 || s.Stops != 2 {
		t.Fatalf("store stats %+v, want 2 conflicts and 2 stops", s)
	}
}

func mustMsgpack(t *testing.T, v any) []byte {
	t.Helper()
	b, err := actor.MarshalState(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Item 2: a move keeps the version chain: the target continues from the source's
// version and saves after it; a target with a store of its own claims the record there
// and saves into it.
func TestPersistence_MoveThenSavesOnTheTarget(t *testing.T) {
	own := store.NewMemory(0)
	c := startLedgers(t, 3, func(i int) store.Store {
		if i == 2 {
			return own // node 2 does not share the fleet's store
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	h0 := c.Node(0).Actors()
	if _, err := h0.LookupOn(ctx, "ledger", "moving", c.Node(0).ID().RID); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		mustDeposit(t, h0, "ledger", "moving", 1, i)
	}
	before := stored(t, c.Store(), "ledger", "moving").Version // claim + 3 saves
	if _, err := h0.Relocate(ctx, "moving", c.Node(1).ID().RID); err != nil {
		t.Fatal(err)
	}
	mustDeposit(t, h0, "ledger", "moving", 1, 4)
	r := stored(t, c.Store(), "ledger", "moving")
	if r.Version != before+1 {
		t.Fatalf("after the move and one save on the target: version %d, want %d (the chain continues)", r.Version, before+1)
	}
	if s := c.Node(1).Actors().StoreStats(); s.Saves != 1 || s.Loads != 0 || s.Conflicts != 0 {
		t.Fatalf("target's store stats %+v: it must continue the chain without a claim", s)
	}
	// To a node with a store of its own: it claims there and saves there.
	if _, err := c.Node(1).Actors().Relocate(ctx, "moving", c.Node(2).ID().RID); err != nil {
		t.Fatal(err)
	}
	mustDeposit(t, h0, "ledger", "moving", 1, 5)
	if r := stored(t, own, "ledger", "moving"); r.Version != 2 {
		t.Fatalf("node 2's own store: version %d, want 2 (its claim, one save)", r.Version)
	}
}

// Item 3 in process: a node restarted with the same data directory brings every saved
// Actor back with its state (the embedded bbolt store).
func TestPersistence_RestartWithEmbeddedStoreInProcess(t *testing.T) {
	dir := t.TempDir()
	c := meshtest.Start(t, 1, meshtest.Options{Config: func(_ int, cfg *meshnode.Config) {
		cfg.Kinds, cfg.Messages = ledgerKinds(), ledgerMessages
		cfg.Store, cfg.DataDir = nil, dir
	}})
	if got := c.Node(0).Store().Info(); got.Name != "bolt" || !strings.HasPrefix(got.Location, dir) {
		t.Fatalf("store %+v, want bolt under %s", got, dir)
	}
	for i := 0; i < 10; i++ {
		mustDeposit(t, c.Node(0).Actors(), "ledger", fmt.Sprintf("acct-%d", i), i+1, i+1)
	}
	c.Kill(0)
	n := c.Restart(0)
	for i := 0; i < 10; i++ {
		mustDeposit(t, n.Actors(), "ledger", fmt.Sprintf("acct-%d", i), 1, i+2)
	}
}

// Item 8, in process: the node hosting an Actor is killed; the Actor comes back on a
// survivor with its last saved state.
func TestPersistence_KilledNodesActorBackOnSurvivor(t *testing.T) {
	c := startLedgers(t, 3, nil)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if _, err := c.Node(0).Actors().LookupOn(ctx, "ledger-explicit", "acct", c.Node(2).ID().RID); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 4; i++ {
		mustDeposit(t, c.Node(0).Actors(), "ledger-explicit", "acct", 1, i)
	}
	c.Kill(2)
	testkit.Eventually(t, wait, "the Actor back on a survivor with its state", func() bool {
		b, err := deposit(t, c.Node(0).Actors(), "ledger-explicit", "acct", 0)
		return err == nil && b.N == 4
	})
	mustDeposit(t, c.Node(1).Actors(), "ledger-explicit", "acct", 1, 5)
}

// Bad input: a state over the store's limit fails its save with a typed error, is
// counted, and loses nothing already saved.
func TestPersistence_StateOverTheLimitIsRefusedTyped(t *testing.T) {
	c := startLedgers(t, 1, func(int) store.Store { return store.NewMemory(4096) })
	h := c.Node(0).Actors()
	mustDeposit(t, h, "ledger", "acct", 3, 3)
	before := stored(t, h.Store(), "ledger", "acct")
	_, err := deposit(t, h, "ledger", "acct", -8192) // a Pad of 8 KiB
	if !errors.Is(err, store.ErrTooLarge) || !errors.Is(err, fault.CapacityExceeded) {
		t.Fatalf("deposit growing the state past the limit: %v, want store.ErrTooLarge", err)
	}
	if r := stored(t, h.Store(), "ledger", "acct"); r.Version != before.Version || !bytes.Equal(r.Data, before.Data) {
		t.Fatal("the refused save changed the record")
	}
	// The refusal is answered first; the activation stops right after, in its turn.
	if err := c.WaitUntil(wait, func() bool { s := h.StoreStats(); return s.TooLarge == 1 && s.Stops == 1 }); err != nil {
		t.Fatalf("store stats %+v", h.StoreStats())
	}
	mustDeposit(t, h, "ledger", "acct", 1, 4) // from the last saved state
}

// Item 1: removal of an Actor's state is explicit: DeleteState removes it, the
// activation stops, and the next one starts empty; the record keeps its version.
func TestPersistence_DeleteStateIsExplicit(t *testing.T) {
	c := startLedgers(t, 1, nil)
	h := c.Node(0).Actors()
	mustDeposit(t, h, "ledger", "gone", 9, 9)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if _, err := h.Request(ctx, actor.Address{Kind: "ledger", ID: "gone"}, Forget{}); err != nil {
		t.Fatal(err)
	}
	r := stored(t, c.Store(), "ledger", "gone")
	if r.Data != nil || r.Version != 3 {
		t.Fatalf("after DeleteState: %+v, want no data at version 3", r)
	}
	mustDeposit(t, h, "ledger", "gone", 1, 1)
	if s := h.StoreStats(); s.Deletes != 1 {
		t.Fatalf("store stats %+v", s)
	}
}

// A kind that persists on a node without a store fails the start, naming the kind.
func TestPersistence_KindThatPersistsNeedsAStore(t *testing.T) {
	cfg := meshnode.TestConfig()
	cfg.Kinds = ledgerKinds()
	cfg.Messages = ledgerMessages
	n, err := meshnode.Start(context.Background(), cfg)
	if err == nil {
		_ = n.Close()
		t.Fatal("started without a store")
	}
	if !errors.Is(err, fault.NotConfigured) || !strings.Contains(err.Error(), `"ledger"`) || !strings.Contains(err.Error(), "Kinds[0]") {
		t.Fatalf("error %v", err)
	}
}

// startLedgerKind starts n nodes sharing the cluster's store, each hosting the one
// kind k (a ledger the test watches) and nothing collecting idle Actors.
func startLedgerKind(t *testing.T, n int, k actor.Kind) *meshtest.Cluster {
	k.State = func(a actor.Actor) any { return &a.(*ledger).st }
	return meshtest.Start(t, n, meshtest.Options{Config: func(_ int, cfg *meshnode.Config) {
		cfg.Kinds, cfg.Messages = []actor.Kind{k}, ledgerMessages
		cfg.ActorIdleTimeout = -1
	}})
}

// Item 1: an activation loads the last saved state before it sees *actor.Started:
// the Started turn of an Actor activated again (after a deactivation, and on a fresh
// host over the same store) already has the balance it saved.
func TestPersistence_StateLoadedBeforeStarted(t *testing.T) {
	started := make(chan int, 4)
	c := startLedgerKind(t, 1, actor.Kind{Name: "ledger-seen", Persist: actor.SaveExplicitly,
		New: func() actor.Actor { return &ledger{explicit: true, started: started} }})
	h := c.Node(0).Actors()
	mustDeposit(t, h, "ledger-seen", "acct", 40, 40)
	if n := testkit.Await(t, started, wait, "the first activation's Started"); n != 0 {
		t.Fatalf("the first activation's Started saw balance %d, want 0 (never saved)", n)
	}
	mustDeposit(t, h, "ledger-seen", "acct", 2, 42)

	h.Deactivate("acct")
	if err := c.WaitUntil(wait, func() bool { return len(h.Active()) == 0 }); err != nil {
		t.Fatalf("the activation did not go: %v", err)
	}
	mustDeposit(t, h, "ledger-seen", "acct", 0, 42)
	if n := testkit.Await(t, started, wait, "the second activation's Started"); n != 42 {
		t.Fatalf("the Started turn after a deactivation saw balance %d, want 42: the state must be loaded before Started", n)
	}
	if s := h.StoreStats(); s != (actor.StoreStats{Loads: 2, Saves: 2, Unchanged: 1}) {
		t.Fatalf("store stats %+v, want exactly 2 loads, 2 saves, 1 unchanged", s)
	}

	// A fresh host (the node restarted) over the same store.
	n := c.Restart(0)
	mustDeposit(t, n.Actors(), "ledger-seen", "acct", 1, 43)
	if got := testkit.Await(t, started, wait, "the restarted node's activation's Started"); got != 42 {
		t.Fatalf("the Started turn on a restarted node saw balance %d, want 42", got)
	}
	if s := n.Actors().StoreStats(); s != (actor.StoreStats{Loads: 1, Saves: 1}) {
		t.Fatalf("restarted node's store stats %+v, want exactly 1 load, 1 save", s)
	}
	select {
	case got := <-started:
		t.Fatalf("an extra Started (balance %d): want exactly three activations", got)
	default:
	}
}

// Item 2: once a move has taken an Actor away, its source activation can neither save
// nor delete (actor.ErrStateMoved), even from its own Stopping turn: nothing it tries
// lands in the store, and the target continues the version chain from the source's
// last save. The refusals are counted as failed saves.
func TestPersistence_SaveAfterTheMoveFailsStateMoved(t *testing.T) {
	stops := make(chan stopSave, 4)
	c := startLedgerKind(t, 2, actor.Kind{Name: "ledger-moving", Persist: actor.SaveEveryTurn,
		New: func() actor.Actor { return &ledger{stopSaves: stops} }})
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	h0, h1 := c.Node(0).Actors(), c.Node(1).Actors()
	if _, err := h0.LookupOn(ctx, "ledger-moving", "moving", c.Node(0).ID().RID); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		mustDeposit(t, h0, "ledger-moving", "moving", 1, i)
	}
	before := stored(t, c.Store(), "ledger-moving", "moving")
	if before.Version != 4 {
		t.Fatalf("before the move: version %d, want 4 (claim, three saves)", before.Version)
	}
	if _, err := h0.Relocate(ctx, "moving", c.Node(1).ID().RID); err != nil {
		t.Fatal(err)
	}
	// The source's Stopping turn (it moved away) tries to save a changed state, then to
	// delete it.
	got := testkit.Await(t, stops, wait, "the moved-away source's Stopping turn")
	for what, err := range map[string]error{"Save": got.save, "DeleteState": got.del} {
		if !errors.Is(err, actor.ErrStateMoved) || !errors.Is(err, fault.InvalidOperation) {
			t.Errorf("%s from the moved-away source: %v, want actor.ErrStateMoved", what, err)
		}
	}
	if r := stored(t, c.Store(), "ledger-moving", "moving"); r.Version != before.Version || !bytes.Equal(r.Data, before.Data) {
		t.Fatalf("the moved-away source changed the record: version %d (was %d)", r.Version, before.Version)
	}
	// The target continues the chain: its first save expects the source's version.
	mustDeposit(t, h0, "ledger-moving", "moving", 1, 4)
	r := stored(t, c.Store(), "ledger-moving", "moving")
	want := actor.EncodeStateEnvelope(1, mustMsgpack(t, ledgerState{N: 4}))
	if r.Version != before.Version+1 || !bytes.Equal(r.Data, want) {
		t.Fatalf("after one save on the target: version %d, want %d, and data %q, want %q", r.Version, before.Version+1, r.Data, want)
	}
	if s := h0.StoreStats(); s != (actor.StoreStats{Loads: 1, Saves: 3, SaveFailures: 2}) {
		t.Fatalf("source's store stats %+v, want 1 load, 3 saves, 2 refused (counted as failed saves)", s)
	}
	if s := h1.StoreStats(); s != (actor.StoreStats{Saves: 1}) {
		t.Fatalf("target's store stats %+v, want exactly 1 save (the chain continues, no claim)", s)
	}
	select {
	case s := <-stops:
		t.Fatalf("a second moved-away Stopping turn: %+v", s)
	default:
	}
}
