package session

import (
	"sync"
	"time"
)

// workerDispatcher runs session-owner mailboxes on a pool of long-lived goroutines.
// protoactor's default dispatcher starts a fresh goroutine per mailbox run, and the
// fresh stack then grows (and is copied) on every packet; a parked worker already has
// the stack a session turn needs. When no worker is idle a new one starts, so a turn
// never waits for another session's turn. Idle workers exit after workerIdle, and all
// of them when the host stops.
type workerDispatcher struct {
	work       chan func() // unbuffered: a send succeeds only into an idle worker
	quit       chan struct{}
	throughput int
	wg         sync.WaitGroup
	stopOnce   sync.Once
}

const workerIdle = 10 * time.Second

func newWorkerDispatcher(throughput int) *workerDispatcher {
	return &workerDispatcher{work: make(chan func()), quit: make(chan struct{}), throughput: throughput}
}

func (d *workerDispatcher) Schedule(fn func()) {
	select {
	case d.work <- fn:
		return
	default:
	}
	select {
	case <-d.quit:
		// The host stopped: run on a throwaway goroutine like the default dispatcher.
		go fn()
		return
	default:
	}
	d.wg.Add(1)
	go d.worker(fn)
}

func (d *workerDispatcher) Throughput() int { return d.throughput }

func (d *workerDispatcher) worker(fn func()) {
	defer d.wg.Done()
	fn()
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		select {
		case fn := <-d.work:
			fn()
			idle.Reset(workerIdle)
		case <-idle.C:
			return
		case <-d.quit:
			return
		}
	}
}

// stop makes idle workers exit and waits for the busy ones to finish their run.
func (d *workerDispatcher) stop() {
	d.stopOnce.Do(func() { close(d.quit) })
	d.wg.Wait()
}

// sessionDispatcher schedules one session owner's mailbox runs. A run that the read
// loop starts while posting a packet executes right there on the read loop goroutine
// (the turn needs no hand-off to another goroutine); every other run goes to the
// host's worker pool. The inline flag is consumed by the first schedule that sees it;
// in the rare case that another goroutine's post wins the mailbox's scheduling race
// within the read loop's post, that goroutine runs the turn, which is still serial.
type sessionDispatcher struct{ c *conn }

func (d sessionDispatcher) Schedule(fn func()) {
	if d.c.inline.CompareAndSwap(true, false) {
		fn()
		return
	}
	d.c.host.dispatch.Schedule(fn)
}

func (d sessionDispatcher) Throughput() int { return d.c.host.dispatch.throughput }
