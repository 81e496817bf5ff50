package services

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"

	"github.com/meshnode/meshnode/actor"
	"github.com/meshnode/meshnode/mesh"
	"github.com/meshnode/meshnode/session/wire"
	"github.com/meshnode/meshnode/topic"
)

// WorkerOptions configures the session workers of a kind.
type WorkerOptions struct {
	// Server, when set, is the services host of the node a worker runs on: the worker's
	// session facets may use its server services (through a loopback connection).
	Server func() *Host
	// HostOptions is the base of each worker's host options (logger, tracer).
	HostOptions HostOptions
}

// MaxClientsPerWorker bounds the presentations attached to one worker at once; an
// attach past it fails with CodeUnavailable.
const MaxClientsPerWorker = 4096

// clientsPerWorker is the bound in force (tests lower it).
var clientsPerWorker = MaxClientsPerWorker

// WorkerKind returns an Actor kind whose activations are session workers: each runs a
// services host with facets (the session facets), built when the activation starts and
// closed when it stops, and serves the session services to every presentation attached
// to it, each as its own client (its calls, cancels and request ids apart from the
// others'). Presentations reach it through their node's Attacher, with Actor messages;
// what it publishes (updates, notices about itself) goes to its topic, which each node
// with presentations attached subscribes to once. It holds itself active while
// presentations are attached.
func WorkerKind(name string, opts WorkerOptions, facets ...Facet) actor.Kind {
	// One set of instruments for every worker of the kind: a set per activation would
	// register a callback per worker with the provider, never removed.
	log := opts.HostOptions.Logger
	if log == nil {
		log = slog.Default()
	}
	opts.HostOptions.metrics = newCallMetrics(opts.HostOptions.MeterProvider, "worker", log.With("services_host", "worker"))
	return actor.Kind{Name: name, New: func() actor.Actor { return &worker{opts: opts, facets: facets} }}
}

type worker struct {
	opts   WorkerOptions
	facets []Facet
	host   *Host
	server *Loopback
	err    error

	self    actor.RouteFence
	topic   string
	clients map[string]*workerClient
	pending map[*workerPending]struct{}
	removed bool
	unsub   func()
	pub     *publisher
	moved   *workerSnapshot // restored by a move, taken at Started
}

// pubFlush asks the worker's turn to publish its publisher's queue.
type pubFlush struct{}

// workerClient is one attachment of a presentation.
type workerClient struct {
	key    string
	client Client
	ep     *Endpoint
}

// workerPending is a call answered in a later turn (a Task, a busy service).
type workerPending struct {
	p *actor.Pending

	mu   sync.Mutex
	done bool // the call finished (its result is here, whether or not its post arrived)
	raw  json.RawMessage
	err  error
}

// callDone is a finished call, posted back to the worker's turn.
type callDone struct {
	wp  *workerPending
	raw json.RawMessage
	err error
}

// nodeGone is posted when a node lifecycle left the mesh: its presentations' attachments
// end.
type nodeGone struct{ lifecycle string }

func (w *worker) Receive(ctx *actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		w.start(ctx, m.Moved)
	case *actor.Stopping:
		w.stopping(ctx, m.Moved)
	case *workerStart, *workerPing:
		// A create (the worker may have run before its session existed) or the
		// directory's reconciliation: report.
		w.report(ctx, true)
	case *workerAttach:
		w.attach(ctx, m)
	case *workerDetach:
		w.detach(ctx, m.Client)
	case *workerCall:
		w.call(ctx, m)
	case *workerCancel:
		if c := w.clients[m.Client]; c != nil {
			c.ep.Cancel(m.Rid)
		}
	case *workerSubscribe:
		c := w.clients[m.Client]
		if c == nil {
			_ = ctx.Reply(staleAttachment())
			return
		}
		raw, err := c.ep.subscribe(subAddr{svc: m.Svc, key: m.Key, gen: m.Gen, ref: m.Ref, member: m.Member}, m.Sid, nil)
		_ = ctx.Reply(answerOf(raw, err))
	case *workerUnsubscribe:
		if c := w.clients[m.Client]; c != nil {
			c.ep.unsubscribe(subAddr{svc: m.Svc, key: m.Key, gen: m.Gen, ref: m.Ref, member: m.Member}, m.Sid)
		}
	case *pubFlush:
		w.flush(ctx)
	case *workerCatalogue:
		switch {
		case w.host == nil:
			_ = ctx.Reply(&answer{Code: CodeSessionUnavailable, Message: "the session worker failed to start"})
		case w.clients[m.Client] == nil:
			_ = ctx.Reply(staleAttachment())
		default:
			raw, _ := json.Marshal(w.host.Catalogue())
			_ = ctx.Reply(&answer{Raw: raw})
		}
	case *workerRemoved:
		w.removed = true
		w.publishNotice(ctx, noticeRemoved)
		for key := range w.clients {
			w.detach(ctx, key)
		}
		ctx.Host().Deactivate(ctx.Self().ID)
	case *nodeGone:
		for key := range w.clients {
			if strings.HasPrefix(key, m.lifecycle+"/") {
				w.detach(ctx, key)
			}
		}
	case *callDone:
		if _, ok := w.pending[m.wp]; !ok {
			return // answered already (the worker is stopping)
		}
		delete(w.pending, m.wp)
		_ = m.wp.p.Reply(answerOf(m.raw, m.err))
	}
}

func (w *worker) start(ctx *actor.Context, moved bool) {
	w.self = ctx.Self()
	w.clients = map[string]*workerClient{}
	w.pending = map[*workerPending]struct{}{}
	if !moved {
		w.moved = nil
	}
	if w.moved != nil {
		w.topic = w.moved.Topic
	} else {
		var b [16]byte
		_, _ = rand.Read(b[:])
		// Unguessable (only the servers of attached presentations learn it), and reserved:
		// no session subscribes or publishes to it.
		w.topic = topic.ReservedPrefix + "svc:" + hex.EncodeToString(b[:])
	}
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
	if w.moved != nil {
		ho.beforeActivate = w.restoreServices
	}
	w.host, w.err = NewHost(ctx.Context, ho, w.facets...)
	if w.err != nil {
		ho.Logger.Error("services: session worker failed to assemble", "worker", ctx.Self().ID, "err", w.err)
	}
	post := ctx.Poster()
	w.pub = newPublisher(func() { post(&pubFlush{}) })
	if w.moved != nil && w.host != nil {
		w.arrive(ctx)
	}
	w.moved = nil
	w.report(ctx, true)
	w.unsub = ctx.Host().Node().Membership().Subscribe(func(ev mesh.MemberEvent) {
		if ev.Type != mesh.EventJoined {
			post(&nodeGone{lifecycle: lifecycleOf(ev.Member.ID)})
		}
	})
}

// lifecycleOf names a node lifecycle as attachment keys begin with it.
func lifecycleOf(id mesh.NodeID) string {
	return id.RID + "#" + strconv.FormatUint(id.Generation, 10)
}

func (w *worker) stopping(ctx *actor.Context, moved bool) {
	if w.unsub != nil {
		w.unsub()
	}
	if !w.removed && !moved {
		// Its presentations' servers attach them again (to a new activation).
		w.publishNotice(ctx, noticeStopped)
		w.report(ctx, false)
	}
	if w.pub != nil {
		w.pub.close()
	}
	why := "the session worker stopped while the call ran"
	if moved {
		why = "the session worker moved to another node while the call ran; it did not finish"
	}
	for wp := range w.pending {
		// A call that finished is answered with its result (its posted answer is held
		// by the move and dropped); one that did not is answered as failed, never left
		// to wait.
		wp.mu.Lock()
		done, raw, err := wp.done, wp.raw, wp.err
		wp.mu.Unlock()
		if done {
			_ = wp.p.Reply(answerOf(raw, err))
			continue
		}
		_ = wp.p.Reply(&answer{Code: CodeSessionUnavailable, Message: why})
	}
	w.pending = nil
	for key := range w.clients {
		if moved {
			// The attachments live on at the target: end their calls here only.
			w.clients[key].ep.Close()
			continue
		}
		w.detach(ctx, key)
	}
	if w.host != nil {
		_ = w.host.Close(context.WithoutCancel(ctx.Context))
	}
	if w.server != nil {
		w.server.Close()
	}
}

// staleAttachmentMessage tells a worker's refusal of an attachment it does not know (the
// route is stale: the presentation's server attaches again) from a stale_generation of
// the call itself (a closed keyed instance: the caller's bad input, the route stands).
const staleAttachmentMessage = "the session worker does not know this attachment (it was replaced or detached)"

func staleAttachment() *answer {
	return &answer{Code: CodeStaleGeneration, Message: staleAttachmentMessage}
}

// staleRoute reports whether a is a worker's refusal of an attachment it does not know.
func (a *answer) staleRoute() bool {
	return a.Code == CodeStaleGeneration && a.Message == staleAttachmentMessage
}

func (w *worker) attach(ctx *actor.Context, m *workerAttach) {
	switch {
	case w.host == nil:
		_ = ctx.Reply(&answer{Code: CodeSessionUnavailable, Message: "the session worker failed to start"})
		return
	case w.removed:
		_ = ctx.Reply(&answer{Code: CodeUnknownSession, Message: "the session was removed"})
		return
	}
	if old := w.clients[m.Replaces]; old != nil && m.Replaces != m.Client && old.client.ID == m.Presenter {
		w.detach(ctx, m.Replaces) // the same presentation's previous attachment
	}
	switch {
	case w.clients[m.Client] == nil && len(w.clients) >= clientsPerWorker:
		_ = ctx.Reply(&answer{Code: CodeUnavailable, Message: fmt.Sprintf("session %s: its worker serves %d presentations (the bound)", w.self.ID, clientsPerWorker)})
		return
	}
	if w.clients[m.Client] == nil {
		c := Client{ID: m.Presenter, Transport: m.Transport, Attachment: m.Attachment}
		ep := w.host.Endpoint(ctx.Context, c)
		ep.shared = w.pub
		ep.gone = CodeSessionUnavailable
		w.clients[m.Client] = &workerClient{key: m.Client, client: c, ep: ep}
		ctx.StayActive(true)
		w.host.clientEvent(ctx.Context, c, true)
		w.report(ctx, true)
	}
	_ = ctx.Reply(&workerAttached{Topic: w.topic, Node: w.self.Node.RID, Incarnation: w.self.ObjectGeneration})
}

// detach ends an attachment: its calls are cancelled (only its own).
func (w *worker) detach(ctx *actor.Context, key string) {
	c := w.clients[key]
	if c == nil {
		return
	}
	delete(w.clients, key)
	c.ep.Close()
	ctx.StayActive(len(w.clients) > 0)
	if w.host != nil {
		w.host.clientEvent(ctx.Context, c.client, false)
	}
	if !w.removed {
		w.report(ctx, true)
	}
}

// report tells the sessions directory where the worker runs and who is attached (or
// that it stops). A report that cannot go is not retried: the next one, or the
// directory's reconciliation, brings it up to date.
func (w *worker) report(ctx *actor.Context, running bool) {
	r := &dirReport{ID: w.self.ID, Node: w.self.Node.RID, Incarnation: w.self.ObjectGeneration, Running: running}
	if running {
		for _, c := range w.clients {
			r.Clients = append(r.Clients, c.client.ID)
		}
	}
	if err := ctx.Send(actor.Address{Kind: DirectoryKind, ID: DirectoryID}, r); err != nil && w.host != nil {
		w.host.log.Debug("services: a worker's report to the sessions directory did not go", "err", err)
	}
}

// arrive takes up a moved worker's attachments and subscriptions on its new node (the
// host restored its values before activating): what the source had not published goes
// first, then its presentations' servers hear where it is now, then every subscribed
// state and directory publishes a complete replacement (the next sequence: no gap).
func (w *worker) arrive(ctx *actor.Context) {
	snap := w.moved
	for _, sc := range snap.Clients {
		c := Client{ID: sc.ID, Transport: sc.Transport, Attachment: sc.Attachment}
		ep := w.host.Endpoint(ctx.Context, c)
		ep.shared = w.pub
		ep.gone = CodeSessionUnavailable
		w.clients[sc.Key] = &workerClient{key: sc.Key, client: c, ep: ep}
		for _, a := range sc.Subs {
			// An instance's subscription of a generation that is gone fails (stale): its
			// observer sees the new directory.
			_, _ = ep.subscribe(subAddr{svc: a.Svc, key: a.Key, gen: a.Gen, member: a.Member}, a.Sid, nil)
		}
		w.host.clientEvent(ctx.Context, c, true)
	}
	ctx.StayActive(len(w.clients) > 0)
	for _, p := range snap.Outbox {
		w.publish(ctx, p.Header, p.Value)
	}
	w.flush(ctx) // what the facets published while they activated
	w.publishNotice(ctx, noticeMoved)
	w.pub.mu.Lock()
	var slots []*slot
	for k := range w.pub.watched {
		if k.sl.kind != kindEvents {
			slots = append(slots, k.sl)
		}
	}
	w.pub.mu.Unlock()
	for _, sl := range slots {
		if seq, raw, val, err := sl.snapshot(); err == nil && seq > 0 {
			sl.publish(&delivery{op: opReplace, raw: raw, val: val})
		}
	}
	w.flush(ctx)
}

// flush publishes what the worker's members delivered since the last flush, in order.
func (w *worker) flush(ctx *actor.Context) {
	for _, it := range w.pub.take() {
		w.publish(ctx, pubOf(it.addr, it.d, w.self.ObjectGeneration), it.d.raw)
	}
}

// publish publishes one item to the worker's topic. A value over the topic's payload
// limit goes as a resync: its subscribers take a snapshot, which an Actor reply
// carries (up to the record limit).
func (w *worker) publish(ctx *actor.Context, h pubHeader, value []byte) {
	b, err := encodePub(h, value)
	if err == nil {
		_, err = ctx.Publish(w.topic, pubName, b, actor.WithCodec(wire.CodecRaw))
	}
	if err != nil && errors.Is(err, topic.ErrTooLarge) && h.Kind != pubResync {
		w.publish(ctx, pubHeader{Kind: pubResync, Incarnation: h.Incarnation, Svc: h.Svc, Key: h.Key, Gen: h.Gen, Ref: h.Ref, Member: h.Member, Seq: h.Seq}, nil)
		return
	}
	if err != nil && w.host != nil {
		w.host.log.Warn("services: a worker's update was not published", "member", h.Svc+"."+h.Member, "err", err)
	}
}

func (w *worker) publishNotice(ctx *actor.Context, what string) {
	b, err := encodePub(pubHeader{Kind: pubNotice, Incarnation: w.self.ObjectGeneration, Notice: what, Message: w.self.Node.RID}, nil)
	if err == nil {
		_, err = ctx.Publish(w.topic, pubName, b, actor.WithCodec(wire.CodecRaw))
	}
	if err != nil && w.host != nil {
		w.host.log.Debug("services: a worker notice was not published", "notice", what, "err", err)
	}
}

func (w *worker) call(ctx *actor.Context, m *workerCall) {
	c := w.clients[m.Client]
	switch {
	case w.host == nil:
		_ = ctx.Reply(&answer{Code: CodeSessionUnavailable, Message: "the session worker failed to start"})
		return
	case c == nil:
		_ = ctx.Reply(staleAttachment())
		return
	}
	// A call that completes while Serve runs (a Func of an idle service runs on this
	// goroutine) is answered in this turn; one that does not (a Task, a busy service)
	// takes the request out of the turn and posts its result back.
	var (
		mu     sync.Mutex
		inTurn = true
		now    *callDone
		wp     *workerPending
	)
	post := ctx.Poster()
	call := Call{Service: m.Svc, Key: m.Key, Generation: m.Gen, Ref: m.Ref, Member: m.Member, Args: m.Args, Trace: m.Trace}
	c.ep.Serve(m.Rid, call, func(raw json.RawMessage, err error) {
		mu.Lock()
		if inTurn {
			now = &callDone{raw: raw, err: err}
			mu.Unlock()
			return
		}
		p := wp
		mu.Unlock()
		if p != nil {
			p.mu.Lock()
			p.done, p.raw, p.err = true, raw, err
			p.mu.Unlock()
		}
		post(&callDone{wp: p, raw: raw, err: err})
	})
	mu.Lock()
	inTurn = false
	if now == nil {
		if p, err := ctx.Later(); err == nil {
			wp = &workerPending{p: p}
			w.pending[wp] = struct{}{}
		}
	}
	mu.Unlock()
	if now != nil {
		_ = ctx.Reply(answerOf(now.raw, now.err))
	}
}
