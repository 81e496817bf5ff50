// Package services will hold plugin service RPC: typed methods run as actors, with
// replicated state, remote events, keyed instances and private references, reachable
// in-process and over STREAM. Not built yet.
package services
