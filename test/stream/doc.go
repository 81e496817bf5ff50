// Package stream holds the black-box contract tests of the STREAM server (package
// session) against the zlink STREAM Server Session specification: framing, the
// session lifecycle, transports, ordering, backpressure, metrics and bad input. The
// tests live in package stream_test and reach the server only through its public
// surface and the socket: frames are built with session/wire or byte by byte with the
// raw client of internal/testkit.
package stream
