package session

import (
	"container/list"
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Job-queue profiles (zlink-digest §9.2): permits per effective processor.
const (
	ProfileCompact    = 32
	ProfileLowLatency = 64
	ProfileBalanced   = 128
	ProfileThroughput = 256
)

// Pressure thresholds of digest §9.4, in percent of the limit.
const (
	pausePercent  = 80
	resumePercent = 60
)

// permitPool is the host-wide application job queue: a counting semaphore whose permit
// is taken before a packet is pulled from a connection and handed back immediately
// before the session callback's first instruction (digest §9.3).
//
// The uncontended path is one CAS each way. Waiters queue FIFO (oldest source first)
// under mu and are handed a permit directly by release, so a permit freed while
// sources wait is never grabbed by a newcomer.
type permitPool struct {
	limit  int64
	pauseN int64
	resume int64

	inUse   atomic.Int64
	nwait   atomic.Int64 // waiters queued; read by release without the lock
	peak    atomic.Int64
	waits   atomic.Int64
	waitNs  atomic.Int64
	waiters list.List // of *permitWaiter, guarded by mu

	mu          sync.Mutex  // guards waiters and the pressure state machine
	pausedFlag  atomic.Bool // mirror of paused, so the hot path skips the lock
	paused      bool
	pausedSince time.Time
	pausedTotal time.Duration
	toPaused    int64
	toRunning   int64
}

type permitWaiter struct {
	ready   chan struct{} // closed when the permit was handed over
	granted bool          // guarded by permitPool.mu
}

func newPermitPool(limit int) *permitPool {
	return &permitPool{
		limit:  int64(limit),
		pauseN: (int64(limit)*pausePercent + 99) / 100,
		resume: int64(limit) * resumePercent / 100,
	}
}

// acquire takes one permit, waiting while none is free. It gives up when ctx is done or
// stop is closed, and then reports false.
func (p *permitPool) acquire(ctx context.Context, stop <-chan struct{}) bool {
	if p.tryAcquire() {
		return true
	}
	p.mu.Lock()
	// Announce the waiter before looking at inUse: a release that decrements after our
	// look must then see nwait > 0 and hand the permit over (no lost wake-up).
	p.nwait.Add(1)
	if p.waiters.Len() == 0 {
		for {
			n := p.inUse.Load()
			if n >= p.limit {
				break
			}
			if p.inUse.CompareAndSwap(n, n+1) {
				p.nwait.Add(-1)
				p.mu.Unlock()
				p.afterAcquire(n + 1)
				return true
			}
		}
	}
	w := &permitWaiter{ready: make(chan struct{})}
	elem := p.waiters.PushBack(w)
	p.mu.Unlock()

	p.waits.Add(1)
	start := time.Now()
	defer func() { p.waitNs.Add(int64(time.Since(start))) }()
	select {
	case <-w.ready:
		return true
	case <-ctx.Done():
	case <-stop:
	}
	p.mu.Lock()
	if w.granted {
		// The permit arrived as we gave up: give it back.
		p.mu.Unlock()
		p.release()
		return false
	}
	p.waiters.Remove(elem)
	p.nwait.Add(-1)
	p.mu.Unlock()
	return false
}

// tryAcquire takes a free permit when nobody waits for one, without waiting.
func (p *permitPool) tryAcquire() bool {
	if p.nwait.Load() != 0 {
		return false
	}
	for {
		n := p.inUse.Load()
		if n >= p.limit {
			return false
		}
		if p.inUse.CompareAndSwap(n, n+1) {
			p.afterAcquire(n + 1)
			return true
		}
	}
}

// tryAcquireUpTo takes up to want free permits at once when nobody waits for one,
// without waiting, and returns how many it took.
func (p *permitPool) tryAcquireUpTo(want int64) int64 {
	if p.nwait.Load() != 0 {
		return 0
	}
	for {
		n := p.inUse.Load()
		k := min(want, p.limit-n)
		if k <= 0 {
			return 0
		}
		if p.inUse.CompareAndSwap(n, n+k) {
			p.afterAcquire(n + k)
			return k
		}
	}
}

func (p *permitPool) afterAcquire(n int64) {
	for {
		old := p.peak.Load()
		if n <= old || p.peak.CompareAndSwap(old, n) {
			break
		}
	}
	if n >= p.pauseN && !p.pausedFlag.Load() {
		p.setPaused(true)
	}
}

// release returns one permit, handing it to the oldest waiter if there is one.
func (p *permitPool) release() {
	if p.nwait.Load() > 0 && p.handOver() {
		return
	}
	n := p.inUse.Add(-1)
	if p.nwait.Load() > 0 {
		// A waiter queued between our check and the decrement: wake it if a permit is
		// free for it.
		p.grantFree()
	}
	if n <= p.resume && p.pausedFlag.Load() {
		p.setPaused(false)
	}
}

// handOver passes the caller's permit straight to the oldest waiter.
func (p *permitPool) handOver() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	front := p.waiters.Front()
	if front == nil {
		return false
	}
	p.grant(front)
	return true
}

// grantFree gives free permits to waiters, oldest first.
func (p *permitPool) grantFree() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for front := p.waiters.Front(); front != nil; front = p.waiters.Front() {
		n := p.inUse.Load()
		if n >= p.limit {
			return
		}
		if !p.inUse.CompareAndSwap(n, n+1) {
			continue
		}
		p.grant(front)
	}
}

// grant hands the permit held by the caller to waiter e. mu is held.
func (p *permitPool) grant(e *list.Element) {
	w := p.waiters.Remove(e).(*permitWaiter)
	p.nwait.Add(-1)
	w.granted = true
	close(w.ready)
}

func (p *permitPool) setPaused(paused bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.paused == paused {
		return
	}
	// Re-check under the lock: a stale observation must not overwrite a newer state.
	n := p.inUse.Load()
	if paused && n < p.pauseN || !paused && n > p.resume {
		return
	}
	p.paused = paused
	p.pausedFlag.Store(paused)
	now := time.Now()
	if paused {
		p.toPaused++
		p.pausedSince = now
	} else {
		p.toRunning++
		p.pausedTotal += now.Sub(p.pausedSince)
	}
}

// permitStats is a snapshot for the observable instruments.
type permitStats struct {
	limit, inUse, queued, peak, waiters, waits int64
	waitSeconds                                float64
	paused                                     bool
	toPaused, toRunning                        int64
	pauseCurrent, pauseTotal                   time.Duration
}

func (p *permitPool) stats() permitStats {
	s := permitStats{
		limit:       p.limit,
		inUse:       p.inUse.Load(),
		peak:        p.peak.Load(),
		waiters:     p.nwait.Load(),
		waits:       p.waits.Load(),
		waitSeconds: time.Duration(p.waitNs.Load()).Seconds(),
	}
	p.mu.Lock()
	s.paused = p.paused
	s.toPaused, s.toRunning = p.toPaused, p.toRunning
	s.pauseTotal = p.pausedTotal
	if p.paused {
		s.pauseCurrent = time.Since(p.pausedSince)
		s.pauseTotal += s.pauseCurrent
	}
	p.mu.Unlock()
	return s
}
