// Package workpool is a protoactor dispatcher on a pool of long-lived goroutines, for
// the actors of meshnode's hosts (session owners, Actor activations).
package workpool

import (
	"sync"
	"time"
)

// Pool is a protoactor dispatcher that runs mailboxes on long-lived goroutines.
// protoactor's default dispatcher starts a fresh goroutine per mailbox run, and the
// fresh stack then grows (and is copied) on every message that goes deep (a decode, a
// reply through the codec); a parked worker already has the stack a turn needs. When
// no worker is idle a new one starts, so a turn never waits for another actor's turn.
// Idle workers exit after Idle, and all of them on Stop.
type Pool struct {
	work       chan func() // unbuffered: a send succeeds only into an idle worker
	quit       chan struct{}
	throughput int
	wg         sync.WaitGroup
	stopOnce   sync.Once
}

// Idle is how long a worker waits for work before it exits.
const Idle = 10 * time.Second

// New returns a pool whose mailboxes process up to throughput messages per run.
func New(throughput int) *Pool {
	return &Pool{work: make(chan func()), quit: make(chan struct{}), throughput: throughput}
}

// Schedule runs fn on an idle worker, or a new one.
func (d *Pool) Schedule(fn func()) {
	select {
	case d.work <- fn:
		return
	default:
	}
	select {
	case <-d.quit:
		// The pool stopped: run on a throwaway goroutine like the default dispatcher.
		go fn()
		return
	default:
	}
	d.wg.Add(1)
	go d.worker(fn)
}

// Throughput is the messages a mailbox processes per run.
func (d *Pool) Throughput() int { return d.throughput }

func (d *Pool) worker(fn func()) {
	defer d.wg.Done()
	fn()
	idle := time.NewTimer(Idle)
	defer idle.Stop()
	for {
		select {
		case fn := <-d.work:
			fn()
			idle.Reset(Idle)
		case <-idle.C:
			return
		case <-d.quit:
			return
		}
	}
}

// Release makes idle workers exit, and busy ones when their run ends, without waiting
// for them (a turn blocked in application code must not block its host's shutdown).
func (d *Pool) Release() { d.stopOnce.Do(func() { close(d.quit) }) }

// Stop makes idle workers exit and waits for the busy ones to finish their run.
func (d *Pool) Stop() {
	d.stopOnce.Do(func() { close(d.quit) })
	d.wg.Wait()
}
