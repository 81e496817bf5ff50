package binding

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshnode/meshnode/actor"
	"github.com/meshnode/meshnode/fault"
	"github.com/meshnode/meshnode/internal/wake"
	"github.com/meshnode/meshnode/mesh"
	"github.com/meshnode/meshnode/session"
	swire "github.com/meshnode/meshnode/session/wire"
)

// Session is the session-owner side of one STREAM session's bindings. Get it with
// Binder.Session from the session's callbacks.
type Session struct {
	b    *Binder
	peer *session.Peer
	rid  string

	mu         sync.Mutex
	binds      map[string]*bound // by ActorId
	only       string            // the ActorId of the only binding, when there is one (Relay's default)
	byGen      map[uint64]*bound // the same bindings, by binding generation
	binding    int               // binds in progress, counted against MaxBindingsPerSession
	seq        uint64            // session sequence: ingress order of relayed packets
	requests   map[uint64]pendingRequest
	expiry     *time.Timer // fires at the earliest relayed Request's deadline
	expiryAt   int64       // unix nanos it is armed for; 0: not armed
	closing    bool
	closed     bool
	onReplaced func(ctx context.Context, actorID string)
	// ended remembers why the session's latest bindings ended (at most maxEnded, the
	// oldest forgotten first), so that a relay to one of them says so.
	ended []endedBinding

	// The session's ingress gate (session.Peer.SetIngressGate) reads these lock-free.
	inflight     atomic.Int64 // len(requests)
	relayedCount atomic.Int64 // relays not consumed yet, all bindings (window.go)
	relayedBytes atomic.Int64
	progress     wake.Signal                   // a relayed Request completed, a window opened
	peerNodes    atomic.Pointer[[]mesh.NodeID] // the other nodes its bound Actors live on
}

// pendingRequest is a relayed Request waiting for the Actor's reply, with the binding
// generation it was relayed on: only a reply on that binding completes it.
type pendingRequest struct {
	pkt      *session.Packet
	gen      uint64
	node     mesh.NodeID // where the Actor lives: its failure fails the request
	deadline int64       // unix nanos; 0: none
	start    time.Time   // when it was relayed, for the latency histogram
}

// Binding describes one current binding.
type Binding struct {
	Actor             actor.RouteFence
	BindingGeneration uint64
}

// Session returns the binding state of the session of peer, creating it on first use.
// It is cleaned up (every binding tombstoned) when the session disconnects.
func (b *Binder) Session(peer *session.Peer) *Session {
	b.mu.Lock()
	defer b.mu.Unlock()
	if s, ok := b.sessions[peer.RoutingID()]; ok {
		return s
	}
	s := &Session{b: b, peer: peer, rid: sessionRID(peer.RoutingID()), binds: map[string]*bound{}, byGen: map[uint64]*bound{},
		requests: map[uint64]pendingRequest{}}
	b.sessions[peer.RoutingID()] = s
	peer.AfterDisconnect(s.disconnected)
	peer.SetIngressGate(s.ingressGate)
	return s
}

// ingressGate holds the session's reader (no packet pulled, its client stalls in TCP)
// while its relayed Requests awaiting replies are at MaxRelayedRequests, while one of
// its bindings is at its relay window (its Actor has not caught up), or while the
// window toward a node one of its Actors lives on is full: backpressure across the
// relay, instead of queueing without bound.
func (s *Session) ingressGate() <-chan struct{} {
	if max := int64(s.b.opts.MaxRelayedRequests); s.inflight.Load() >= max || s.windowFull() {
		ch := s.progress.Wait()
		if s.inflight.Load() >= max || s.windowFull() {
			return ch
		}
	}
	if nodes := s.peerNodes.Load(); nodes != nil {
		for _, n := range *nodes {
			if ch := s.b.node.Records().PeerBlocked(n); ch != nil {
				return ch
			}
		}
	}
	return nil
}

// bindsChanged refreshes what the ingress gate and Relay's default target read of the
// bindings. s.mu is held.
func (s *Session) bindsChanged() {
	self := s.b.node.ID()
	var nodes []mesh.NodeID
	s.only = ""
	for id, bd := range s.binds {
		if len(s.binds) == 1 {
			s.only = id
		}
		if bd.fence.Node != self && !slices.Contains(nodes, bd.fence.Node) {
			nodes = append(nodes, bd.fence.Node)
		}
	}
	s.peerNodes.Store(&nodes)
}

// addRequest records a relayed Request. s.mu is held.
func (s *Session) addRequest(seq uint64, pr pendingRequest) {
	pr.start = time.Now()
	if d := s.b.opts.RelayTimeout; d > 0 {
		pr.deadline = pr.start.Add(d).UnixNano()
		if s.expiryAt == 0 {
			s.armExpiry(pr.deadline)
		}
	}
	s.requests[seq] = pr
	s.inflight.Store(int64(len(s.requests)))
}

// removeRequest drops a relayed Request that completed or failed. s.mu is held.
func (s *Session) removeRequest(seq uint64) {
	delete(s.requests, seq)
	s.inflight.Store(int64(len(s.requests)))
	s.progress.Notify()
}

func (s *Session) armExpiry(at int64) {
	s.expiryAt = at
	d := time.Duration(at - time.Now().UnixNano())
	if s.expiry == nil {
		s.expiry = time.AfterFunc(d, s.expire)
		return
	}
	s.expiry.Reset(d)
}

// expire fails the relayed Requests past their deadline with deadline_exceeded (a late
// reply is then dropped) and arms the timer for the next deadline.
func (s *Session) expire() {
	now := time.Now().UnixNano()
	s.mu.Lock()
	s.expiryAt = 0
	failed := s.takeRequests(func(pr pendingRequest) bool { return pr.deadline != 0 && pr.deadline <= now })
	next := int64(0)
	for _, pr := range s.requests {
		if pr.deadline != 0 && (next == 0 || pr.deadline < next) {
			next = pr.deadline
		}
	}
	if next != 0 && !s.closed {
		s.armExpiry(next)
	}
	s.mu.Unlock()
	s.b.drops.relayTimeouts.Add(int64(len(failed)))
	if len(failed) > 0 {
		s.b.ratelog.Log(s.b.log, slog.LevelWarn, "relay_timeout", "binding: relayed requests got no reply within the relay timeout",
			"session", s.rid, "requests", len(failed), "timeout", s.b.opts.RelayTimeout)
	}
	failPackets(failed, fault.DeadlineExceeded.Code(), "the bound Actor did not reply within the relay timeout")
}

// OnReplaced sets the binding-replaced callback: it runs as a session turn when another
// session took over one of this session's Actors, as the application's last chance to
// tell the client; the framework closes the session 100 ms after it returns.
func (s *Session) OnReplaced(fn func(ctx context.Context, actorID string)) {
	s.mu.Lock()
	s.onReplaced = fn
	s.mu.Unlock()
}

// Peer returns the session's connection.
func (s *Session) Peer() *session.Peer { return s.peer }

// Bindings lists the current bindings, by ActorId.
func (s *Session) Bindings() []Binding {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Binding, 0, len(s.binds))
	for _, bd := range s.binds {
		out = append(out, Binding{Actor: bd.fence, BindingGeneration: bd.gen})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Actor.ID < out[j].Actor.ID })
	return out
}

// SessionsBindings returns the current bindings of every session that has binding
// state on this node: one list per session (sessions in routing ID order, each list by
// ActorId), for tests and operators.
func (b *Binder) SessionsBindings() [][]Binding {
	b.mu.Lock()
	sessions := make([]*Session, 0, len(b.sessions))
	for _, s := range b.sessions {
		sessions = append(sessions, s)
	}
	b.mu.Unlock()
	sort.Slice(sessions, func(i, j int) bool { return sessions[i].peer.RoutingID() < sessions[j].peer.RoutingID() })
	out := make([][]Binding, 0, len(sessions))
	for _, s := range sessions {
		out = append(out, s.Bindings())
	}
	return out
}

// Binding returns the current binding of actorID.
func (s *Session) Binding(actorID string) (Binding, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	bd, ok := s.binds[actorID]
	if !ok {
		return Binding{}, false
	}
	return Binding{Actor: bd.fence, BindingGeneration: bd.gen}, true
}

// Bind binds the session to the Actor at ref (from the directory), in the normative
// order of digest §7.5: a new binding generation, one record 38 to the Actor's node,
// the Actor owner registers the binding in the Actor's turn and answers with one 20;
// the binding is published here before Bind returns. Binding the Actor this session
// is already bound to (same ActorRef) is an idempotent success.
func (s *Session) Bind(ctx context.Context, ref actor.RouteFence) (Binding, error) {
	s.mu.Lock()
	if s.closing || s.closed {
		s.mu.Unlock()
		return Binding{}, ErrSessionClosing
	}
	bd, rebind := s.binds[ref.ID]
	if rebind && bd.fence.Ref == ref.Ref {
		s.mu.Unlock()
		return Binding{Actor: bd.fence, BindingGeneration: bd.gen}, nil
	}
	if max := s.b.opts.MaxBindingsPerSession; !rebind && len(s.binds)+s.binding >= max {
		s.mu.Unlock()
		s.b.drops.bindsRefused.Add(1)
		return Binding{}, fmt.Errorf("%w: %d bindings", ErrTooManyBindings, max)
	}
	s.binding++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.binding--
		s.mu.Unlock()
	}()
	gen := s.b.nextGen.Add(1)
	if err := s.b.roundTrip(ctx, s, ref, gen, false); err != nil {
		return Binding{}, err
	}
	s.mu.Lock()
	bd = s.binds[ref.ID]
	s.mu.Unlock()
	if bd == nil || bd.gen != gen {
		return Binding{}, ErrSessionClosing
	}
	return Binding{Actor: bd.fence, BindingGeneration: bd.gen}, nil
}

// BindOrGet returns this session's existing binding for exactly ref (same ActorId and
// ObjectGeneration), or binds it (§7.5: never another generation, never a lookup).
func (s *Session) BindOrGet(ctx context.Context, ref actor.RouteFence) (Binding, error) {
	return s.Bind(ctx, ref)
}

// Unbind removes the binding of actorID with a 38 tombstone; the Actor is told the
// binding ended. It waits for the Actor owner's terminal.
func (s *Session) Unbind(ctx context.Context, actorID string) error {
	return s.end(ctx, actorID)
}

// NotifyDisconnected tells the Actor that this session is logically gone (the
// connection stays) and removes the binding: the Actor's notice runs at most once
// however this races with the physical disconnect.
func (s *Session) NotifyDisconnected(ctx context.Context, actorID string) error {
	return s.end(ctx, actorID)
}

func (s *Session) end(ctx context.Context, actorID string) error {
	s.mu.Lock()
	bd, ok := s.binds[actorID]
	var fence actor.RouteFence
	var gen uint64
	if ok {
		fence, gen = bd.fence, bd.gen // copied under the lock: a relocation moves the route
	}
	s.mu.Unlock()
	if !ok {
		return ErrNotBound
	}
	// The binding stays current until the Actor's notice has run (its callback may
	// still push to this session); the tombstone's terminal ends it here.
	err := s.b.roundTrip(ctx, s, fence, gen, true)
	s.dropBinding(actorID, gen, endUnbound, "")
	s.b.forget(gen)
	s.failRequests(gen, "the binding ended")
	return err
}

// dropBinding removes the binding of actorID if it is still generation gen, and
// remembers why it ended.
func (s *Session) dropBinding(actorID string, gen uint64, why endCause, detail string) {
	s.mu.Lock()
	s.endBound(actorID, gen, why, detail)
	s.mu.Unlock()
}

// endCause is why a binding of this session ended.
type endCause uint8

const (
	endUnbound      endCause = iota + 1 // the session unbound it
	endActorStopped                     // the Actor stopped (its node shut down, it was collected)
	endNodeFailed                       // the Actor's node failed or left the mesh
)

// endedBinding is one binding that ended, and why.
type endedBinding struct {
	actorID string
	cause   endCause
	detail  string // the node that failed, when cause is endNodeFailed
}

// maxEnded bounds what a session remembers of its ended bindings.
const maxEnded = 16

// endBound removes the binding of actorID if it is still generation gen and remembers
// why it ended. s.mu is held.
func (s *Session) endBound(actorID string, gen uint64, why endCause, detail string) {
	if !s.removeBound(actorID, gen) {
		return
	}
	s.ended = slices.DeleteFunc(s.ended, func(e endedBinding) bool { return e.actorID == actorID })
	if len(s.ended) == maxEnded {
		s.ended = slices.Delete(s.ended, 0, 1)
	}
	s.ended = append(s.ended, endedBinding{actorID: actorID, cause: why, detail: detail})
}

// notBound is the error of a relay to actorID ("" for the session's only binding) that
// the session has no binding of: ErrBindingLost (Unavailable: bind again) when its
// binding ended because its Actor's node failed or the Actor stopped, else ErrNotBound
// (InvalidOperation), saying what the session is bound to. s.mu is held.
func (s *Session) notBound(actorID string) error {
	if actorID == "" && len(s.binds) > 1 {
		return fault.WithText(ErrNotBound, fmt.Sprintf(
			"binding: the session is bound to %d Actors; a relay must name one (packet metadata %q)", len(s.binds), "actor"))
	}
	var e *endedBinding
	for i := len(s.ended) - 1; i >= 0; i-- {
		if actorID == "" || s.ended[i].actorID == actorID {
			e = &s.ended[i]
			break
		}
	}
	if e != nil {
		switch e.cause {
		case endNodeFailed:
			return fault.WithText(ErrBindingLost, fmt.Sprintf(
				"binding: the session's binding of %s ended: %s; bind it again", e.actorID, e.detail))
		case endActorStopped:
			return fault.WithText(ErrBindingLost, fmt.Sprintf(
				"binding: the session's binding of %s ended: the Actor stopped; bind it again", e.actorID))
		case endUnbound:
			return fault.WithText(ErrNotBound, fmt.Sprintf(
				"binding: the session unbound %s; bind it again to relay to it", e.actorID))
		}
	}
	if actorID == "" {
		return fault.WithText(ErrNotBound, "binding: the session is not bound to any Actor; bind one first")
	}
	return fault.WithText(ErrNotBound, fmt.Sprintf("binding: the session is not bound to %s; bind it first", actorID))
}

// failRequests answers the relayed requests of binding gen that are still waiting:
// their binding is gone, so no reply can come.
func (s *Session) failRequests(gen uint64, why string) {
	s.mu.Lock()
	failed := s.takeRequests(func(pr pendingRequest) bool { return pr.gen == gen })
	s.mu.Unlock()
	failPackets(failed, fault.Unavailable.Code(), why)
}

// takeRequests removes the relayed requests that match and returns their packets.
// s.mu is held.
func (s *Session) takeRequests(match func(pendingRequest) bool) []*session.Packet {
	var out []*session.Packet
	for seq, pr := range s.requests {
		if match(pr) {
			out = append(out, pr.pkt)
			s.removeRequest(seq)
		}
	}
	return out
}

// failPackets answers relayed requests that will get no reply from their Actor. It
// never waits (it may run where every session's records pass).
func failPackets(pkts []*session.Packet, code, why string) {
	for _, pkt := range pkts {
		_ = pkt.ReplyError(code, why, session.NonBlocking())
	}
}

// Relay sends the packet to the bound Actor actorID as record 24 with the
// bound-session tail. A Request is answered when the Actor replies (its reply rides
// 36 back); nothing is ever resent. While the window toward the Actor's node is full
// the relay waits for room as long as the session lives (its reader pulls nothing
// meanwhile); ctx is the caller's and is not what bounds that wait. While the binding
// is sealed for a relocation the packet is held (relocation.go) and Relay returns at
// once: it goes out, in order, when the route update comes. A session type that
// reuses its Send packets (session.SessionType.ReuseSendPackets) calls Relay during
// OnPacket; a packet Relay holds is retained (session.Packet.Retain). With actorID
// empty, the packet goes to the session's only binding (none when it has several).
func (s *Session) Relay(ctx context.Context, actorID string, pkt *session.Packet) error {
	s.mu.Lock()
	if s.closing || s.closed {
		s.mu.Unlock()
		return ErrSessionClosing
	}
	if actorID == "" {
		actorID = s.only
	}
	bd, ok := s.binds[actorID]
	if !ok {
		err := s.notBound(actorID)
		s.mu.Unlock()
		return err
	}
	s.seq++
	seq := s.seq
	if pkt.IsRequest() {
		s.addRequest(seq, pendingRequest{pkt: pkt, gen: bd.gen, node: bd.fence.Node})
	}
	// Held relays count against the window like sent ones, so a sealed binding still
	// stops its session at the window: no relocation-specific bound (digest §7.13).
	s.relayedOn(bd, seq, int64(len(pkt.Payload)))
	if h := bd.hold; h != nil {
		pkt.Retain() // held past the callback: a session that reuses Sends must not get it back
		h.held = append(h.held, heldRelay{seq: seq, pkt: pkt})
		s.mu.Unlock()
		return nil
	}
	fence, gen := bd.fence, bd.gen
	bd.sending++
	s.mu.Unlock()
	err := s.send(fence, gen, seq, pkt)
	s.sent(bd)
	return err
}

// send sends one relay to the activation at fence. On failure the relay is taken back
// (its Request forgotten, its window slot freed) and the error, of a fault kind,
// returned.
func (s *Session) send(fence actor.RouteFence, gen, seq uint64, pkt *session.Packet) error {
	rec, release := relayRecord(fence, s.rid, gen, seq, pkt, s.b.opts.Codecs)
	// A relay that finds the window toward the Actor's node full waits for room for as
	// long as the session lives (the session stops pulling meanwhile; the Actor's node
	// departing ends the wait): never dropped after an arbitrary delay.
	err := s.b.actors.SendRecord(s.peer.Context(), fence, rec)
	release()
	if err != nil {
		s.mu.Lock()
		if _, ok := s.requests[seq]; ok {
			s.removeRequest(seq)
		}
		if bd := s.byGen[gen]; bd != nil {
			s.unrelayed(bd, seq) // it never left: the window must not wait for it
		}
		s.mu.Unlock()
		if _, ok := fault.Of(err); ok {
			return fmt.Errorf("binding: relay: %w", err)
		}
		return fault.Errorf(fault.Unavailable, "binding: relay: %w", err)
	}
	return nil
}

// disconnected runs after the session's disconnect callback: every binding left gets
// its 38 tombstone (the Actor's disconnect notice), each on its own, failures isolated.
func (s *Session) disconnected(ctx context.Context, _ swire.CloseReason) {
	s.mu.Lock()
	s.closed = true
	binds := s.binds
	for _, bd := range binds {
		s.dropHold(bd) // held relays are never delivered after the session is gone
	}
	s.binds = map[string]*bound{}
	s.byGen = map[uint64]*bound{}
	s.relayedCount.Store(0)
	s.relayedBytes.Store(0)
	s.bindsChanged()
	s.requests = map[uint64]pendingRequest{}
	s.inflight.Store(0)
	if s.expiry != nil {
		s.expiry.Stop()
	}
	s.mu.Unlock()
	s.b.mu.Lock()
	delete(s.b.sessions, s.peer.RoutingID())
	s.b.mu.Unlock()
	for _, bd := range binds {
		s.b.forget(bd.gen)
		// One-way from here: the session is gone, nobody waits for the terminal.
		rec := bindRecord(s.b.oneWayCorrelation(), bd.fence, s.rid, bd.gen, true)
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		if err := s.b.actors.SendRecord(sctx, bd.fence, rec); err != nil {
			s.b.log.Debug("binding: tombstone not sent", "actor", bd.fence.String(), "err", err)
		}
		cancel()
	}
}

// takeRequest removes and returns the relayed request with session sequence seq, if
// it was relayed on binding generation gen.
func (s *Session) takeRequest(seq, gen uint64) *session.Packet {
	s.mu.Lock()
	defer s.mu.Unlock()
	pr, ok := s.requests[seq]
	if !ok || pr.gen != gen {
		return nil
	}
	s.removeRequest(seq)
	if h := s.b.relayLatency; h != nil {
		h.Record(context.Background(), time.Since(pr.start).Seconds())
	}
	return pr.pkt
}

// boundView is a copy of a binding's identity and routes, taken under s.mu: a
// relocation commit changes the route of a binding in place.
type boundView struct {
	actorID   string
	gen       uint64
	fence     actor.RouteFence
	prevFence actor.RouteFence // zero unless the binding moved
}

// current returns the binding of the given generation if it is still current.
func (s *Session) current(gen uint64) (boundView, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if bd := s.byGen[gen]; bd != nil {
		return boundView{actorID: bd.actorID, gen: bd.gen, fence: bd.fence, prevFence: bd.prevFence}, true
	}
	return boundView{}, false
}

// Bind binds the session of peer to the Actor to, wherever it lives: the directory
// finds (or activates) it, then Session.Bind binds that activation. An idle Actor can
// be collected between the lookup and the bind; the bind then finds no activation, and
// one more lookup activates it anew.
func (b *Binder) Bind(ctx context.Context, peer *session.Peer, to actor.Address) (Binding, error) {
	s := b.Session(peer)
	var err error
	// Up to three looks: the cached route, the directory's entry, and the directory's
	// entry once more after it checked the one that failed (each failed fence goes with
	// the next look-up, and the holder replaces it if it is stale).
	for attempt := 0; attempt < 3; attempt++ {
		var f actor.RouteFence
		// A cached route saves a directory look-up (and its future) per bind; a stale
		// one (the activation is gone) fails the bind NotFound and is looked up again.
		if f, err = b.actors.Resolve(ctx, to); err != nil {
			return Binding{}, err
		}
		var bd Binding
		// A route that names no activation (NotFound) or a location the Actor has left
		// (it moved away and back: the activation is there under a newer authority) is
		// dropped at once, and the directory asked.
		if bd, err = s.Bind(ctx, f); !errors.Is(err, fault.NotFound) && !errors.Is(err, ErrLocationStale) {
			return bd, err
		}
		b.actors.ForgetStale(to, f)
	}
	return Binding{}, err
}

// Unbind removes the session's binding of actorID (Session.Unbind).
func (b *Binder) Unbind(ctx context.Context, peer *session.Peer, actorID string) error {
	return b.Session(peer).Unbind(ctx, actorID)
}

// Relay relays the packet to the bound Actor actorID; with actorID empty, to the
// session's only binding (Session.Relay).
func (b *Binder) Relay(ctx context.Context, p *session.Packet, actorID string) error {
	return b.Session(p.Peer).Relay(ctx, actorID, p)
}

// BindingsOf returns the current bindings of the session with routing id id (none when
// it has no binding state).
func (b *Binder) BindingsOf(id session.RoutingID) []Binding {
	b.mu.Lock()
	s := b.sessions[id]
	b.mu.Unlock()
	if s == nil {
		return nil
	}
	return s.Bindings()
}
