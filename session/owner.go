package session

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"

	"github.com/meshnode/meshnode/fault"
	"github.com/meshnode/meshnode/internal/protoactor/actor"

	"github.com/meshnode/meshnode/session/wire"
)

// transportFault carries a transport error to the session owner.
type transportFault struct{ err error }

// submitted is a turn submitted with Peer.Submit.
type submitted struct{ fn func(ctx context.Context) }

// disconnected is the last message a session owner receives.
type disconnected struct{ reason wire.CloseReason }

// ownerActor is the session-owner actor of one connection: its mailbox is the serial
// execution gate of the session's callbacks.
type ownerActor struct {
	c        *conn
	sess     Session
	finished bool
}

func (a *ownerActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *Packet:
		// One message carries the packets the read loop pulled together, in order; each
		// one's permit returns at its own callback's start (digest §9.3 step 5).
		n := int64(0)
		var spares spareList // the chain's reusable packets, handed back together
		for pkt := m; pkt != nil; n++ {
			next := pkt.next
			pkt.next = nil
			a.c.turnStarted()
			a.dispatch(pkt)
			if pkt.reusable {
				spares.add(pkt)
			}
			pkt = next
		}
		a.c.recyclePackets(spares)
		a.c.turnsFinished(n)
	case *actor.Started:
		if h, ok := a.sess.(ConnectHandler); ok {
			a.guard("connect", func() { h.OnConnect(a.c.ctx, a.c.peer) })
		}
	case *submitted:
		if !a.finished {
			a.guard("submitted turn", func() { m.fn(a.c.ctx) })
		}
	case *transportFault:
		if h, ok := a.sess.(TransportErrorHandler); ok {
			a.guard("transport error", func() { h.OnTransportError(a.c.ctx, a.c.peer, m.err) })
		}
	case *disconnected:
		if h, ok := a.sess.(DisconnectHandler); ok {
			a.guard("disconnect", func() { h.OnDisconnect(a.c.ctx, a.c.peer, m.reason) })
		}
		a.c.hookMu.Lock()
		hooks := a.c.afterDisconnect
		a.c.hookMu.Unlock()
		for _, fn := range hooks {
			a.guard("after-disconnect hook", func() { fn(a.c.ctx, m.reason) })
		}
		a.finished = true
		a.c.finished()
		ctx.Stop(ctx.Self())
	}
}

// guard runs a lifecycle callback; a panic is logged and goes no further.
func (a *ownerActor) guard(what string, fn func()) {
	defer func() {
		if r := recover(); r != nil {
			a.c.host.log.Error("stream session callback panicked", "callback", what,
				"node", a.c.node.cfg.name, "routing_id", uint32(a.c.rid), "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
		}
	}()
	fn()
}

// dispatch runs the packet callback. A returned error or a panic is an application
// failure: a Request not yet replied gets an Error reply; nothing reaches the session's
// transport-error callback (seed §7).
func (a *ownerActor) dispatch(pkt *Packet) {
	if a.c.rejectInbound.Load() {
		a.c.host.metrics.dropped(a.c.transport, "session_closing")
		if pkt.Kind == wire.KindRequest {
			_ = pkt.ReplyError(fault.ShuttingDown.Code(), "session is closing")
		}
		return
	}
	defer func() {
		if r := recover(); r != nil {
			a.c.host.log.Error("stream session packet callback panicked",
				"node", a.c.node.cfg.name, "routing_id", uint32(a.c.rid), "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			a.failRequest(pkt, &CodedError{Code: fault.InternalFailure.Code(), Message: fault.InternalMessage})
		}
	}()
	ctx := a.c.ctx
	if a.c.host.tracer != nil {
		ctx = a.c.startPacketSpan(pkt)
		// A Send's span ends with its callback; a Request's when it is answered, which
		// may be later and on another goroutine (a relay's reply).
		defer func() {
			if pkt.Kind != wire.KindRequest {
				pkt.endSpan("")
			}
		}()
	}
	if err := a.sess.OnPacket(ctx, pkt); err != nil {
		if errors.Is(err, ErrSessionClosed) {
			// The session closed under the callback (its reply or push could not go
			// out): counted, and logged once per session when it ends, not per packet.
			a.c.droppedAtClose.Add(1)
			a.c.host.metrics.dropped(a.c.transport, "session_closed")
			return
		}
		if k, ok := fault.Of(err); ok && k != fault.InternalFailure {
			// A classified failure is an answer (not_found, capacity_exceeded, ...), not
			// a fault of the server: the client gets it, the log only at debug level.
			a.c.host.log.Debug("stream session packet failed", "node", a.c.node.cfg.name, "routing_id", uint32(a.c.rid), "name", pkt.Name, "err", err)
		} else {
			a.c.host.ratelog.Log(a.c.host.log, slog.LevelWarn, "callback_failed", "stream session packet callback failed",
				"node", a.c.node.cfg.name, "routing_id", uint32(a.c.rid), "name", pkt.Name, "kind", pkt.Kind, "err", err)
		}
		a.failRequest(pkt, err)
	}
}

func (a *ownerActor) failRequest(pkt *Packet, err error) {
	if pkt.Kind != wire.KindRequest {
		return
	}
	code, msg := ErrorReply(err)
	if rerr := pkt.ReplyError(code, msg); rerr != nil && !errors.Is(rerr, ErrAlreadyReplied) && !errors.Is(rerr, ErrSessionClosed) {
		a.c.host.log.Warn("stream error reply failed", "node", a.c.node.cfg.name, "routing_id", uint32(a.c.rid), "err", rerr)
	}
}
