package actor

import (
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/meshnode/meshnode/fault"
)

// The panic policy. A panic in an Actor's Receive ends that turn only: it is logged
// (with its stack, once per interval per kind) and counted, and the request the turn was
// handling, if any, gets an internal_failure error reply. An activation that panics
// MaxPanics times within PanicWindow is stopped through the normal stop path (its bound
// session is told, as for any stop); the next message to its ActorId activates it anew,
// fresh.

// Defaults of the panic policy.
const (
	DefaultMaxPanics   = 3
	DefaultPanicWindow = time.Minute
)

func (s *shell) panicked(r any, ctx *Context) {
	h := s.h
	h.panics.Add(1)
	h.ratelog.Log(h.log, slog.LevelError, "panic:"+s.act.kind, "actor turn panicked",
		"actor", s.act.fence.Ref.String(), "kind", s.act.kind, "message", fmt.Sprintf("%T", ctx.msg),
		"panic", fmt.Sprint(r), "stack", string(debug.Stack()))
	if ctx.IsRequest() {
		_ = ctx.ReplyError(fault.Errorf(fault.InternalFailure, "actor: %s %s failed", s.act.kind, s.act.fence.ID))
	}
	now := time.Now()
	keep := s.panics[:0]
	for _, t := range s.panics {
		if now.Sub(t) < h.panicWindow {
			keep = append(keep, t)
		}
	}
	s.panics = append(keep, now)
	if len(s.panics) < h.maxPanics || s.stopped {
		return
	}
	s.stopped = true
	h.stoppedBad.Add(1)
	h.log.Error("actor stopped by the panic policy", "actor", s.act.fence.Ref.String(), "kind", s.act.kind,
		"panics", len(s.panics), "window", h.panicWindow)
	if h.retire(s.act) {
		if h.rdir != nil {
			h.rdir.released(s.act.kind, s.act.fence)
		}
		s.act.cancel()
		s.pctx.Stop(s.pctx.Self())
	}
}
