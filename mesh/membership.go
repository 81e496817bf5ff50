package mesh

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// MemberState is a member's state as this node sees it.
type MemberState string

const (
	StateAlive   MemberState = "alive"
	StateSuspect MemberState = "suspect" // a member that does not answer this node's probe
	StateDead    MemberState = "dead"    // failed: died without leaving
	StateLeft    MemberState = "left"    // left gracefully
)

// Member is one node lifecycle known to the mesh.
type Member struct {
	ID            NodeID
	MeshAddr      string // memberlist host:port
	RemoteAddr    string // protoactor remote host:port
	AdvertiseHost string
	// AdminAddr is the member's admin HTTP host:port (Config.AdminAddr); empty when it
	// gossips none.
	AdminAddr string
	State     MemberState
	// Since is when this node saw the member enter its state (joined, failed, left, or
	// became suspect); zero for this node's own entry before it is applied.
	Since time.Time
	// Versions is what the member announces of its build and wire formats; zero when
	// it gossips node metadata older than version 3 (docs/upgrading.md).
	Versions Versions
}

// Versions is what a node announces of itself (node metadata version 3): its build
// and the versions of the wire formats it speaks (internal/buildinfo).
type Versions struct {
	// Build is the module version of its binary (v1.4.0, a pseudo-version, or
	// "(devel)"); Revision the VCS revision it was built from, shortened.
	Build    string `json:"build"`
	Revision string `json:"revision,omitempty"`
	// Stream is the STREAM wire version, Service the service-wire major of the
	// records, Meta the newest node metadata version it reads, Snapshot the format of
	// an Actor's state in a move.
	Stream   uint8 `json:"stream"`
	Service  uint8 `json:"serviceWire"`
	Meta     uint8 `json:"nodeMeta"`
	Snapshot uint8 `json:"stateSnapshot"`
}

// IsZero reports whether nothing was announced (a member of an older build).
func (v Versions) IsZero() bool { return v == Versions{} }

// EventType says what happened to a member.
type EventType int

const (
	EventJoined EventType = iota + 1
	EventLeft
	EventFailed
)

func (t EventType) String() string {
	switch t {
	case EventJoined:
		return "joined"
	case EventLeft:
		return "left"
	case EventFailed:
		return "failed"
	}
	return "unknown"
}

// MemberEvent is a membership change: a node lifecycle joined, left or failed.
type MemberEvent struct {
	Type   EventType
	Member Member
}

// memberTable is an immutable snapshot; membership swaps in a new one per change so
// the record path reads it without locks.
type memberTable struct {
	byRID map[string]*Member // current lifecycle per RID, in any state; never written once stored
}

// maxDeparted bounds how many departed members the table remembers for /v1/members.
const maxDeparted = 256

// membership owns the memberlist instance, the member table and the event queue.
type membership struct {
	self  NodeID
	log   *slog.Logger
	list  *memberlist.Memberlist
	table atomic.Pointer[memberTable]

	metaMu sync.Mutex
	meta   []byte

	// Raw memberlist notifications are queued and applied by one goroutine, so
	// delegates never block memberlist and subscribers see events in order.
	qmu    sync.Mutex
	qcond  *sync.Cond
	queue  []rawEvent
	closed bool
	done   chan struct{}

	smu      sync.Mutex
	subs     map[int]func(MemberEvent)
	nextSub  int
	departed []string // RIDs in departure order, for pruning

	joined   chan struct{}
	joinOnce sync.Once
	selfLive chan struct{} // closed once this node's own join is applied
	selfOnce sync.Once

	legacyMeta   bool     // Config.legacyMeta (tests only)
	selfVersions Versions // what this node announces

	// dmax is the delegate protocol maximum of each live memberlist node, by name
	// (readable metadata or not): metaV3Capable says it reads node metadata version 3.
	dmaxMu sync.Mutex
	dmax   map[string]uint8

	// review is signalled after each change applied: the node then reviews which node
	// metadata version to write (Node.metaLoop).
	review chan struct{}

	// suspects are the members whose last probe by this node's failure detector got no
	// ack (memberlist keeps its suspicion private; it logs this one), by RID, with
	// when; a direct ack or a membership change of the member clears it.
	suspects sync.Map // string -> time.Time

	// conflictMu guards conflict: the first live member seen with this node's RID at
	// another address (memberlist refuses such a node on both sides). settled: this
	// node joined (or had no seed): a later conflict is another process that was
	// refused, not this one.
	conflictMu sync.Mutex
	conflict   *ridConflict
	settled    atomic.Bool
	settledAt  time.Time     // written once, before seeded closes
	seeded     chan struct{} // closed when settled
	refused    chan struct{} // closed when a join found this node's RID live (joinLoop)
}

// ridConflict is a live member that holds this node's RID at another address.
type ridConflict struct {
	addr, admin string
	generation  uint64
}

type rawKind int

const (
	rawJoin rawKind = iota
	rawLeave
	rawUpdate
	rawBarrier // applied is closed once every notification queued before it is applied
)

type rawEvent struct {
	kind    rawKind
	node    memberlist.Node // copy
	applied chan struct{}   // rawBarrier
}

func newMembership(self NodeID, meta []byte, log *slog.Logger) *membership {
	m := &membership{self: self, log: log, meta: meta, subs: map[int]func(MemberEvent){}, done: make(chan struct{}), joined: make(chan struct{}),
		selfLive: make(chan struct{}), review: make(chan struct{}, 1),
		seeded: make(chan struct{}), refused: make(chan struct{}), dmax: map[string]uint8{}}
	m.qcond = sync.NewCond(&m.qmu)
	m.table.Store(&memberTable{byRID: map[string]*Member{}})
	go m.run()
	return m
}

// memberlist.Delegate: only the metadata matters to us.
func (m *membership) NodeMeta(limit int) []byte {
	m.metaMu.Lock()
	defer m.metaMu.Unlock()
	return m.meta
}

func (m *membership) setMeta(b []byte) {
	m.metaMu.Lock()
	m.meta = b
	m.metaMu.Unlock()
}
func (m *membership) NotifyMsg([]byte)                           {}
func (m *membership) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (m *membership) LocalState(join bool) []byte                { return nil }
func (m *membership) MergeRemoteState(buf []byte, join bool)     {}

// memberlist.ConflictDelegate: a member with this node's RID at another address. Both
// memberlists refuse the other; when this node has not joined yet, its start fails
// (Node.joinRefused), else it logs that another process was refused.
func (m *membership) NotifyConflict(existing, other *memberlist.Node) {
	if existing.Name != m.self.RID {
		return // between two other members: memberlist logs it
	}
	meta, _ := decodeMeta(other.Meta)
	if m.settled.Load() {
		m.log.Warn("mesh: another process started with this node's id; the mesh refused it and keeps this node",
			"rid", m.self.RID, "other", other.Address(), "otherGeneration", meta.Generation)
		return
	}
	m.conflictMu.Lock()
	if m.conflict == nil {
		m.conflict = &ridConflict{addr: other.Address(), admin: meta.AdminAddr, generation: meta.Generation}
	}
	m.conflictMu.Unlock()
}

// settle marks this node as in the mesh: it joined through a seed, or has none. From
// here a live member with its RID is another process, which the mesh refuses.
func (m *membership) settle() {
	if m.settled.CompareAndSwap(false, true) {
		m.settledAt = time.Now()
		close(m.seeded)
	}
}

// refusal returns the error of a node whose RID a live member holds, or nil.
func (m *membership) refusal() error {
	m.conflictMu.Lock()
	c := m.conflict
	m.conflictMu.Unlock()
	if c == nil {
		return nil
	}
	admin := ""
	if c.admin != "" {
		admin = ", admin " + c.admin
	}
	return fmt.Errorf("%w: %q is the live member at %s (generation %d%s); this process was refused and the mesh is unchanged: give it another id (Config.RID, --node-id)",
		ErrDuplicateRID, m.self.RID, c.addr, c.generation, admin)
}

// memberlist.PingDelegate: a direct ack clears a suspicion of the member.
func (m *membership) AckPayload() []byte { return nil }
func (m *membership) NotifyPingComplete(other *memberlist.Node, _ time.Duration, _ []byte) {
	m.suspects.Delete(other.Name)
}

// suspected records that this node's failure detector got no ack from rid.
func (m *membership) suspected(rid string) {
	m.suspects.LoadOrStore(rid, time.Now())
}

// withSuspicion marks the alive members this node suspects (suspects) as suspect.
func (m *membership) withSuspicion(members []Member) []Member {
	for i := range members {
		if members[i].State != StateAlive {
			continue
		}
		if at, ok := m.suspects.Load(members[i].ID.RID); ok {
			members[i].State, members[i].Since = StateSuspect, at.(time.Time)
		}
	}
	return members
}

// memberlist.EventDelegate.
func (m *membership) NotifyJoin(n *memberlist.Node)   { m.push(rawJoin, n) }
func (m *membership) NotifyLeave(n *memberlist.Node)  { m.push(rawLeave, n) }
func (m *membership) NotifyUpdate(n *memberlist.Node) { m.push(rawUpdate, n) }

func (m *membership) push(k rawKind, n *memberlist.Node) {
	cp := *n
	cp.Meta = bytes.Clone(n.Meta)
	m.qmu.Lock()
	if !m.closed {
		m.queue = append(m.queue, rawEvent{kind: k, node: cp})
		m.qcond.Signal()
	}
	m.qmu.Unlock()
}

// barrier returns a channel that is closed once the notifications queued so far are
// applied to the table (and their events emitted): memberlist notifies a join's
// members inside Join, and the table must hold them before Start returns.
func (m *membership) barrier() <-chan struct{} {
	ch := make(chan struct{})
	m.qmu.Lock()
	if m.closed {
		close(ch)
	} else {
		m.queue = append(m.queue, rawEvent{kind: rawBarrier, applied: ch})
		m.qcond.Signal()
	}
	m.qmu.Unlock()
	return ch
}

func (m *membership) run() {
	defer close(m.done)
	for {
		m.qmu.Lock()
		for len(m.queue) == 0 && !m.closed {
			m.qcond.Wait()
		}
		if m.closed && len(m.queue) == 0 {
			m.qmu.Unlock()
			return
		}
		batch := m.queue
		m.queue = nil
		m.qmu.Unlock()
		for _, ev := range batch {
			if ev.kind == rawBarrier {
				close(ev.applied)
				continue
			}
			m.apply(ev)
		}
	}
}

func (m *membership) stop() {
	m.qmu.Lock()
	m.closed = true
	m.qcond.Broadcast()
	m.qmu.Unlock()
	<-m.done
}

// apply turns one memberlist notification into table changes and member events.
func (m *membership) apply(ev rawEvent) {
	m.noteCapability(ev)
	meta, err := decodeMeta(ev.node.Meta)
	if err == nil && m.legacyMeta && ev.node.Meta[0] >= metaVersion3 {
		err = errBadMeta // as a build before version 3 reads it
	}
	if err != nil {
		m.log.Warn("mesh: ignoring member with unreadable metadata", "name", ev.node.Name, "err", err)
		return
	}
	mem := Member{
		ID:            NodeID{RID: meta.RID, Generation: meta.Generation},
		MeshAddr:      ev.node.Address(),
		RemoteAddr:    meta.RemoteAddr,
		AdvertiseHost: meta.AdvertiseHost,
		AdminAddr:     meta.AdminAddr,
		State:         StateAlive,
		Since:         time.Now(),
		Versions:      meta.Versions,
	}
	defer m.signalReview()
	m.suspects.Delete(mem.ID.RID)
	old := m.table.Load()
	var prev Member
	prevp, had := old.byRID[mem.ID.RID]
	if had {
		prev = *prevp
	}
	var events []MemberEvent
	switch ev.kind {
	case rawJoin, rawUpdate:
		if had && prev.ID.Generation == mem.ID.Generation && prev.State == StateAlive {
			if prev.RemoteAddr == mem.RemoteAddr && prev.MeshAddr == mem.MeshAddr && prev.AdminAddr == mem.AdminAddr && prev.Versions == mem.Versions {
				return // nothing we track changed
			}
			mem.Since = prev.Since // the same lifecycle, still alive
		} else {
			if had && prev.ID.Generation != mem.ID.Generation && (prev.State == StateAlive || prev.State == StateSuspect) {
				// A restart that memberlist saw as an update: the old lifecycle is over.
				prev.State = StateDead
				events = append(events, MemberEvent{Type: EventFailed, Member: prev})
			}
			events = append(events, MemberEvent{Type: EventJoined, Member: mem})
		}
	case rawLeave:
		if had && prev.ID.Generation > mem.ID.Generation {
			return // a late notice about an earlier lifecycle
		}
		mem.State = StateDead
		typ := EventFailed
		if meta.Leaving {
			mem.State = StateLeft
			typ = EventLeft
		}
		if had && prev.ID.Generation == mem.ID.Generation && (prev.State == StateDead || prev.State == StateLeft) {
			return
		}
		events = append(events, MemberEvent{Type: typ, Member: mem})
	}
	next := &memberTable{byRID: make(map[string]*Member, len(old.byRID)+1)}
	for k, v := range old.byRID {
		next.byRID[k] = v
	}
	next.byRID[mem.ID.RID] = &mem
	if mem.State == StateDead || mem.State == StateLeft {
		m.departed = append(m.departed, mem.ID.RID)
		for len(m.departed) > maxDeparted {
			rid := m.departed[0]
			m.departed = m.departed[1:]
			if e, ok := next.byRID[rid]; ok && (e.State == StateDead || e.State == StateLeft) {
				delete(next.byRID, rid)
			}
		}
	}
	m.table.Store(next)
	for _, e := range events {
		if e.Member.ID.RID != m.self.RID && e.Type == EventJoined {
			m.joinOnce.Do(func() { close(m.joined) })
		}
		if e.Member.ID == m.self && e.Type == EventJoined {
			m.selfOnce.Do(func() { close(m.selfLive) })
		}
		lv := slog.LevelInfo
		if e.Type == EventFailed {
			lv = slog.LevelWarn // a member that died without leaving is a fault; a leave is not
		}
		m.log.Log(context.Background(), lv, "mesh: member "+e.Type.String(), "rid", e.Member.ID.RID, "generation", e.Member.ID.Generation, "addr", e.Member.MeshAddr)
		m.emit(e)
	}
}

// noteCapability records whether the node of a memberlist notification reads node
// metadata version 3, whatever its metadata (an older node may not read ours).
func (m *membership) noteCapability(ev rawEvent) {
	m.dmaxMu.Lock()
	defer m.dmaxMu.Unlock()
	if ev.kind == rawLeave {
		delete(m.dmax, ev.node.Name)
		return
	}
	m.dmax[ev.node.Name] = ev.node.DMax
	m.signalReview()
}

// allReadV3 reports whether every live node reads node metadata version 3.
func (m *membership) allReadV3() bool {
	m.dmaxMu.Lock()
	defer m.dmaxMu.Unlock()
	for _, d := range m.dmax {
		if d < metaV3Capable {
			return false
		}
	}
	return true
}

// signalReview asks for a review of the metadata version (non-blocking).
func (m *membership) signalReview() {
	select {
	case m.review <- struct{}{}:
	default:
	}
}

func (m *membership) emit(e MemberEvent) {
	m.smu.Lock()
	subs := make([]func(MemberEvent), 0, len(m.subs))
	keys := make([]int, 0, len(m.subs))
	for k := range m.subs {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	for _, k := range keys {
		subs = append(subs, m.subs[k])
	}
	m.smu.Unlock()
	for _, fn := range subs {
		fn(e)
	}
}

func (m *membership) subscribe(fn func(MemberEvent)) func() {
	m.smu.Lock()
	id := m.nextSub
	m.nextSub++
	m.subs[id] = fn
	m.smu.Unlock()
	return func() {
		m.smu.Lock()
		delete(m.subs, id)
		m.smu.Unlock()
	}
}

// lookup returns the current lifecycle of rid.
func (m *membership) lookup(rid string) (Member, bool) {
	mem, ok := m.table.Load().byRID[rid]
	if !ok {
		return Member{}, false
	}
	return *mem, true
}

// live reports whether id is the current lifecycle of a member that has not departed.
func (m *membership) live(id NodeID) (Member, bool) {
	mem := m.liveMember(id)
	if mem == nil {
		return Member{}, false
	}
	return *mem, true
}

// liveMember is live without copying the member: the record path asks on every
// record. The Member must not be written.
func (m *membership) liveMember(id NodeID) *Member {
	mem := m.table.Load().byRID[id.RID]
	if mem == nil || mem.ID.Generation != id.Generation || mem.State == StateDead || mem.State == StateLeft {
		return nil
	}
	return mem
}

// liveAt returns the live member whose remote address is addr.
func (m *membership) liveAt(addr string) (Member, bool) {
	for _, mem := range m.table.Load().byRID {
		if mem.RemoteAddr == addr && (mem.State == StateAlive || mem.State == StateSuspect) {
			return *mem, true
		}
	}
	return Member{}, false
}

// members returns every known member sorted by RID. This node's own entry has its
// versions even while it gossips metadata older than version 3.
func (m *membership) members() []Member {
	t := m.table.Load()
	out := make([]Member, 0, len(t.byRID))
	for _, mem := range t.byRID {
		out = append(out, *mem)
		if mem.ID == m.self {
			out[len(out)-1].Versions = m.selfVersions
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID.RID < out[j].ID.RID })
	return out
}

// probe pings every live member directly and marks the ones that do not answer as
// suspect. memberlist keeps its own suspicion private, so this is this node's view.
func (m *membership) probe(ctx context.Context, members []Member) []Member {
	var wg sync.WaitGroup
	out := make([]Member, len(members))
	copy(out, members)
	for i := range out {
		if out[i].State != StateAlive || out[i].ID.RID == m.self.RID {
			continue
		}
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			addr, err := resolveUDP(out[i].MeshAddr)
			if err != nil {
				out[i].State = StateSuspect
				return
			}
			if _, err := m.list.Ping(out[i].ID.RID, addr); err != nil {
				out[i].State = StateSuspect
			}
		}(i)
	}
	wg.Wait()
	return out
}

// suspicionCounts are the suspicions memberlist reports in its log (it keeps them
// otherwise private): Suspected counts peers this node declared suspect; Refuted
// counts suspicions (or failure declarations) of this node that it refuted, each one a
// suspicion of a node that was alive, i.e. false.
type suspicionCounts struct {
	suspected, refuted atomic.Int64
}

// slogWriter routes memberlist's log.Logger output into slog, mapping its [LEVEL]
// prefixes, and counts suspicions.
type slogWriter struct {
	log    *slog.Logger
	counts *suspicionCounts
	// stopping: once this node is stopping, memberlist's complaints (a gossip sent on
	// the transport its own shutdown just closed) are the shutdown, not a fault.
	stopping *atomic.Bool
	// onSuspect is told the name of each member this node's failure detector suspects.
	onSuspect func(name string)
}

// memberlistLevels maps memberlist's log prefixes to levels.
var memberlistLevels = []struct {
	prefix string
	level  slog.Level
}{{"[DEBUG]", slog.LevelDebug}, {"[INFO]", slog.LevelInfo}, {"[WARN]", slog.LevelWarn}, {"[ERR]", slog.LevelError}, {"[ERROR]", slog.LevelError}}

func (w slogWriter) Write(p []byte) (int, error) {
	msg := strings.TrimSpace(string(p))
	if w.counts != nil {
		switch {
		case strings.Contains(msg, "memberlist: Suspect ") && strings.Contains(msg, "has failed, no acks received"):
			w.counts.suspected.Add(1)
			if w.onSuspect != nil {
				name, _, _ := strings.Cut(msg[strings.Index(msg, "memberlist: Suspect ")+len("memberlist: Suspect "):], " has failed")
				w.onSuspect(name)
			}
		case strings.Contains(msg, "memberlist: Refuting a suspect message"), strings.Contains(msg, "memberlist: Refuting a dead message"):
			w.counts.refuted.Add(1)
		}
	}
	level := slog.LevelInfo
	for _, l := range memberlistLevels {
		if strings.HasPrefix(msg, l.prefix) {
			level = l.level
			msg = strings.TrimSpace(strings.TrimPrefix(msg, l.prefix))
			break
		}
	}
	if w.stopping != nil && w.stopping.Load() {
		level = slog.LevelDebug
	}
	w.log.Log(context.Background(), level, msg, "component", "memberlist")
	return len(p), nil
}

// joinLoop keeps trying to join seeds with backoff until one answers or stop closes.
func (m *membership) joinLoop(seeds []string, stop <-chan struct{}, first error) {
	delay := 500 * time.Millisecond
	err := first
	for {
		m.log.Warn("mesh: cannot join seeds, retrying", "seeds", strings.Join(seeds, ","), "retry_in", delay, "err", err)
		select {
		case <-stop:
			return
		case <-time.After(delay):
		}
		var n int
		n, err = m.list.Join(seeds)
		if n > 0 && !m.settled.Load() {
			if m.refusal() != nil {
				close(m.refused) // the node is closed by its owner; no more joins
				return
			}
			// As in Start: settled once the seed's members are applied, so that the
			// node sees them when it is told it is in the mesh.
			select {
			case <-m.barrier():
			case <-stop:
				return
			}
			m.settle()
		}
		if err == nil && n > 0 {
			m.log.Info("mesh: joined", "seeds", strings.Join(seeds, ","), "contacted", n)
			return
		}
		delay = min(delay*2, 30*time.Second)
	}
}

func resolveUDP(addr string) (net.Addr, error) { return net.ResolveUDPAddr("udp", addr) }
