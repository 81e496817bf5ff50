package actor

import (
	"github.com/meshnode/meshnode/fault"
	"github.com/meshnode/meshnode/session/codec"
	"github.com/meshnode/meshnode/session/wire"
)

// What an Actor sees of the STREAM sessions bound to it. The binding layer (package
// binding) delivers these messages and carries Push, CloseSession and the replies to
// relayed Requests; an Actor never handles records or bindings itself.

// SessionID names one binding of a session to an Actor: the session (its RID on its
// owner node) and the binding generation.
type SessionID struct {
	RID               string
	BindingGeneration uint64
}

// SessionBound is delivered when a session bound the Actor (its join callback). A push
// from here reaches the session.
type SessionBound struct{ Session SessionID }

// SessionEnded is delivered when a binding ends: the session unbound, notified a
// logical disconnect, or disconnected. It arrives at most once per binding, and never
// for a binding that another session has since replaced.
type SessionEnded struct{ Session SessionID }

// SessionPacket is a STREAM packet the bound session relayed to the Actor. A Request is
// answered with Context.Reply or Context.ReplyError, exactly once; the client's
// STREAM request completes with it.
type SessionPacket struct {
	Name  string
	Codec wire.Codec
	// Payload is read-only, and like Message.Data it may point into the envelope that
	// carried it from another node: copy it to keep it past the turn.
	Payload  []byte
	Request  bool
	Session  SessionID
	Sequence uint64 // session sequence: ingress order within the session
	// Metadata is the STREAM packet's metadata, as the client sent it (keys of the
	// reserved "zlink." namespace removed).
	Metadata wire.Metadata

	codecs *codec.Registry
	reply  func(kind wire.Kind, c wire.Codec, payload []byte) error
}

// NewSessionPacket returns a relayed packet whose replies go to reply (kind Response
// or Error). For the binding layer, and for unit tests of Actors.
func NewSessionPacket(name string, c wire.Codec, payload []byte, request bool, session SessionID, sequence uint64,
	codecs *codec.Registry, reply func(kind wire.Kind, c wire.Codec, payload []byte) error) *SessionPacket {
	if codecs == nil {
		codecs = codec.NewRegistry()
	}
	return &SessionPacket{Name: name, Codec: c, Payload: payload, Request: request, Session: session, Sequence: sequence,
		codecs: codecs, reply: reply}
}

// Decode converts the payload into v with the packet's codec.
func (p *SessionPacket) Decode(v any) error { return p.codecs.Unmarshal(p.Codec, p.Payload, v) }

// replyValue answers the packet with v encoded in its codec ([]byte goes as it is,
// taken to be in the request's codec).
func (p *SessionPacket) replyValue(v any) error {
	if b, ok := v.([]byte); ok {
		return p.reply(wire.KindResponse, p.Codec, b)
	}
	b, err := p.codecs.Marshal(p.Codec, v)
	if err != nil {
		// The client gets the error at once instead of waiting out its relay timeout.
		err = fault.Errorf(fault.InvalidOperation, "actor: reply to %s: %w", p.Name, err)
		_ = p.replyError(fault.Code(err), err.Error())
		return err
	}
	return p.reply(wire.KindResponse, p.Codec, b)
}

func (p *SessionPacket) replyError(code, message string) error {
	return p.reply(wire.KindError, wire.CodecJSON, codec.EncodeErrorPayload(code, message))
}

// SessionBridge is what the binding layer does for Actors: pushes to the bound
// session, closing it, and whether there is one. Installed with Host.SetSessionBridge.
type SessionBridge interface {
	Push(t *Turn, name string, c wire.Codec, payload []byte) error
	CloseSession(t *Turn, reason wire.CloseReason, diagnostic string) error
	IsBound(t *Turn) bool
}

// SetSessionBridge installs the binding layer's bridge (package binding does it).
func (h *Host) SetSessionBridge(b SessionBridge) {
	h.turnHandlers.mu.Lock()
	h.bridge = b
	h.turnHandlers.mu.Unlock()
}

func (h *Host) sessionBridge() SessionBridge {
	h.turnHandlers.mu.RLock()
	defer h.turnHandlers.mu.RUnlock()
	return h.bridge
}

// ErrNotBound: a push or close without a bound session (kind InvalidOperation).
var ErrNotBound = fault.New(fault.InvalidOperation, "actor: no session is bound to the Actor")
