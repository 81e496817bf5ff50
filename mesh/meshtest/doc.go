// Package meshtest starts in-process fleets on loopback for tests: N meshnode nodes in
// one process (each started with meshnode.Start, the one wiring path) that find each
// other by gossip, with helpers to wait for convergence, stop a node gracefully or kill
// it, restart it under a new generation, and read every record that crossed a node
// boundary. The project's own tests use it; so can users' tests of their Actors.
package meshtest
