package session

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

func (d sessionDispatcher) Throughput() int { return d.c.host.dispatch.Throughput() }
