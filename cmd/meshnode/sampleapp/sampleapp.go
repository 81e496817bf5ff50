// Package sampleapp is the session the meshnode binary serves by default: a small echo
// service that shows the session surface and gives operators something to poke at.
//
//	Request "echo" -> Response with the same payload and codec
//	Send "echo"    -> Send "echo" back with the same payload and codec
//	Request "fail" -> Error with code "rejected"
package sampleapp

import (
	"context"

	"github.com/meshnode/meshnode/session"
	"github.com/meshnode/meshnode/session/codec"
	"github.com/meshnode/meshnode/session/wire"
)

// Echo is the sample session.
type Echo struct{}

// New returns a sample session; use it with session.NewSessionType(sampleapp.New).
func New() *Echo { return &Echo{} }

// Type is the sample session's type.
func Type() session.SessionType { return session.NewSessionType(New) }

// OnPacket implements session.Session.
func (*Echo) OnPacket(ctx context.Context, pkt *session.Packet) error {
	switch {
	case pkt.Name == "echo" && pkt.Kind == wire.KindRequest:
		return pkt.Reply(pkt.Codec, pkt.Payload)
	case pkt.Name == "echo" && pkt.Kind == wire.KindSend:
		return pkt.Peer.Send(ctx, "echo", pkt.Codec, pkt.Payload)
	case pkt.Name == "fail" && pkt.Kind == wire.KindRequest:
		return pkt.ReplyError(codec.CodeRejected, "the sample app rejects every fail request")
	case pkt.Kind == wire.KindRequest:
		return pkt.ReplyError(codec.CodeNotFound, "no handler for packet "+pkt.Name)
	}
	return nil
}
