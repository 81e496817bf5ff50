// Package testkit is what meshnode's own tests and benchmarks share: bounded waits
// (Eventually, Within, Await) so that nothing waits forever on a lost
// message, a throw-away PKI (NewPKI), a raw STREAM client that builds and reads frames
// byte by byte (Dial, RawConn, NewHeader, ReadFrameFrom), a connector dialer and a
// buffer safe for concurrent writers. It is internal: the public test kit for users'
// Actors is mesh/meshtest.
package testkit
