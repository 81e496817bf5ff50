// Package grpcbuf is the buffer pool of the gRPC connections between nodes.
//
// gRPC's default pool has tiers of 256 B, 4, 16 and 32 KiB and 1 MiB, and clears a
// pooled buffer's whole capacity before handing it out again. A coalesced envelope
// (up to 64 KiB of records) falls in the 1 MiB tier, so each one received cost a
// 1 MiB clear: a sixth of a busy receiver's CPU. Every caller of the pool overwrites
// the bytes it asks for (gRPC reads a message into its buffer with io.ReadFull and
// marshals into it from the start), so this pool does not clear, and its tiers are
// every power of two from 256 B to 4 MiB (gRPC's largest message by default).
package grpcbuf

import (
	"math/bits"
	"sync"
)

const (
	minShift = 8  // 256 B: smaller buffers are not pooled
	maxShift = 22 // 4 MiB: larger ones are not pooled
)

// Pool is a mem.BufferPool (google.golang.org/grpc/mem) of uncleared buffers in
// power-of-two tiers. The zero value is ready to use.
type Pool struct {
	tiers [maxShift - minShift + 1]sync.Pool
}

// Get returns a buffer of length n. Its contents are whatever it held before.
func (p *Pool) Get(n int) *[]byte {
	t, ok := tierFor(n)
	if !ok {
		b := make([]byte, n)
		return &b
	}
	if bp, _ := p.tiers[t].Get().(*[]byte); bp != nil {
		*bp = (*bp)[:n]
		return bp
	}
	b := make([]byte, n, 1<<(t+minShift))
	return &b
}

// Put returns a buffer to the pool: to the largest tier its capacity fills.
func (p *Pool) Put(bp *[]byte) {
	c := cap(*bp)
	if c < 1<<minShift {
		return
	}
	t := bits.Len(uint(c)) - 1 - minShift
	if t >= len(p.tiers) {
		return
	}
	p.tiers[t].Put(bp)
}

// tierFor returns the smallest tier whose buffers hold n bytes.
func tierFor(n int) (int, bool) {
	if n <= 1<<minShift {
		return 0, true
	}
	t := bits.Len(uint(n-1)) - minShift
	return t, t < maxShift-minShift+1
}
