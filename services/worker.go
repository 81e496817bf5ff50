package services

import (
	"context"
	"encoding/json"
	"log/slog"
	"strconv"
	"sync"

	"github.com/meshnode/meshnode/actor"
)

// WorkerOptions configures the session workers of a kind.
type WorkerOptions struct {
	// Server, when set, is the services host of the node a worker runs on: the worker's
	// session facets may use its server services (through a loopback connection).
	Server func() *Host
	// HostOptions is the base of each worker's host options (logger, tracer).
	HostOptions HostOptions
}

// WorkerKind returns an Actor kind whose activations are session workers: each runs a
// services host with facets (the session facets), built when the activation starts and
// closed when it stops, and serves the session services to the presentation attached
// to it (the STREAM session bound to the Actor). Calls arrive as relayed NameCall
// packets; each binding of a session is one client, so request ids of different
// presentations never meet, and a frame of a binding that is not the current one is
// refused with stale_generation.
func WorkerKind(name string, opts WorkerOptions, facets ...Facet) actor.Kind {
	return actor.Kind{Name: name, New: func() actor.Actor { return &worker{opts: opts, facets: facets} }}
}

type worker struct {
	opts   WorkerOptions
	facets []Facet
	host   *Host
	server *Loopback
	err    error

	session actor.SessionID // the current binding (zero: none)
	ep      *Endpoint
}

// callDone is a finished session-service call, posted back to the worker's turn.
type callDone struct {
	pending *actor.Pending
	raw     json.RawMessage
	err     error
}

func (w *worker) Receive(ctx *actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		w.start(ctx)
	case *actor.Stopping:
		w.endSession()
		if w.host != nil {
			_ = w.host.Close(context.WithoutCancel(ctx.Context))
		}
		if w.server != nil {
			w.server.Close()
		}
	case *actor.SessionBound:
		w.endSession()
		w.session = m.Session
		if w.host != nil {
			id := m.Session.RID + "#" + strconv.FormatUint(m.Session.BindingGeneration, 10)
			w.ep = w.host.Endpoint(ctx.Context, Client{ID: id, Transport: "session"})
		}
	case *actor.SessionEnded:
		if m.Session == w.session {
			w.endSession()
		}
	case *actor.SessionPacket:
		w.packet(ctx, m)
	case *callDone:
		if m.err != nil {
			_ = m.pending.ReplyError(wireError(m.err))
			return
		}
		_ = m.pending.Reply([]byte(m.raw))
	}
}

func (w *worker) start(ctx *actor.Context) {
	ho := w.opts.HostOptions
	ho.Name = ctx.Self().ID
	if ho.Logger == nil {
		ho.Logger = slog.Default()
	}
	if w.opts.Server != nil {
		if srv := w.opts.Server(); srv != nil {
			w.server = NewLoopback(srv, Client{ID: "worker/" + ctx.Self().ID, Transport: "loopback"})
			ho.Connections = append(append([]Connection(nil), ho.Connections...), w.server)
		}
	}
	w.host, w.err = NewHost(ctx.Context, ho, w.facets...)
	if w.err != nil {
		ho.Logger.Error("services: session worker failed to assemble", "worker", ctx.Self().ID, "err", w.err)
	}
}

func (w *worker) endSession() {
	if w.ep != nil {
		w.ep.Close() // cancels that presentation's calls, nothing else
	}
	w.ep, w.session = nil, actor.SessionID{}
}

func (w *worker) packet(ctx *actor.Context, p *actor.SessionPacket) {
	switch p.Name {
	case NameCatalogue:
		if p.Request {
			if w.host == nil {
				_ = ctx.ReplyError(&Error{Code: CodeSessionUnavailable, Message: "the session worker failed to start"})
				return
			}
			_ = ctx.Reply(w.host.Catalogue())
		}
	case NameCall:
		if !p.Request {
			return
		}
		ep := w.ep
		switch {
		case w.host == nil:
			_ = ctx.ReplyError(&Error{Code: CodeSessionUnavailable, Message: "the session worker failed to start"})
			return
		case ep == nil || p.Session != w.session:
			_ = ctx.ReplyError(&Error{Code: CodeStaleGeneration, Message: "the frame belongs to a previous attachment"})
			return
		}
		call, rid, err := callFromMetadata(p.Metadata.Get, p.Payload, p.Codec)
		if err != nil {
			_ = ctx.ReplyError(err)
			return
		}
		// A call that completes while Serve runs (a Func of an idle service runs on this
		// goroutine) is answered in this turn; one that does not (a Task, a busy
		// service) takes the request out of the turn and posts its result back.
		var (
			mu      sync.Mutex
			inTurn  = true
			now     *callDone
			pending *actor.Pending
		)
		post := ctx.Poster()
		ep.Serve(rid, call, func(raw json.RawMessage, err error) {
			mu.Lock()
			if inTurn {
				now = &callDone{raw: raw, err: err}
				mu.Unlock()
				return
			}
			p := pending
			mu.Unlock()
			if p != nil {
				post(&callDone{pending: p, raw: raw, err: err})
			}
		})
		mu.Lock()
		inTurn = false
		if now == nil {
			pending, _ = ctx.Later()
		}
		mu.Unlock()
		if now != nil {
			if now.err != nil {
				_ = ctx.ReplyError(wireError(now.err))
				return
			}
			_ = ctx.Reply([]byte(now.raw))
		}
	case NameCancel:
		if rid, ok := p.Metadata.Get(MetaRequest); ok && w.ep != nil && p.Session == w.session {
			w.ep.Cancel(rid)
		}
	}
}
