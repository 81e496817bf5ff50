// Package session is the STREAM server: stream nodes registered on a Host accept
// header-framed packet connections over tcp://, tls://, ws:// and wss:// (the zlink
// Stream Connector wire, see session/wire), own each connection as one session-owner
// actor (protoactor-go), pull a packet only while holding a host-wide permit, and run
// the application's Session callbacks serially per connection.
//
// NewHost returns a Host; Host.AddStreamNode registers a stream node whose NodeBuilder
// binds its endpoints and sets its SessionType (typically the Type of a Mux, a packet
// router), then Host.Start serves and Host.Shutdown drains. meshnode.Start does this
// from its Config's Streams and Session.
package session
