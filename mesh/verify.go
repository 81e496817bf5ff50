package mesh

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sort"
	"sync"
	"time"
)

// Under mesh TLS a node joins the mesh in meshnode's view only once it has proved its
// node id: memberlist admits whoever holds the gossip key, so each node, when
// memberlist reports a new member lifecycle, dials the remote address the member
// gossips and completes a TLS handshake in which the member presents a certificate of
// the fleet CA naming its RID (and this node presents its own). Until then the member
// is pending: it is not in the member table, so no record, placement or directory
// request goes to it, and subscribers hear of it only once it is verified. A member
// that fails is tried again with backoff (500 ms doubling to 30 s) while memberlist
// still reports it; each failure is counted (meshnode.mesh.tls.refused) and logged
// once per interval.

const (
	verifyTimeout  = 5 * time.Second
	verifyFirst    = 500 * time.Millisecond
	verifyMaxDelay = 30 * time.Second
)

// PendingMember is a member lifecycle memberlist reported that this node has not
// admitted: it has not (yet) proved its node id with a fleet certificate.
type PendingMember struct {
	ID         NodeID    `json:"id"`
	RemoteAddr string    `json:"remoteAddr"`
	Since      time.Time `json:"since"`
	// Error is why the last attempt failed (empty before the first one ended).
	Error string `json:"error,omitempty"`
}

type pendingMember struct {
	ev        rawEvent
	mem       Member
	since     time.Time
	err       error
	attempted chan struct{} // closed once the first attempt ended
	once      sync.Once
}

func (p *pendingMember) markAttempted() { p.once.Do(func() { close(p.attempted) }) }

// verifier holds the pending members and runs their verifications; owned by the
// membership, stopped with it.
type verifier struct {
	verify func(ctx context.Context, mem Member) error
	failed func(mem Member, err error)

	mu      sync.Mutex
	pending map[string]*pendingMember // by RID
	stop    chan struct{}
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

func newVerifier(verify func(ctx context.Context, mem Member) error, failed func(Member, error)) *verifier {
	ctx, cancel := context.WithCancel(context.Background())
	return &verifier{verify: verify, failed: failed, pending: map[string]*pendingMember{}, stop: make(chan struct{}), ctx: ctx, cancel: cancel}
}

// hold keeps ev (a join or update of a lifecycle not yet admitted) until mem is
// verified; the membership applies it then.
func (v *verifier) hold(m *membership, ev rawEvent, mem Member) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if p := v.pending[mem.ID.RID]; p != nil && p.mem.ID == mem.ID {
		p.ev, p.mem = ev, mem // the latest metadata is applied once it is verified
		return
	}
	p := &pendingMember{ev: ev, mem: mem, since: time.Now(), attempted: make(chan struct{})}
	if old := v.pending[mem.ID.RID]; old != nil {
		old.markAttempted() // a newer lifecycle replaces it; its goroutine ends
	}
	v.pending[mem.ID.RID] = p
	v.wg.Add(1)
	go v.run(m, p)
}

// forget drops what is pending for rid up to generation gen (memberlist reported it
// gone); it reports whether something was.
func (v *verifier) forget(rid string, gen uint64) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	p := v.pending[rid]
	if p == nil || p.mem.ID.Generation > gen {
		return false
	}
	delete(v.pending, rid)
	p.markAttempted()
	return true
}

func (v *verifier) current(p *pendingMember) bool { return v.pending[p.mem.ID.RID] == p }

func (v *verifier) run(m *membership, p *pendingMember) {
	defer v.wg.Done()
	delay := verifyFirst
	for {
		v.mu.Lock()
		if !v.current(p) {
			v.mu.Unlock()
			return
		}
		mem := p.mem
		v.mu.Unlock()
		ctx, cancel := context.WithTimeout(v.ctx, verifyTimeout)
		err := v.verify(ctx, mem)
		cancel()
		v.mu.Lock()
		if !v.current(p) {
			v.mu.Unlock()
			return
		}
		if err == nil {
			delete(v.pending, mem.ID.RID)
			ev := p.ev
			v.mu.Unlock()
			ev.verified = true
			m.requeue(ev)     // first: a barrier waiting for this attempt finds it queued
			p.markAttempted() //
			return
		}
		p.err = err
		v.mu.Unlock()
		p.markAttempted()
		select {
		case <-v.stop:
			return
		default:
		}
		v.failed(mem, err)
		select {
		case <-v.stop:
			return
		case <-time.After(delay):
		}
		delay = min(2*delay, verifyMaxDelay)
	}
}

// attempts returns what to wait for so that every member pending now has had its
// first verification attempt.
func (v *verifier) attempts() []chan struct{} {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []chan struct{}
	for _, p := range v.pending {
		out = append(out, p.attempted)
	}
	return out
}

// list returns the pending members, by RID.
func (v *verifier) list() []PendingMember {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := make([]PendingMember, 0, len(v.pending))
	for _, p := range v.pending {
		pm := PendingMember{ID: p.mem.ID, RemoteAddr: p.mem.RemoteAddr, Since: p.since.UTC()}
		if p.err != nil {
			pm.Error = p.err.Error()
		}
		out = append(out, pm)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID.RID < out[j].ID.RID })
	return out
}

func (v *verifier) close() {
	close(v.stop)
	v.cancel()
	v.wg.Wait()
}

// waitBarrier closes applied once every member pending now had its first attempt and
// what those attempts admitted is applied (a barrier of the membership: Start waits
// for the members its join found, verified or refused once, before it returns).
func (v *verifier) waitBarrier(m *membership, applied chan struct{}) {
	waits := v.attempts()
	if len(waits) == 0 {
		close(applied)
		return
	}
	v.wg.Add(1)
	go func() {
		defer v.wg.Done()
		defer close(applied)
		for _, w := range waits {
			select {
			case <-w:
			case <-v.stop:
				return
			}
		}
		select {
		case <-m.plainBarrier():
		case <-v.stop:
		}
	}()
}

// verifyMember proves mem's node id: a TLS handshake with its remote address in which
// it presents a fleet certificate naming its RID (this node presents its own; ALPN h2,
// as the gRPC server requires).
func (n *Node) verifyMember(ctx context.Context, mem Member) error {
	if mem.RemoteAddr == "" {
		return errors.New("no remote address gossiped")
	}
	var d net.Dialer
	raw, err := d.DialContext(ctx, "tcp", mem.RemoteAddr)
	if err != nil {
		return fmt.Errorf("dial %s: %w", mem.RemoteAddr, err)
	}
	defer raw.Close()
	cfg := n.sec.certs.ClientTLS(mem.ID.RID)
	cfg.NextProtos = []string{"h2"}
	conn := tls.Client(raw, cfg)
	if err := conn.HandshakeContext(ctx); err != nil {
		return err
	}
	return conn.Close()
}

// PendingMembers returns the member lifecycles memberlist reported that this node has
// not admitted, because they have not proved their node id with a fleet certificate
// (always empty without mesh TLS).
func (m *Membership) PendingMembers() []PendingMember {
	if v := m.n.members.ver; v != nil {
		return v.list()
	}
	return nil
}
