package connector

import "time"

// SetReaderGrace sets how long the reader token may stay free before the read goroutine
// takes it back (readerGrace). Tests set it before Connect: a long grace makes every
// request after the first reply lead, deterministically.
func SetReaderGrace(c *Connector, d time.Duration) { c.grace = d }

// Leads reports how many requests read their own reply.
func Leads(c *Connector) uint64 { return c.leads.Load() }

// TokenFree reports whether nobody holds the reader token of the live connection.
func TokenFree(c *Connector) bool {
	cn := c.live.Load()
	if cn == nil {
		return false
	}
	cn.mu.Lock()
	defer cn.mu.Unlock()
	return cn.rowner == readerNone
}

// OnMidFrameRead runs f (until the test ends) each time a reader is about to read on in
// a frame of which it has part: it may block there for the rest.
func OnMidFrameRead(t interface{ Cleanup(func()) }, f func()) {
	midFrameRead.Store(&f)
	t.Cleanup(func() { midFrameRead.Store(nil) })
}
