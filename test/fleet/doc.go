// Package fleet starts in-process meshnode fleets for tests and benchmarks: mesh nodes
// that each run an Actor host, the binding protocol and a STREAM host serving the
// sample session, plus a "probe" Actor kind that records what it sees.
package fleet
