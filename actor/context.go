package actor

import (
	"context"
)

// Context is what an Actor sees during one turn. It is valid only during that turn:
// the host reuses it for the activation's next turn.
type Context struct {
	context.Context
	host  *Host
	act   *activation
	msg   any
	shell *shell
}

// Attachment returns what a layer above Actors stored on this activation under key
// (see Turn.SetAttachment).
func (c *Context) Attachment(key any) any { return c.shell.attachments[key] }

// Message returns the message of this turn: Started, Stopping, or a *Message.
func (c *Context) Message() any { return c.msg }

// Self returns this activation's route fence.
func (c *Context) Self() RouteFence { return c.act.fence }

// Kind returns this activation's kind name.
func (c *Context) Kind() string { return c.act.kind }

// Host returns the node's Actor host.
func (c *Context) Host() *Host { return c.host }

// Send sends msg to the activation named by to, from this Actor. Sends from one Actor
// to one target are delivered in send order.
func (c *Context) Send(to RouteFence, msg Message) error {
	self := c.act.fence.Ref
	msg.From = &self
	return c.host.Send(c, to, msg)
}
