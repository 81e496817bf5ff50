package session

// sessionDispatcher schedules one session owner's mailbox runs. A run that is asked for
// while the read loop posts packets is parked for the read loop, which runs it right
// after its post (the turn needs no hand-off to another goroutine); every other run
// goes to the host's worker pool. Parking, rather than running the turn inside the
// post, lets the read loop mark the turn (and arm the rescue of its reading) only once
// its packets are in the mailbox: a rescue reader that started earlier could post the
// next packets first (found by the chaos suite: two replies swapped).
type sessionDispatcher struct{ c *conn }

// The read loop's posting states (conn.inline).
const (
	inlineOff    int32 = iota
	inlineOpen         // the read loop is posting: a run asked for now is parked
	inlineParked       // a run is parked in conn.parked for the read loop
)

func (d sessionDispatcher) Schedule(fn func()) {
	c := d.c
	if c.inline.Load() == inlineOpen {
		// The mailbox asks for one run at a time, so parked has no other writer; the
		// read loop reads it only after it sees inlineParked.
		c.parked = fn
		if c.inline.CompareAndSwap(inlineOpen, inlineParked) {
			return
		}
		c.parked = nil
	}
	c.host.dispatch.Schedule(fn)
}

func (d sessionDispatcher) Throughput() int { return d.c.host.dispatch.Throughput() }
