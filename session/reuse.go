package session

import (
	"strings"
	"sync"
	"unsafe"

	"github.com/meshnode/meshnode/session/wire"
)

// Send packet reuse (SessionType.ReuseSendPackets). A pipelining client's Sends are
// read at a rate where allocating each one's Packet was a quarter of the read loop,
// and the garbage it left ran the collector a few hundred times a second and its
// scavenger after it (returning pages that the next allocations fault back in). A
// session type that does not keep its Send packets hands each one back when its
// callback returns, and the read loop reads a later Send into it.
//
// Only frames that fit in a packetWithBody120 are reused: one size for all (the size
// classes of newPacket exist to allocate fewer bytes, which does not matter once
// nothing is allocated).
//
// A returned packet goes first to its connection: the turns of one mailbox message push
// their packets on the connection's spares (a lock-free stack) together, and the reader
// takes the whole stack at once when its own list runs out, so packets change hands
// with one atomic operation on each side per batch. A sync.Pool Get and Put cost three
// times as much per packet. The spares
// are at most the packets in flight (MaxPendingPackets), and before the reader waits
// for bytes on an empty receive buffer it hands them to reusablePackets, the pool all
// connections share, and the collector empties what no connection took. A session that
// stops sending keeps at most the spares of turns that ended after its reader began
// to wait (MaxPendingPackets of them, 4 KiB by default), until it sends again.
var reusablePackets sync.Pool

// reusablePacket returns an empty packet, marked reusable, and a buffer of n bytes
// (n <= inlineBody) for its frame, inside the packet's own allocation. The reader
// calls it.
func (c *conn) reusablePacket(n int) (*Packet, []byte) {
	p := c.spareLocal
	if p == nil && c.spares.Load() != nil {
		p = c.spares.Swap(nil)
	}
	var pb *packetWithBody120
	if p != nil {
		c.spareLocal, p.next = p.next, nil
		pb = boxOf(p)
	} else if pb, _ = reusablePackets.Get().(*packetWithBody120); pb == nil {
		pb = new(packetWithBody120)
	}
	pb.p.reusable = true
	return &pb.p, pb.body[:n:n]
}

// spareList is a list of reusable packets whose callbacks returned, linked through
// next, being gathered by a session owner's turns.
type spareList struct{ head, tail *Packet }

// add empties p and puts it on the list.
func (l *spareList) add(p *Packet) {
	*p = Packet{} // drop what the packet points to: a spare must not keep it alive
	p.next = l.head
	l.head = p
	if l.tail == nil {
		l.tail = p
	}
}

// recyclePackets takes back the reusable packets of a chain whose turns ran, all with
// one atomic operation: the session owner calls it.
func (c *conn) recyclePackets(l spareList) {
	if l.head == nil {
		return
	}
	for {
		top := c.spares.Load()
		l.tail.next = top
		if c.spares.CompareAndSwap(top, l.head) {
			return
		}
	}
}

// releaseSpares hands the connection's spare packets to the shared pool. The reader
// calls it before it waits for bytes with nothing buffered.
func (c *conn) releaseSpares() {
	for _, list := range [2]*Packet{c.spareLocal, c.spares.Swap(nil)} {
		for p := list; p != nil; {
			next := p.next
			p.next = nil
			reusablePackets.Put(boxOf(p))
			p = next
		}
	}
	c.spareLocal = nil
}

// boxOf returns the packetWithBody120 whose first field p is (every reusable packet is
// one: reusablePacket made it).
func boxOf(p *Packet) *packetWithBody120 { return (*packetWithBody120)(unsafe.Pointer(p)) }

// pullsReusable reports whether the frame (after its prefix, header length hl) is read
// into a reusable packet: a Send, small enough, of a session type that reuses them.
func (c *conn) pullsReusable(frame []byte, hl int) bool {
	return c.reuseSends && len(frame) <= inlineBody && hl >= 2 && wire.Kind(frame[1]) == wire.KindSend
}

// internName returns name as a string of its own, so that a reused packet's Name stays
// valid after the packet is overwritten (a session may keep it, as a map key say). A
// session's Sends mostly repeat one name, so the last one is kept and shared.
func (c *conn) internName(name string) string {
	if name != c.lastName {
		c.lastName = strings.Clone(name)
	}
	return c.lastName
}
