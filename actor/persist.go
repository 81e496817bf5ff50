package actor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vmihailenco/msgpack/v5"
	"go.opentelemetry.io/otel/metric"

	"github.com/meshnode/meshnode/fault"
	"github.com/meshnode/meshnode/store"
)

// Persistence: an Actor kind may keep its state in the node's store (HostOptions.Store)
// so that it survives the node's crash or restart (docs/persistence.md). The state is
// the one a move carries (Kind.State or Snapshotter). An activation claims its Actor's
// record before it starts (the store raises the record's version: every activation
// that loaded an earlier version can no longer save), restores what was saved, and then
// saves with compare-and-set on the version it holds. A save refused by the fence, or
// whose outcome is unknown, or that failed, stops the activation at the end of its
// turn: its memory is no longer what the store holds, and the next message activates
// the Actor anew from the store.

// Persistence is a kind's use of the store.
type Persistence uint8

const (
	// NotPersisted: the state lives in memory only (a move still carries it).
	NotPersisted Persistence = iota
	// SaveExplicitly: activation loads the last saved state; Context.Save writes it.
	SaveExplicitly
	// SaveEveryTurn: as SaveExplicitly, and every turn that handled a message saves the
	// state when it changed, before the turn's replies are released: a requester is
	// answered only once what the answer reflects is durable, and gets the save's error
	// (unavailable, deadline_exceeded for an unknown outcome) instead when it failed.
	SaveEveryTurn
)

func (p Persistence) String() string {
	switch p {
	case NotPersisted:
		return "not persisted"
	case SaveExplicitly:
		return "save explicitly"
	case SaveEveryTurn:
		return "save every turn"
	}
	return fmt.Sprintf("Persistence(%d)", uint8(p))
}

// DefaultStoreTimeout bounds one store operation (a claim at activation, a save).
const DefaultStoreTimeout = 5 * time.Second

// ErrStateMoved: a save or delete from an activation that has been captured for a move
// (its target saves from now on) or has moved away (kind InvalidOperation).
var ErrStateMoved = fault.New(fault.InvalidOperation, "actor: the Actor's state has moved: its target saves it")

// ErrNotPersisted: DeleteState on a kind that does not persist (kind NotConfigured).
var ErrNotPersisted = fault.New(fault.NotConfigured, "actor: the kind does not persist its state (Kind.Persist)")

// persistState is an activation's hold on its record: the key, the version it claimed
// or last wrote (its authority), and the hash of what it last wrote. Owned by the
// activation's turns.
type persistState struct {
	key     store.Key
	every   bool
	version uint64
	hash    uint64
	hashed  bool  // hash is that of the stored state
	failed  error // a save failed: the activation stops at the end of the turn
	deleted bool  // DeleteState ran: the activation stops at the end of the turn
	storeID string
}

// hashSeed is fixed for the process: hashes are compared within it only.
var hashSeed = maphash.MakeSeed()

// heldReply is a reply of a SaveEveryTurn turn, released once the turn's save is
// durable.
type heldReply struct {
	fn  func(v any, err error) error
	v   any
	err error
}

// storeCounts are the host's store figures.
type storeCounts struct {
	loads, loadFailures, corrupt   atomic.Int64
	saves, unchanged, saveFailures atomic.Int64
	conflicts, unknown, deletes    atomic.Int64
	stops, tooLarge                atomic.Int64
	saveLatency, loadLatency       metric.Float64Histogram
	reg                            metric.Registration
}

// StoreStats are the Actor host's store figures (also exported as metrics).
type StoreStats struct {
	Loads        int64 // records claimed at activation (or at a move from another store)
	LoadFailures int64 // claims that failed (the activation failed)
	Corrupt      int64 // stored states that did not decode (the activation failed)
	Saves        int64 // states written
	Unchanged    int64 // saves skipped: the state encoded as what was last written
	SaveFailures int64 // saves that failed, conflicts, unknown outcomes and writes refused after a move (ErrStateMoved) included
	Conflicts    int64 // saves refused by the fence (a newer activation claimed the record)
	Unknown      int64 // saves whose outcome is unknown (timed out)
	TooLarge     int64 // saves refused because the state is over the store's limit
	Deletes      int64 // states removed (Context.DeleteState)
	Stops        int64 // activations stopped because a save failed or their state was removed
}

// StoreStats returns the store figures.
func (h *Host) StoreStats() StoreStats {
	c := &h.storeCounts
	return StoreStats{Loads: c.loads.Load(), LoadFailures: c.loadFailures.Load(), Corrupt: c.corrupt.Load(),
		Saves: c.saves.Load(), Unchanged: c.unchanged.Load(), SaveFailures: c.saveFailures.Load(),
		Conflicts: c.conflicts.Load(), Unknown: c.unknown.Load(), TooLarge: c.tooLarge.Load(),
		Deletes: c.deletes.Load(), Stops: c.stops.Load()}
}

// Store returns the node's state store (nil: none).
func (h *Host) Store() store.Store { return h.store }

// checkPersist is Register's check of a kind that persists.
func (h *Host) checkPersist(k Kind) error {
	switch k.Persist {
	case NotPersisted:
		return nil
	case SaveExplicitly, SaveEveryTurn:
	default:
		return fault.Errorf(fault.InvalidOperation, "actor: kind %q: Persist %d is not a Persistence", k.Name, k.Persist)
	}
	if h.store == nil {
		return fault.Errorf(fault.NotConfigured, "actor: kind %q persists its state (Kind.Persist) but the node has no store (Config.Store, StoreURL or DataDir; HostOptions.Store)", k.Name)
	}
	if _, snap := k.New().(Snapshotter); k.State == nil && !snap {
		return fault.Errorf(fault.InvalidOperation, "actor: kind %q persists its state but has neither Kind.State nor a Snapshotter Actor", k.Name)
	}
	return nil
}

// claimState claims the record of (k, id) and restores it into impl: the activation's
// authority over its state. An error means the activation must not start.
func (h *Host) claimState(ctx context.Context, k Kind, id string, impl Actor) (*persistState, error) {
	p := &persistState{key: store.Key{Kind: k.Name, ID: id}, every: k.Persist == SaveEveryTurn, storeID: h.store.Info().ID}
	cctx, cancel := context.WithTimeout(ctx, h.storeTimeout)
	start := time.Now()
	rec, err := h.store.Claim(cctx, p.key)
	cancel()
	h.storeCounts.loadLatency.Record(context.Background(), time.Since(start).Seconds())
	if err != nil {
		h.storeCounts.loadFailures.Add(1)
		h.ratelog.Log(h.log, slog.LevelWarn, "store_load:"+k.Name, "actor: an activation could not load its state; it does not start",
			"actor", p.key.String(), "err", err)
		return nil, fmt.Errorf("actor: activate %s: load its state: %w", id, err)
	}
	h.storeCounts.loads.Add(1)
	p.version = rec.Version
	if rec.Data == nil {
		return p, nil
	}
	enc, payload, err := decodeEnvelope(rec.Data)
	if err == nil {
		err = restoreStored(k, impl, enc, payload)
	}
	if err != nil {
		h.storeCounts.corrupt.Add(1)
		h.log.Error("actor: a stored state does not decode; the Actor does not start and its record is left as it is",
			"actor", p.key.String(), "version", rec.Version, "bytes", len(rec.Data), "err", err)
		return nil, fmt.Errorf("actor: activate %s: %w", id, err)
	}
	p.hash, p.hashed = maphash.Bytes(hashSeed, payload), true
	return p, nil
}

// restoreStored installs a stored payload into a fresh instance.
func restoreStored(k Kind, impl Actor, enc byte, payload []byte) error {
	_, snap := impl.(Snapshotter)
	switch {
	case snap && enc != encodingSnapshot, !snap && enc != encodingMsgpack:
		return fmt.Errorf("%w: saved with encoding %d, which the kind no longer restores", store.ErrCorrupt, enc)
	}
	if err := restoreState(k, impl, payload); err != nil {
		return fmt.Errorf("%w: %w", store.ErrCorrupt, err)
	}
	return nil
}

// claimForMove gives a moving Actor its authority on the target: the source's version
// when both nodes share the store, otherwise a claim in this node's store (the moved
// state, newer than whatever that store holds, is what the Actor continues with).
func (h *Host) claimForMove(ctx context.Context, k Kind, id string, version uint64, storeID string) (*persistState, error) {
	if k.Persist == NotPersisted || h.store == nil {
		return nil, nil
	}
	p := &persistState{key: store.Key{Kind: k.Name, ID: id}, every: k.Persist == SaveEveryTurn, storeID: h.store.Info().ID}
	if storeID != "" && storeID == p.storeID {
		p.version = version
		return p, nil
	}
	cctx, cancel := context.WithTimeout(ctx, h.storeTimeout)
	rec, err := h.store.Claim(cctx, p.key)
	cancel()
	if err != nil {
		h.storeCounts.loadFailures.Add(1)
		return nil, fmt.Errorf("actor: claim the state of %s in this node's store: %w", id, err)
	}
	h.storeCounts.loads.Add(1)
	p.version = rec.Version
	return p, nil
}

// Save writes the Actor's current state (the state a move carries: Kind.State or its
// Snapshot) to the node's store and returns once it is durable. The write is fenced by
// the version this activation claimed or last wrote: if another activation of the
// Actor has claimed the record since, it fails with store.ErrConflict and nothing is
// written. A state equal to the last one written is not written again. After any
// failure the activation stops at the end of this turn (its memory is ahead of the
// store); the next message activates the Actor anew from the last saved state.
//
// For a kind that does not persist (or an activation of it on a node whose kind
// registration does not) there is nothing to write: Save returns nil at once, so that
// one Actor implementation serves kinds that persist and kinds that do not.
func (c *Context) Save() error {
	if c.act.persist == nil {
		return nil
	}
	return c.shell.save()
}

// DeleteState removes the Actor's saved state from the store (the record keeps its
// version, without data). The activation stops at the end of this turn; the next
// message activates the Actor anew, with no state.
func (c *Context) DeleteState() error {
	p := c.act.persist
	if p == nil {
		return fmt.Errorf("%w: %s", ErrNotPersisted, c.act.kind)
	}
	s, h := c.shell, c.host
	if err := s.saveAllowed(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), h.storeTimeout)
	v, err := h.store.Delete(ctx, p.key, p.version)
	cancel()
	if err != nil {
		h.countSaveError(err)
		p.failed = err
		return fmt.Errorf("actor: delete the state of %s: %w", p.key, err)
	}
	h.storeCounts.deletes.Add(1)
	p.version, p.hashed, p.deleted = v, false, true
	return nil
}

func (s *shell) saveAllowed() error {
	if s.holding || s.movedAway || s.forwardTo != nil {
		s.h.storeCounts.saveFailures.Add(1) // a stale activation's write, refused: counted
		return fmt.Errorf("%w: %s", ErrStateMoved, s.act.fence.Ref)
	}
	if p := s.act.persist; p.failed != nil {
		return fmt.Errorf("actor: %s stops after a failed save: %w", s.act.fence.Ref, p.failed)
	}
	if s.act.persist.deleted {
		return fault.Errorf(fault.InvalidOperation, "actor: %s: its state was deleted in this turn", s.act.fence.Ref)
	}
	return nil
}

var envelopePool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// save encodes the state and writes it when it changed.
func (s *shell) save() error {
	h, p := s.h, s.act.persist
	if err := s.saveAllowed(); err != nil {
		return err
	}
	buf := envelopePool.Get().(*bytes.Buffer)
	defer func() {
		if buf.Cap() <= 64<<10 {
			buf.Reset()
			envelopePool.Put(buf)
		}
	}()
	blob, err := encodeStored(buf, s.act.def, s.impl)
	if err != nil {
		err = fault.Errorf(fault.InvalidOperation, "actor: encode the state of %s: %w", p.key, err)
		p.failed = err
		h.storeCounts.saveFailures.Add(1)
		return err
	}
	sum := maphash.Bytes(hashSeed, blob[envelopeHeader:])
	if p.hashed && sum == p.hash {
		h.storeCounts.unchanged.Add(1)
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), h.storeTimeout)
	start := time.Now()
	v, err := h.store.Save(ctx, p.key, p.version, blob)
	cancel()
	h.storeCounts.saveLatency.Record(context.Background(), time.Since(start).Seconds())
	if err != nil {
		h.countSaveError(err)
		p.failed = err
		return fmt.Errorf("actor: save %s at version %d: %w", p.key, p.version, err)
	}
	h.storeCounts.saves.Add(1)
	p.version, p.hash, p.hashed = v, sum, true
	return nil
}

// encodeStored encodes the Actor's state in its envelope into buf.
func encodeStored(buf *bytes.Buffer, k Kind, impl Actor) ([]byte, error) {
	var hdr [envelopeHeader]byte
	buf.Write(hdr[:])
	enc := byte(encodingMsgpack)
	if sn, ok := impl.(Snapshotter); ok {
		enc = encodingSnapshot
		b, err := sn.Snapshot()
		if err != nil {
			return nil, err
		}
		buf.Write(b)
	} else {
		e := msgpack.GetEncoder()
		e.Reset(buf)
		err := e.Encode(k.State(impl))
		msgpack.PutEncoder(e)
		if err != nil {
			return nil, err
		}
	}
	b := buf.Bytes()
	putEnvelopeHeader(b, enc)
	return b, nil
}

func (h *Host) countSaveError(err error) {
	c := &h.storeCounts
	c.saveFailures.Add(1)
	switch {
	case errors.Is(err, store.ErrConflict):
		c.conflicts.Add(1)
	case errors.Is(err, store.ErrUnknownOutcome):
		c.unknown.Add(1)
	case errors.Is(err, store.ErrTooLarge):
		c.tooLarge.Add(1)
	}
}

// receivePersisted runs one delivery of an activation that persists: a SaveEveryTurn
// turn holds its replies until its save is durable; any failed save (or a removed
// state) stops the activation once the turn is over.
func (s *shell) receivePersisted(actx *Context, p *persistState) {
	auto := p.every && !isLifecycle(actx.msg) && !s.holdReplies
	if auto {
		s.holdReplies = true
	}
	s.receive(actx)
	if auto {
		s.holdReplies = false
		var err error
		if p.failed == nil && !p.deleted {
			err = s.save()
		} else if p.failed != nil {
			err = fmt.Errorf("actor: %s: %w", p.key, p.failed)
		}
		held := s.heldReplies
		s.heldReplies = nil
		for _, r := range held {
			if err != nil {
				_ = r.fn(nil, err)
			} else {
				_ = r.fn(r.v, r.err)
			}
		}
	}
	if (p.failed != nil || p.deleted) && s.act.ctx.Err() == nil {
		s.stopForStore(p)
	}
}

func isLifecycle(msg any) bool {
	switch msg.(type) {
	case *Started, *Stopping:
		return true
	}
	return false
}

// answer sends a reply now, or holds it for the end of a SaveEveryTurn turn.
func (s *shell) answer(fn func(v any, err error) error, v any, err error) error {
	if s.holdReplies {
		s.heldReplies = append(s.heldReplies, heldReply{fn: fn, v: v, err: err})
		return nil
	}
	return fn(v, err)
}

// stopForStore stops an activation whose save failed (or whose state was removed)
// through the normal stop path.
func (s *shell) stopForStore(p *persistState) {
	h := s.h
	if p.failed != nil {
		lvl := slog.LevelWarn
		if errors.Is(p.failed, store.ErrConflict) {
			lvl = slog.LevelInfo // the fence did its job: a newer activation owns the Actor
		}
		h.ratelog.Log(h.log, lvl, "store_stop:"+s.act.kind, "actor: an activation stops after a failed save; the next message activates it from the store",
			"actor", s.act.fence.Ref.String(), "kind", s.act.kind, "err", p.failed)
	}
	if h.retire(s.act) {
		h.storeCounts.stops.Add(1)
		if h.rdir != nil {
			h.rdir.released(s.act.kind, s.act.fence)
		}
		s.act.cancel()
		s.pctx.Stop(s.pctx.Self())
	}
}

func (h *Host) registerStoreMetrics(mp metric.MeterProvider) error {
	m := mp.Meter("github.com/meshnode/meshnode/actor")
	c := &h.storeCounts
	var err error
	if c.saveLatency, err = m.Float64Histogram("meshnode.store.save.duration", metric.WithUnit("s"),
		metric.WithDescription("Time of one save of an Actor's state to the store (written or failed).")); err != nil {
		return err
	}
	if c.loadLatency, err = m.Float64Histogram("meshnode.store.load.duration", metric.WithUnit("s"),
		metric.WithDescription("Time of one claim of an Actor's record at activation (its load).")); err != nil {
		return err
	}
	type counter struct {
		name, desc string
		v          func(StoreStats) int64
	}
	counters := []counter{
		{"meshnode.store.loads", "Records claimed and loaded at activation.", func(s StoreStats) int64 { return s.Loads }},
		{"meshnode.store.load_failures", "Claims at activation that failed (the activation did not start).", func(s StoreStats) int64 { return s.LoadFailures }},
		{"meshnode.store.corrupt", "Stored states that did not decode (the activation did not start; the record is kept).", func(s StoreStats) int64 { return s.Corrupt }},
		{"meshnode.store.saves", "States written.", func(s StoreStats) int64 { return s.Saves }},
		{"meshnode.store.unchanged", "Saves skipped because the state was the one last written.", func(s StoreStats) int64 { return s.Unchanged }},
		{"meshnode.store.save_failures", "Saves that failed (conflicts, unknown outcomes, too large, and saves or deletes refused after a move included).", func(s StoreStats) int64 { return s.SaveFailures }},
		{"meshnode.store.conflicts", "Saves refused by the fence: a newer activation had claimed the record.", func(s StoreStats) int64 { return s.Conflicts }},
		{"meshnode.store.unknown_outcomes", "Saves whose outcome is unknown (timed out).", func(s StoreStats) int64 { return s.Unknown }},
		{"meshnode.store.too_large", "Saves refused because the state was over the store's limit.", func(s StoreStats) int64 { return s.TooLarge }},
		{"meshnode.store.deletes", "States removed (Context.DeleteState).", func(s StoreStats) int64 { return s.Deletes }},
		{"meshnode.store.stops", "Activations stopped because a save failed or their state was removed.", func(s StoreStats) int64 { return s.Stops }},
	}
	insts := make([]metric.Int64ObservableCounter, len(counters))
	obs := make([]metric.Observable, len(counters))
	for i, ct := range counters {
		if insts[i], err = m.Int64ObservableCounter(ct.name, metric.WithDescription(ct.desc)); err != nil {
			return err
		}
		obs[i] = insts[i]
	}
	c.reg, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		s := h.StoreStats()
		for i, ct := range counters {
			o.ObserveInt64(insts[i], ct.v(s))
		}
		return nil
	}, obs...)
	return err
}
