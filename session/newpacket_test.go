package session

import (
	"testing"
	"unsafe"
)

// Every frame size gets a body of exactly its length whose capacity ends there (an
// append cannot run into a neighbour), in the Packet's own allocation up to
// inlineBody, and a write to all of it leaves the Packet's fields alone.
func TestNewPacket_BodyIsExactlyTheFrameAtEverySize(t *testing.T) {
	for n := 0; n <= inlineBody+40; n++ {
		p, body := newPacket(n)
		if p == nil || len(body) != n || cap(body) != n {
			t.Fatalf("size %d: packet %v, body len %d cap %d", n, p != nil, len(body), cap(body))
		}
		p.Name, p.RequestSeq = "name", 7
		for i := range body {
			body[i] = 0xff
		}
		if p.Name != "name" || p.RequestSeq != 7 || p.Kind != 0 || p.next != nil || p.span != nil {
			t.Fatalf("size %d: writing the body changed the packet: %+v", n, p)
		}
	}
}

// The reuse mark shares the first word with the one-byte fields: a Packet stays 136
// bytes, so a small frame and its packet still fit the 192-byte size class.
func TestPacket_StaysInItsSizeClass(t *testing.T) {
	if size := unsafe.Sizeof(Packet{}); size != 136 {
		t.Fatalf("Packet is %d bytes, want 136", size)
	}
}
