// Package connector is the Go client of the zlink STREAM wire (zlink-digest §2–§4): it
// dials tcp://, tls://, ws:// or wss:// endpoints, sends one-way packets and requests,
// matches replies by request_seq, delivers server pushes to handlers, keeps the
// connection alive with heartbeats and reconnects after drops.
//
// New returns a Connector for one endpoint and Options; Connect dials it; Request,
// Send and Handle carry packets; Close ends it for good.
//
// A Connector is safe for concurrent use. Each live connection has a read goroutine, a
// write goroutine and, when heartbeats are on, a heartbeat goroutine. Frames are
// written whole and in call order through one queue, so frames produced concurrently
// share transport writes (one WebSocket binary message holds whole frames). On tcp and
// tls a request usually reads its own reply instead of waiting for the read goroutine
// (see conn). Callbacks (handlers, OnStateChange, OnError) run in order on one dispatch
// goroutine, so a slow handler never delays replies or heartbeats.
//
// Dispatch is always Immediate in the spec's terms: the Manual mode of digest §4.7
// (queue callbacks until the application pumps) is not implemented, and neither is the
// waitFor test surface.
package connector
