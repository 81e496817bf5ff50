// Package stream holds the black-box contract tests of the STREAM server (package
// session) against the seed "STREAM Server Session" and zlink-digest §2, §4.5, §5, §9.3
// and §10. The tests live in package stream_test; stream.go only has the raw-socket
// client (Dial, RawConn, HeaderBuilder) and the throw-away PKI (NewPKI) they share, so
// that nothing here depends on the server's internals: frames are built with
// session/wire or by hand, byte by byte.
package stream
