package actor

import (
	"context"
	"log/slog"

	"github.com/meshnode/meshnode/fault"
	proto "github.com/meshnode/meshnode/internal/protoactor/actor"
	"github.com/meshnode/meshnode/session/wire"
)

// Context is what an Actor sees during one turn. It is valid only during that turn:
// the host reuses it for the activation's next turn. Its context.Context is the
// activation's: cancelled when the activation stops.
type Context struct {
	context.Context
	host  *Host
	act   *activation
	msg   any
	from  *Ref
	shell *shell

	// reply answers the turn's message when it is a request: an Actor request (value or
	// error) or a relayed session Request. nil for a one-way message.
	reply   func(v any, err error) error
	replied bool
}

// Message returns the message of this turn: Started, Stopping, a *T of a registered
// message type, a *Message (an unregistered name), a *SessionPacket, SessionBound or
// SessionEnded.
func (c *Context) Message() any { return c.msg }

// Sender returns the Actor that sent the message, or nil.
func (c *Context) Sender() *Ref { return c.from }

// Self returns this activation's route fence.
func (c *Context) Self() RouteFence { return c.act.fence }

// Kind returns this activation's kind name.
func (c *Context) Kind() string { return c.act.kind }

// Host returns the node's Actor host.
func (c *Context) Host() *Host { return c.host }

// Attachment returns what a layer above Actors stored on this activation under key
// (see Turn.SetAttachment).
func (c *Context) Attachment(key any) any { return c.shell.attachments[key] }

// IsRequest reports whether the turn's message expects a reply (an Actor request or a
// relayed session Request) that has not been given yet.
func (c *Context) IsRequest() bool { return c.reply != nil && !c.replied }

// Reply answers the turn's request with v: to an Actor request, v of a registered type
// (or nil); to a relayed session Request, v encoded with the request's codec ([]byte
// as it is). A request is answered once; a message that is not a request cannot be.
func (c *Context) Reply(v any) error {
	if err := c.takeReply(); err != nil {
		return err
	}
	return c.shell.answer(c.reply, v, nil)
}

// ReplyError answers the turn's request with an error: the requester gets an error of
// err's fault kind (fault.Code), with err's message.
func (c *Context) ReplyError(err error) error {
	if err == nil {
		return fault.Errorf(fault.InvalidOperation, "actor: ReplyError(nil)")
	}
	if rerr := c.takeReply(); rerr != nil {
		return rerr
	}
	return c.shell.answer(c.reply, nil, err)
}

// Pending is a request whose answer an Actor gives later: from Context.Later, answered
// with Reply or ReplyError in a later turn of the same Actor (not from another
// goroutine). A request nobody answers times out at its requester.
type Pending struct {
	reply    func(v any, err error) error
	shell    *shell // answers go through its turn (a SaveEveryTurn turn holds them)
	answered bool
}

// Poster returns a function that delivers msg to this activation's Receive in a later
// turn, from any goroutine (behind what its mailbox already holds); once the activation
// stopped it does nothing. Like every message, msg arrives as a pointer: a T posted
// by value is received as *T. It is how an Actor gets back the result of work it handed to
// a goroutine, to answer a Pending in its own turn.
func (c *Context) Poster() func(msg any) {
	h := c.host
	var pid *proto.PID
	if c.shell.pctx != nil {
		// In an activation's first turn its pid may not be published yet (as Turn.After).
		pid = c.shell.pctx.Self()
	} else {
		pid = c.act.pid
	}
	return func(msg any) {
		msg = normalize(msg) // every message arrives as a pointer (Actor)
		h.system.Root.Send(pid, turnCallback{fn: func(t *Turn) { t.Deliver(msg) }})
	}
}

// Later takes the turn's request out of the turn, to be answered in a later turn: the
// Actor can take other messages meanwhile (a request waiting for another Actor, a
// long computation handed to a goroutine that sends its result back).
func (c *Context) Later() (*Pending, error) {
	if err := c.takeReply(); err != nil {
		return nil, err
	}
	return &Pending{reply: c.reply, shell: c.shell}, nil
}

// Reply answers the pending request with v (see Context.Reply).
func (p *Pending) Reply(v any) error {
	if p.answered {
		return fault.Errorf(fault.InvalidOperation, "actor: the request was already answered")
	}
	p.answered = true
	return p.shell.answer(p.reply, v, nil)
}

// ReplyError answers the pending request with an error (see Context.ReplyError).
func (p *Pending) ReplyError(err error) error {
	if p.answered {
		return fault.Errorf(fault.InvalidOperation, "actor: the request was already answered")
	}
	p.answered = true
	return p.shell.answer(p.reply, nil, err)
}

func (c *Context) takeReply() error {
	switch {
	case c.reply == nil:
		return fault.Errorf(fault.InvalidOperation, "actor: %T is not a request", c.msg)
	case c.replied:
		return fault.Errorf(fault.InvalidOperation, "actor: the request was already answered")
	}
	c.replied = true
	return nil
}

// Send sends msg to the Actor to, one-way, from this Actor. Sends from one Actor to one
// target are delivered in send order. A local target whose mailbox is full fails at
// once with ErrMailboxFull.
func (c *Context) Send(to Target, msg any) error {
	self := c.act.fence.Ref
	return c.host.send(c, to, msg, &self)
}

// Request sends msg to the Actor to and waits for its reply, until ctx ends (or
// DefaultRequestTimeout when ctx has no deadline): the reply value (a *T of a
// registered type, a *Message, or nil), or a typed error (the replier's fault kind;
// fault.DeadlineExceeded; fault.Unavailable when the target's node fails; the
// target's errors when it does not exist). A turn that waits blocks its Actor: two
// Actors that request each other wait until a deadline.
func (c *Context) Request(ctx context.Context, to Target, msg any) (any, error) {
	self := c.act.fence.Ref
	return c.host.request(ctx, to, msg, &self)
}

// PushOption adjusts a push.
type PushOption func(*pushOptions)

type pushOptions struct {
	codec wire.Codec
	set   bool
}

// WithCodec encodes a push with codec c (default JSON). With a []byte value it only
// labels the bytes, which are already in that codec.
func WithCodec(c wire.Codec) PushOption { return func(o *pushOptions) { o.codec, o.set = c, true } }

// Push sends a STREAM Send named name to the session bound to this Actor, with v
// encoded as JSON (WithCodec for another codec). A []byte value goes as it is, as raw
// bytes unless WithCodec names their codec. Without a bound session it fails with
// ErrNotBound.
func (c *Context) Push(name string, v any, opts ...PushOption) error {
	b := c.host.sessionBridge()
	if b == nil {
		return ErrNotBound
	}
	codec, payload, err := c.encodeOut(v, opts)
	if err != nil {
		return fault.Errorf(fault.InvalidOperation, "actor: push %s: %w", name, err)
	}
	return b.Push(c.turn(), name, codec, payload)
}

// encodeOut encodes what an Actor sends a session (Push, Publish): v in JSON, or the
// codec WithCodec names; a []byte as it is, raw unless WithCodec names its codec.
func (c *Context) encodeOut(v any, opts []PushOption) (wire.Codec, []byte, error) {
	o := pushOptions{codec: wire.CodecJSON}
	for _, fn := range opts {
		fn(&o)
	}
	if raw, ok := v.([]byte); ok {
		if !o.set {
			o.codec = wire.CodecRaw
		}
		return o.codec, raw, nil
	}
	payload, err := c.host.codecs.Marshal(o.codec, v)
	return o.codec, payload, err
}

// CloseSession asks the bound session's owner to close the session with reason.
func (c *Context) CloseSession(reason wire.CloseReason, diagnostic string) error {
	b := c.host.sessionBridge()
	if b == nil {
		return ErrNotBound
	}
	return b.CloseSession(c.turn(), reason, diagnostic)
}

// IsBound reports whether a session is bound to this Actor.
func (c *Context) IsBound() bool {
	b := c.host.sessionBridge()
	return b != nil && b.IsBound(c.turn())
}

func (c *Context) turn() *Turn { return &c.shell.turn }

// StayActive keeps this activation from idle collection while stay is true: an Actor
// that serves clients without a session binding (a plugin services session worker with
// presentations attached) says so, since only a binding holds an Actor otherwise. A move
// does not carry it: the Actor says it again on the node it moved to.
func (c *Context) StayActive(stay bool) { c.act.stayActive.Store(stay) }

// sessionReply returns the reply function of a relayed session Request. An error goes
// to the client as fault.Public shows it: the text of an error without a kind stays
// here, in the log.
func (h *Host) sessionReply(p *SessionPacket, self Ref) func(v any, err error) error {
	return func(v any, err error) error {
		if err != nil {
			code, msg := fault.Public(err)
			if code == fault.InternalFailure.Code() {
				h.ratelog.Log(h.log, slog.LevelWarn, "unclassified_reply_error",
					"actor: a relayed request was answered with an error that has no fault kind; the client gets internal_failure",
					"actor", self.String(), "packet", p.Name, "err", err)
			}
			return p.replyError(code, msg)
		}
		return p.replyValue(v)
	}
}
