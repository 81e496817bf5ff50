package actor

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	proto "github.com/meshnode/meshnode/internal/protoactor/actor"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/meshnode/meshnode/fault"
	"github.com/meshnode/meshnode/mesh"
	"github.com/meshnode/meshnode/mesh/meshpb"
	"github.com/meshnode/meshnode/mesh/wire"
)

// Errors of relocation, each of a fault kind.
var (
	// ErrAlreadyThere: the Actor already lives on the node it was asked to move to.
	ErrAlreadyThere = fault.New(fault.InvalidOperation, "actor: the Actor is already on that node")
	// ErrMoving: the Actor is in the middle of another move.
	ErrMoving = fault.New(fault.InvalidOperation, "actor: the Actor is already moving")
	// ErrUnknownNode: the target is not a member of the mesh.
	ErrUnknownNode = fault.New(fault.NotFound, "actor: no such node")
	// ErrBadState: the moved state failed its CRC-32C, or the kind could not restore it.
	ErrBadState = fault.New(fault.DataLost, "actor: moved state cannot be restored")
)

// Snapshotter is implemented by an Actor that captures and restores its own state
// when it moves to another node (it takes precedence over Kind.State).
type Snapshotter interface {
	Snapshot() ([]byte, error)
	Restore(data []byte) error
}

// Timing of a move.
const (
	// moveSealTimeout bounds the seal of the source (the bound session's 43).
	moveSealTimeout = 2 * time.Second
	// movePrepareTimeout bounds the transfer of the state to the target and its restore.
	movePrepareTimeout = 5 * time.Second
	// CutoverWait is how long a target that answered relay-ready waits for the source's
	// cutover before it commits anyway (the cutover fallback, logged cutover_timeout).
	CutoverWait = 1000 * time.Millisecond
	// followTTL is how long a node forwards records for an Actor that moved away.
	followTTL = 30 * time.Second
	// maxFollows bounds the Message Follow routes a node keeps.
	maxFollows = 1 << 16
	// coordinatorOwnerID names the relocation coordinator in records 42 and 44.
	coordinatorOwnerID = "meshnode-relocation"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Relocate moves the Actor id to the node toRID with its state, keeping its ActorId
// and ObjectGeneration; sessions bound to it stay connected (the binding layer seals
// them, holds what they relay, and switches their route on commit). It returns the
// Actor's fence on the target once the directory names the target and its dispatch is
// open. When the Actor lives on another node, that node is asked to run the move.
func (h *Host) Relocate(ctx context.Context, id, toRID string) (RouteFence, error) {
	if h.rdir == nil {
		return RouteFence{}, fault.Errorf(fault.NotConfigured, "actor: relocation needs the built-in directory")
	}
	self := h.node.ID()
	a, ok := h.local(id)
	if !ok || a.arriving.Load() {
		_, f, err := h.rdir.Where(ctx, id)
		if err != nil {
			return RouteFence{}, err
		}
		if f.Node == self {
			return RouteFence{}, fault.Errorf(fault.Unavailable, "actor: %s is between activations here", id)
		}
		res, err := h.ask(ctx, f.Node, &meshpb.RelocateRequest{ActorId: id, ToRid: toRID})
		if err != nil {
			return RouteFence{}, err
		}
		r, ok := res.(*meshpb.RelocateResponse)
		if !ok {
			return RouteFence{}, fault.Errorf(fault.Unavailable, "actor: relocate: unexpected answer %T", res)
		}
		if r.ErrorCode != "" {
			return RouteFence{}, codeError(r.ErrorCode, r.ErrorMessage)
		}
		return fenceFromPB(r.Fence), nil
	}
	if toRID == self.RID {
		return RouteFence{}, fmt.Errorf("%w: %s is on %s", ErrAlreadyThere, id, toRID)
	}
	mem, known := h.node.Membership().Member(toRID)
	if !known {
		return RouteFence{}, fmt.Errorf("%w: %q", ErrUnknownNode, toRID)
	}
	if !h.node.Membership().IsLive(mem.ID) {
		return RouteFence{}, fault.Errorf(fault.Unavailable, "actor: node %s is not a live member", toRID)
	}
	if !h.quorum.has() {
		return RouteFence{}, ErrNoQuorum
	}
	if !a.moving.CompareAndSwap(false, true) {
		return RouteFence{}, fmt.Errorf("%w: %s", ErrMoving, id)
	}
	f, err := h.move(ctx, a, mem)
	if err != nil {
		h.movesFailed.Add(1)
		return RouteFence{}, err
	}
	h.moves.Add(1)
	return f, nil
}

// move runs a move from the source side (this node): seal and capture in the
// activation's turn, prepare on the target, then (past relay-ready, no way back) hand
// the held messages over and cut over.
func (h *Host) move(ctx context.Context, a *activation, to mesh.Member) (RouteFence, error) {
	self := h.node.ID()
	m := Move{ID: newRelocationID(), Source: a.fence, Target: RouteFence{Ref: a.fence.Ref, Node: to.ID},
		Coordinator: MoveCoordinator{OwnerID: coordinatorOwnerID, LeaseGeneration: self.Generation, Node: self,
			StoreVersion: "authority-" + strconv.FormatUint(a.fence.AuthorityOwnerGeneration, 10)}}

	// 1. Seal: the bound session holds what it relays; the current turn finishes and
	// the Actor's and the layers' state are captured; later messages are held here.
	sctx, cancel := context.WithTimeout(ctx, moveSealTimeout)
	captured := make(chan moveCaptured, 1)
	h.system.Root.Send(a.pid, &moveSeal{m: m, ctx: sctx, done: captured})
	var c moveCaptured
	select {
	case c = <-captured:
	case <-sctx.Done():
		// The activation stopped under the move, or its turn did not end in time.
		c = moveCaptured{err: fault.Errorf(fault.Unavailable, "actor: seal of %s: %w", a.fence.Ref, sctx.Err())}
		// The seal is still queued behind a turn that has not ended: the abort follows
		// it, on a task the host owns.
		h.startOwned(func(context.Context) { h.abortMove(a, m) })
	}
	cancel()
	if c.err != nil {
		a.moving.Store(false)
		return RouteFence{}, c.err
	}

	if size := len(c.state) + len(c.layers); size > mesh.MaxRecordPayload {
		// Sent, it would break the stream to the target and lose what else is on it.
		h.abortMove(a, m)
		a.moving.Store(false)
		return RouteFence{}, fmt.Errorf("actor: move of %s to %s: its captured state is %d bytes: %w (limit %d)",
			a.fence.Ref, to.ID.RID, size, mesh.ErrRecordTooLarge, mesh.MaxRecordPayload)
	}

	// 2. Prepare: the target restores without dispatch and answers relay-ready.
	crc := crc32.Update(crc32.Checksum(c.state, castagnoli), castagnoli, c.layers)
	pctx, cancel := context.WithTimeout(ctx, movePrepareTimeout)
	res, err := h.ask(pctx, to.ID, &meshpb.MovePrepare{RelocationHigh: m.ID.High, RelocationLow: m.ID.Low, Kind: a.kind,
		Source: fenceToPB(a.fence), State: c.state, Layers: c.layers, Crc32C: crc,
		CoordinatorOwnerId: m.Coordinator.OwnerID, StoreVersion: m.Coordinator.StoreVersion,
		StateVersion: c.stateVersion, StateStoreId: c.storeID})
	cancel()
	var ready *meshpb.MoveReady
	if err == nil {
		var ok bool
		if ready, ok = res.(*meshpb.MoveReady); !ok {
			err = fault.Errorf(fault.Unavailable, "actor: prepare: unexpected answer %T", res)
		} else if ready.ErrorCode != "" {
			err = codeError(ready.ErrorCode, ready.ErrorMessage)
		}
	}
	if err != nil {
		// Before relay-ready: the source serves again, the sessions are released. The
		// target may have restored the Actor all the same (a late answer): it is told
		// to discard it.
		h.system.Root.Send(proto.NewPID(to.RemoteAddr, activationName(m.Source.Ref)),
			&meshpb.MoveCutover{RelocationHigh: m.ID.High, RelocationLow: m.ID.Low, Abort: true, ToGeneration: to.ID.Generation})
		h.abortMove(a, m)
		a.moving.Store(false)
		return RouteFence{}, fmt.Errorf("actor: move of %s to %s: %w", a.fence.Ref, to.ID.RID, err)
	}

	// 3. Relay-ready accepted: the irreversible point. Hand the held messages over,
	// then cut over; the target commits the directory entry and opens dispatch.
	m.Target = fenceFromPB(ready.Target)
	target := proto.NewPID(to.RemoteAddr, activationName(m.Target.Ref))
	handed := make(chan uint64, 1)
	h.system.Root.Send(a.pid, &moveHandOff{m: m, target: target, done: handed})
	var held uint64
	select {
	case held = <-handed:
	case <-time.After(moveSealTimeout):
		// The source activation is gone; the target commits on its cutover timeout.
	}
	cctx, cancel := context.WithTimeout(ctx, movePrepareTimeout)
	defer cancel()
	// Until the target answers the cutover, this node reports the Actor as its own to
	// a directory rebuild (the entry names the source until the target's commit).
	defer func() {
		h.mu.Lock()
		if e, ok := h.departing[m.Source.ID]; ok && e.Fence == m.Source {
			delete(h.departing, m.Source.ID)
		}
		h.mu.Unlock()
	}()
	res, err = h.system.Root.RequestFuture(target, &meshpb.MoveCutover{RelocationHigh: m.ID.High, RelocationLow: m.ID.Low, Held: held, ToGeneration: m.Target.Node.Generation},
		time.Until(deadlineOf(cctx))).Result()
	if err != nil {
		return RouteFence{}, fault.Errorf(fault.Unavailable, "actor: move of %s: no commit from the target: %v", a.fence.Ref, err)
	}
	if r, ok := res.(*meshpb.MoveReady); ok && r.ErrorCode != "" {
		return RouteFence{}, fmt.Errorf("actor: move of %s: %w", a.fence.Ref, codeError(r.ErrorCode, r.ErrorMessage))
	}
	return m.Target, nil
}

func deadlineOf(ctx context.Context) time.Time {
	dl, _ := ctx.Deadline()
	return dl
}

// abortMove returns the source to serving: held messages run, the sessions are
// released (MoveHooks.Aborted).
func (h *Host) abortMove(a *activation, m Move) {
	done := make(chan struct{})
	h.system.Root.Send(a.pid, &moveAbort{m: m, done: done})
	select {
	case <-done:
	case <-time.After(moveSealTimeout):
	}
}

func newRelocationID() RelocationID {
	var b [16]byte
	for {
		_, _ = rand.Read(b[:])
		id := RelocationID{High: binary.BigEndian.Uint64(b[:8]), Low: binary.BigEndian.Uint64(b[8:])}
		if !id.IsZero() {
			return id
		}
	}
}

// The source activation's side, in its turns.

// moveSeal asks the activation to seal and capture itself.
type moveSeal struct {
	m    Move
	ctx  context.Context
	done chan moveCaptured
}

type moveCaptured struct {
	state, layers []byte
	// stateVersion and storeID: the activation's hold on its record in the store (0,
	// "": the kind does not persist), continued by a target on the same store.
	stateVersion uint64
	storeID      string
	err          error
}

// moveAbort returns a sealed activation to serving.
type moveAbort struct {
	m    Move
	done chan struct{}
}

// moveHandOff forwards the held messages to the target and retires the activation.
type moveHandOff struct {
	m      Move
	target *proto.PID
	done   chan uint64
}

// seal runs the layers' seal, then captures: from here on the activation holds what
// reaches it.
func (s *shell) seal(cmd *moveSeal) {
	layers := s.h.layers()
	t := &s.turn
	var err error
	for _, l := range layers {
		if err == nil && l.hooks.Seal != nil {
			s.guard(func() { err = l.hooks.Seal(cmd.ctx, t, cmd.m) })
		}
	}
	var c moveCaptured
	if err == nil {
		c.state, err = captureState(s.act.def, s.impl)
	}
	if err == nil {
		names, data := make([]string, len(layers)), make([][]byte, len(layers))
		for i, l := range layers {
			names[i] = l.name
			if err == nil && l.hooks.Capture != nil {
				s.guard(func() { data[i], err = l.hooks.Capture(t) })
			}
		}
		c.layers = encodeLayers(names, data)
	}
	if p := s.act.persist; err == nil && p != nil {
		if p.failed != nil || p.deleted {
			err = fault.Errorf(fault.Unavailable, "actor: %s is stopping after a failed save", s.act.fence.Ref)
		}
		c.stateVersion, c.storeID = p.version, p.storeID
	}
	if err != nil {
		s.runAborted(t, cmd.m)
		c = moveCaptured{err: fmt.Errorf("actor: seal of %s: %w", s.act.fence.Ref, err)}
	} else {
		s.holding = true
	}
	cmd.done <- c
}

// runAborted runs every layer's Aborted hook.
func (s *shell) runAborted(t *Turn, m Move) {
	for _, l := range s.h.layers() {
		if l.hooks.Aborted != nil {
			s.guard(func() { l.hooks.Aborted(t, m) })
		}
	}
}

// abort ends the hold: held messages run now, in order, before anything later.
func (s *shell) abort(cmd *moveAbort) {
	if s.holding {
		s.holding = false
		held := s.held
		s.held = nil
		s.runAborted(&s.turn, cmd.m)
		for _, msg := range held {
			s.dispatch(s.pctx, msg)
		}
	}
	close(cmd.done)
}

// handOff forwards every held message to the target activation, in order, then stops
// this activation (moved away: no notice to its peers) and leaves a Message Follow
// route behind.
func (s *shell) handOff(pctx proto.Context, cmd *moveHandOff) {
	h := s.h
	var n uint64
	for _, msg := range s.held {
		if f := h.followedForm(msg, cmd.m.Source); f != nil {
			f.ToGeneration = cmd.m.Target.Node.Generation
			h.sendFollowed(cmd.target, f)
			n++
		}
	}
	s.held = nil
	h.addFollow(cmd.m.Source, cmd.m.Target, cmd.target)
	h.mu.Lock()
	h.departing[s.act.fence.ID] = DirectoryEntry{Kind: s.act.kind, Fence: s.act.fence}
	h.mu.Unlock()
	if h.retire(s.act) {
		// What is already in the mailbox behind this turn is forwarded as it comes
		// (forwardTo); the activation stops after it (a user message, so behind them).
		s.movedAway = true
		s.forwardTo = cmd.target
		s.forwardFrom = cmd.m.Source
		s.forwardGen = cmd.m.Target.Node.Generation
		pctx.Send(pctx.Self(), stopForwarding{})
	}
	cmd.done <- n
}

// stopForwarding stops an activation that moved away once its mailbox is forwarded.
type stopForwarding struct{}

// forward sends one message that reached a moved-away activation to its new location.
func (s *shell) forward(pctx proto.Context, msg any) {
	if _, ok := msg.(stopForwarding); ok {
		s.act.cancel()
		pctx.Stop(pctx.Self())
		return
	}
	if f := s.h.followedForm(msg, s.forwardFrom); f != nil {
		f.ToGeneration = s.forwardGen
		s.h.followed.Add(1)
		s.h.sendFollowed(s.forwardTo, f)
	}
}

// followLocal forwards a message from this node to an Actor that moved away from it.
func (h *Host) followLocal(fw follow, to RouteFence, msg any, from *Ref, req *requestInfo) error {
	m, err := h.encode(msg)
	if err != nil {
		return err
	}
	var corr uint64
	if req != nil {
		corr = req.corr
	}
	f := h.encodeFollowed(h.node.ID(), to, m, from, corr)
	if f == nil {
		return fault.Errorf(fault.Unavailable, "actor: %s moved and the message cannot follow", to.Ref)
	}
	h.followed.Add(1)
	f.ToGeneration = fw.target.Node.Generation
	h.sendFollowed(fw.pid, f)
	return nil
}

// followedForm turns a message held by a moving activation into the record the target
// takes: envelopes as they came (with their sender), Actor messages encoded as the
// record 24 they would have been (a local request keeps its correlation: the target's
// answer comes back to this node's pending call). Timers and collection checks belong
// to the old activation and are dropped.
func (h *Host) followedForm(msg any, source RouteFence) *meshpb.Followed {
	self := h.node.ID()
	switch m := msg.(type) {
	case *meshpb.Envelope:
		return &meshpb.Followed{FromRid: m.FromRid, FromGeneration: m.FromGeneration, Frames: m.Frames}
	case *meshpb.Followed:
		return m
	case *remoteSend:
		return h.encodeFollowed(m.from, m.in.to, m.in.msg, m.in.from, m.in.corr)
	case *delivery:
		var corr uint64
		if m.request != nil {
			corr = m.request.corr
		}
		enc, err := h.encode(m.msg)
		if err != nil {
			h.log.Warn("actor: a message held by a moving Actor cannot be encoded; dropped", "err", err)
			if m.request != nil && m.request.local != nil {
				m.request.local.complete(nil, fault.Errorf(fault.Unavailable, "actor: the Actor moved and the request could not follow: %v", err))
			}
			return nil
		}
		return h.encodeFollowed(self, source, enc, m.from, corr)
	}
	return nil
}

// sendFollowed sends a forwarded record to the Actor's new location, signed with this
// node's RID as its forwarder (under mesh TLS the receiver checks it against the
// certificate this node connected with).
func (h *Host) sendFollowed(to *proto.PID, f *meshpb.Followed) {
	f.ForwarderRid = h.node.ID().RID
	h.system.Root.Send(to, f)
}

func (h *Host) encodeFollowed(from mesh.NodeID, to RouteFence, msg *Message, src *Ref, corr uint64) *meshpb.Followed {
	var req *requestInfo
	if corr != 0 {
		req = &requestInfo{corr: corr}
	}
	rec, scratch, err := actorSendRecord(to, msg, src, req)
	if err != nil {
		h.log.Warn("actor: a message held by a moving Actor cannot be encoded; dropped", "err", err)
		return nil
	}
	frames, err := wire.Encode(rec)
	scratch.release()
	if err != nil {
		h.log.Warn("actor: a message held by a moving Actor cannot be encoded; dropped", "err", err)
		return nil
	}
	return &meshpb.Followed{FromRid: from.RID, FromGeneration: from.Generation, Frames: frames}
}

// captureState encodes the Actor's state: its Snapshot, or Kind.State with msgpack,
// or nothing (the kind restarts fresh on the target).
func captureState(k Kind, impl Actor) ([]byte, error) {
	if sn, ok := impl.(Snapshotter); ok {
		return sn.Snapshot()
	}
	if k.State != nil {
		return msgpack.Marshal(k.State(impl))
	}
	return nil, nil
}

// restoreState installs captured state into a fresh instance of the kind.
func restoreState(k Kind, impl Actor, data []byte) error {
	if data == nil {
		return nil
	}
	if sn, ok := impl.(Snapshotter); ok {
		return sn.Restore(data)
	}
	if k.State != nil {
		return msgpack.Unmarshal(data, k.State(impl))
	}
	return nil
}

// The target's side.

// arrival is what a target activation knows of the move that brings it: it restores
// the layers' state in its first turn and keeps dispatch closed until the cutover.
type arrival struct {
	m        Move
	layers   []byte
	restored chan error
	fallback *time.Timer
}

// cutoverTimeout is the target's cutover fallback firing.
type cutoverTimeout struct{}

// prepareMove restores a moving Actor here without dispatch and answers relay-ready.
func (h *Host) prepareMove(ctx context.Context, p *meshpb.MovePrepare) *meshpb.MoveReady {
	fail := func(err error) *meshpb.MoveReady {
		h.movesRefused.Add(1)
		h.ratelog.Log(h.log, slog.LevelWarn, "move_refused", "actor: refused a move", "err", err)
		return &meshpb.MoveReady{ErrorCode: errorCode(err), ErrorMessage: err.Error()}
	}
	src := fenceFromPB(p.Source)
	if src.ID == "" || src.ObjectGeneration == 0 || (p.RelocationHigh == 0 && p.RelocationLow == 0) {
		return fail(fault.Errorf(fault.ProtocolError, "actor: move without an Actor or a relocation id"))
	}
	if crc32.Update(crc32.Checksum(p.State, castagnoli), castagnoli, p.Layers) != p.Crc32C {
		return fail(fmt.Errorf("%w: CRC-32C mismatch", ErrBadState))
	}
	if !h.quorum.has() {
		return fail(ErrNoQuorum)
	}
	if h.draining.Load() {
		return fail(fault.Errorf(fault.ShuttingDown, "actor: node %s is draining", h.node.ID().RID))
	}
	self := h.node.ID()
	if src.Node == self {
		return fail(fmt.Errorf("%w: %s", ErrAlreadyThere, src.ID))
	}
	h.mu.Lock()
	k, ok := h.kinds[p.Kind]
	_, exists := h.acts[src.ID]
	closed := h.closed
	h.mu.Unlock()
	switch {
	case closed:
		return fail(ErrClosed)
	case !ok:
		return fail(fmt.Errorf("%w: %q", ErrUnknownKind, p.Kind))
	case exists:
		return fail(fault.Errorf(fault.AlreadyExists, "actor: %s already has an activation here", src.ID))
	}
	impl := k.New()
	if err := restoreState(k, impl, p.State); err != nil {
		return fail(fmt.Errorf("%w: %w", ErrBadState, err))
	}
	m := Move{ID: RelocationID{High: p.RelocationHigh, Low: p.RelocationLow}, Source: src,
		Target:      RouteFence{Ref: src.Ref, Node: self, AuthorityOwnerGeneration: mesh.NewGeneration(), OwnerLeaseGeneration: self.Generation},
		Coordinator: MoveCoordinator{OwnerID: p.CoordinatorOwnerId, LeaseGeneration: src.Node.Generation, Node: src.Node, StoreVersion: p.StoreVersion}}
	// The target continues the source's version chain (or claims the record in a store
	// of its own) before it answers relay-ready; it saves only once dispatch opens at
	// the commit, after the source's last save.
	ps, err := h.claimForMove(ctx, k, src.ID, p.StateVersion, p.StateStoreId)
	if err != nil {
		return fail(err)
	}
	arr := &arrival{m: m, layers: p.Layers, restored: make(chan error, 1)}
	a, err := h.spawn(ctx, k, m.Target, impl, arr, ps)
	if err != nil {
		return fail(err)
	}
	select {
	case err = <-arr.restored:
	case <-ctx.Done():
		err = fault.Errorf(fault.DeadlineExceeded, "actor: restore of %s: %w", src.Ref, ctx.Err())
	}
	if err != nil {
		h.Deactivate(src.ID)
		return fail(fmt.Errorf("%w: %w", ErrBadState, err))
	}
	if h.draining.Load() {
		// A drain began after the check above; it may have listed this node's Actors
		// before this one was spawned, and the Actor would then stop with the node.
		h.Deactivate(src.ID)
		return fail(fault.Errorf(fault.ShuttingDown, "actor: node %s is draining", self.RID))
	}
	pid := a.pid
	arr.fallback = time.AfterFunc(CutoverWait, func() { h.system.Root.Send(pid, cutoverTimeout{}) })
	return &meshpb.MoveReady{Target: fenceToPB(m.Target)}
}

// arrive runs in a target activation's first turn: the layers' state is restored;
// dispatch stays closed.
func (s *shell) arrive() {
	arr := s.arrival
	data, err := decodeLayers(arr.layers)
	t := &s.turn
	for _, l := range s.h.layers() {
		if b := data[l.name]; err == nil && l.hooks.Restore != nil && len(b) > 0 {
			s.guard(func() { err = l.hooks.Restore(t, b) })
		}
	}
	arr.restored <- err
}

// commitArrival runs in the target's turn at the cutover (or its fallback): the
// directory's compare-and-set moves the entry from the source to this activation
// (same ObjectGeneration, new authority owner generation); then dispatch opens (what
// was held runs first, in order) and the layers commit (record 44). If the entry
// cannot move, the Actor is lost here (location_update_failed: no 44; the bound
// session's seal times out) and the stale entry is deleted so that a lookup activates
// it anew.
func (s *shell) commitArrival(pctx proto.Context, respond bool, why string) {
	h, arr := s.h, s.arrival
	if c, ok := pctx.Message().(*meshpb.MoveCutover); ok && c.Abort {
		if arr != nil && arr.m.ID == (RelocationID{High: c.RelocationHigh, Low: c.RelocationLow}) {
			s.arrival = nil
			arr.fallback.Stop()
			h.log.Warn("actor: the source gave up a move after this node restored the Actor; discarded", "actor", arr.m.Target.Ref.String())
			if h.retire(s.act) {
				s.act.cancel()
				pctx.Stop(pctx.Self())
			}
		}
		return
	}
	if arr == nil {
		if respond {
			pctx.Respond(&meshpb.MoveReady{ErrorCode: fault.InvalidOperation.Code(), ErrorMessage: "no move in progress"})
		}
		return
	}
	s.arrival = nil
	arr.fallback.Stop()
	if why != "" {
		h.log.Warn("actor: cutover_timeout: committing a move without the source's cutover", "actor", arr.m.Target.Ref.String())
	}
	ctx, cancel := context.WithTimeout(h.closing, movePrepareTimeout)
	applied, err := h.rdir.claimRetrying(ctx, s.act.kind, arr.m.Target.ID, &arr.m.Source, &arr.m.Target)
	cancel()
	if err == nil && !applied {
		err = fault.Errorf(fault.Unavailable, "actor: the directory entry no longer names the source")
	}
	if err != nil {
		h.movesFailed.Add(1)
		h.log.Error("actor: location_update_failed: a moved Actor could not take over its directory entry; it is lost", "actor", arr.m.Target.Ref.String(), "err", err)
		h.rdir.released(s.act.kind, arr.m.Source) // one-way: never waits
		if respond {
			pctx.Respond(&meshpb.MoveReady{ErrorCode: fault.Code(err), ErrorMessage: err.Error()})
		}
		if h.retire(s.act) {
			s.act.cancel()
			pctx.Stop(pctx.Self())
		}
		return
	}
	s.act.arriving.Store(false)
	close(s.act.arrived)
	s.deliver(&Started{Moved: true}, nil, nil)
	pending := s.held
	s.held = nil
	for _, msg := range pending {
		s.dispatch(pctx, msg)
	}
	for _, l := range h.layers() {
		if l.hooks.Committed != nil {
			t := &s.turn
			s.guard(func() { l.hooks.Committed(t, arr.m) })
		}
	}
	if respond {
		pctx.Respond(&meshpb.MoveReady{Target: fenceToPB(arr.m.Target)})
	}
}

// receiveFollowed takes a record forwarded from the Actor's former node.
func (s *shell) receiveFollowed(f *meshpb.Followed) {
	h := s.h
	from := mesh.NodeID{RID: f.FromRid, Generation: f.FromGeneration}
	if from != h.node.ID() && !h.node.Membership().IsLive(from) {
		h.node.Records().DropStale(from, "followed record from a node that is not a current member")
		return
	}
	rec, err := wire.Decode(f.Frames)
	if err != nil {
		h.node.Records().DropStale(from, "malformed followed record")
		return
	}
	s.receiveDecoded(from, rec)
}

// Message Follow: records that reach the node an Actor moved away from are forwarded
// once to its new location for followTTL.

type follow struct {
	source RouteFence
	target RouteFence
	pid    *proto.PID
	until  time.Time
}

func (h *Host) addFollow(source, target RouteFence, pid *proto.PID) {
	h.followMu.Lock()
	defer h.followMu.Unlock()
	now := time.Now()
	if len(h.follows) >= maxFollows {
		for id, f := range h.follows {
			if now.After(f.until) {
				delete(h.follows, id)
			}
		}
		if len(h.follows) >= maxFollows {
			return
		}
	}
	h.follows[activationName(source.Ref)] = follow{source: source, target: target, pid: pid, until: now.Add(followTTL)}
}

// followRoute returns the Message Follow route of the activation name, if it is active.
func (h *Host) followRoute(name string) (follow, bool) {
	h.followMu.Lock()
	defer h.followMu.Unlock()
	f, ok := h.follows[name]
	if !ok {
		return follow{}, false
	}
	if time.Now().After(f.until) || !h.node.Membership().IsLive(f.target.Node) {
		// Expired, or the node it pointed to is gone (it may have moved on from there,
		// but that node's route went with it): the sender gets not found and looks up
		// again instead of waiting on a record sent into the void.
		delete(h.follows, name)
		return follow{}, false
	}
	return f, true
}

// Drain moves every Actor hosted here to the other live members (each where placement
// would put it without this node), at most parallel at a time, and from then on this
// node places no new Actor on itself and accepts no move. It returns how many moved;
// the error joins the moves that failed (those Actors stay here and stop with the
// node).
func (h *Host) Drain(ctx context.Context, parallel int) (int, error) {
	h.draining.Store(true)
	self := h.node.ID()
	others := slices.DeleteFunc(slices.Clone(h.node.Membership().Live()), func(m mesh.Member) bool { return m.ID == self })
	if len(others) == 0 {
		return 0, fault.Errorf(fault.Unavailable, "actor: no other member to drain to")
	}
	parallel = max(parallel, 1)
	var (
		mu    sync.Mutex
		moved int
		errs  []error
		wg    sync.WaitGroup
		slots = make(chan struct{}, parallel)
	)
	for _, a := range h.Active() {
		to := ownerOf(a.ID, others)
		slots <- struct{}{}
		wg.Add(1)
		go func(id string, to mesh.NodeID) {
			defer func() { <-slots; wg.Done() }()
			if !h.awaitArrival(ctx, id) {
				return // it stopped (a move here was abandoned): nothing to move
			}
			err := h.drainOne(ctx, id, to.RID)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", id, err))
				return
			}
			moved++
		}(a.ID, to)
	}
	wg.Wait()
	return moved, errors.Join(errs...)
}

// drainOne moves id to the node rid for Drain, trying again while the failure is one
// that passes (the target or a session owner unavailable for a moment, another move of
// it under way), with backoff, until ctx ends: an Actor left behind loses its state
// when the node stops. An Actor that stopped meanwhile has nothing left to move.
func (h *Host) drainOne(ctx context.Context, id, rid string) error {
	delay := 50 * time.Millisecond
	for {
		_, err := h.Relocate(ctx, id, rid)
		if err == nil {
			return nil
		}
		if _, active := h.local(id); !active {
			return nil
		}
		if !errors.Is(err, fault.Unavailable) && !errors.Is(err, ErrMoving) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(delay):
		}
		delay = min(2*delay, time.Second)
	}
}

// awaitArrival waits until the local activation of id, if it is arriving by a move,
// has committed (a drain moves it on from there). It reports false when the activation
// is gone, or stopped while it waited.
func (h *Host) awaitArrival(ctx context.Context, id string) bool {
	a, ok := h.local(id)
	if !ok {
		return false
	}
	if !a.arriving.Load() {
		return true
	}
	select {
	case <-a.arrived:
		return true
	case <-a.ctx.Done():
		return false
	case <-ctx.Done():
		return true // Relocate reports the deadline
	}
}

// Draining reports whether Drain was called.
func (h *Host) Draining() bool { return h.draining.Load() }

// Where returns the kind and fence of the Actor id from the directory, without
// activating it: NotFound when it has no activation.
func (h *Host) Where(ctx context.Context, id string) (string, RouteFence, error) {
	if h.rdir == nil {
		return "", RouteFence{}, fault.Errorf(fault.NotConfigured, "actor: Where needs the built-in directory")
	}
	if id == "" || len(id) > 255 {
		return "", RouteFence{}, fmt.Errorf("%w: %q", ErrBadID, id)
	}
	return h.rdir.Where(ctx, id)
}

// onDeadFollowed handles a message that reached an activation after it stopped: a
// forwarded record, or an Actor message a local sender posted just as the activation
// moved away. Where a Message Follow route names the activation it follows (once
// more); otherwise a request is answered not found, never left to time out.
func (h *Host) onDeadFollowed(evt any) {
	dl, ok := evt.(*proto.DeadLetterEvent)
	if !ok || dl.PID == nil {
		return
	}
	msg := dl.Message
	if me, ok := msg.(*proto.MessageEnvelope); ok {
		msg = me.Message
	}
	switch msg.(type) {
	case *meshpb.Followed, *delivery, *remoteSend:
	default:
		return // envelopes are the mesh's (Records.OnUndeliverable)
	}
	if id, ok := activationID(dl.PID.Id); ok {
		if a, found := h.local(id); found && activationName(a.fence.Ref) == dl.PID.Id {
			// The Actor is back here under the same identity.
			h.system.Root.Send(a.pid, msg)
			return
		}
	}
	if route, ok := h.followRoute(dl.PID.Id); ok {
		if f := h.followedForm(msg, route.source); f != nil {
			f.ToGeneration = route.target.Node.Generation
			h.followed.Add(1)
			h.sendFollowed(route.pid, f)
		}
		return
	}
	switch m := msg.(type) {
	case *delivery:
		if m.request != nil && m.request.local != nil {
			m.request.local.complete(nil, errNotDelivered)
		}
	case *remoteSend:
		if m.in.corr != 0 {
			h.failRequest(m.from, m.in.corr, wire.ResultNotFound, wire.FailureActorRouteNotFound)
		}
	case *meshpb.Followed:
		from := mesh.NodeID{RID: m.FromRid, Generation: m.FromGeneration}
		rec, err := wire.Decode(m.Frames)
		if err != nil {
			return
		}
		if in, isSend := decodeActorSend(rec); isSend && in.corr != 0 {
			h.failRequest(from, in.corr, wire.ResultNotFound, wire.FailureActorRouteNotFound)
			return
		}
		h.turnHandlers.mu.RLock()
		fn := h.missing
		h.turnHandlers.mu.RUnlock()
		if fn != nil {
			fn(from, rec)
			return
		}
		h.node.Records().DropStale(from, "followed record for an Actor that is not active")
	}
}
