// Package wake is a broadcast wake-up for goroutines that wait for a condition another
// goroutine changes: a reader waiting for its session's queue to drain, senders waiting
// for a peer's window to open. Notify costs one atomic load when nobody waits. Signal
// is the type (the zero value is ready): waiters call Wait, the changing side Notify.
package wake
