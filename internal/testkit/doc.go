// Package testkit is what meshnode's own tests and benchmarks share: bounded waits
// (Eventually, Await, SpinUntil) so that nothing waits forever on a lost message, a
// watchdog for sockets read in timed loops, a throw-away PKI, and a raw STREAM frame
// client that builds and reads frames byte by byte. It is internal: the public test
// kit for users' Actors is mesh/meshtest.
package testkit
