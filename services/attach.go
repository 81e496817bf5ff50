package services

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshnode/meshnode/actor"
	"github.com/meshnode/meshnode/fault"
	"github.com/meshnode/meshnode/internal/ratelog"
	"github.com/meshnode/meshnode/mesh"
	"github.com/meshnode/meshnode/session"
	"github.com/meshnode/meshnode/session/wire"
	"github.com/meshnode/meshnode/topic"
)

// SessionManagement is the server's control plane for sessions and a presentation's
// selected session: Create and Remove make and end sessions (each served by a session
// worker, an Actor on any node), Attach selects one for the calling presentation (its
// session-service calls go there from then on) and Detach ends the selection. It is an
// ordinary server service (SessionManagementToken, "meshnode.session-management").
type SessionManagement struct {
	Create Method[CreateArgs, SessionRef]
	Remove Method[SessionRef, struct{}]
	Attach Method[AttachArgs, Attachment]
	Detach Method[struct{}, struct{}]
}

// CreateArgs names the session to create: Session (optional: the server makes one up
// when empty) and a Title shown in the directory.
type CreateArgs struct {
	Session string `json:"session,omitempty"`
	Title   string `json:"title,omitempty"`
}

// SessionRef names a session.
type SessionRef struct {
	Session string `json:"session"`
}

// AttachArgs names the session to attach to. Actor is the name part 1 gave it, still
// accepted.
type AttachArgs struct {
	Session string `json:"session,omitempty"`
	Actor   string `json:"actor,omitempty"`
}

// Attachment is the selected session after an attach: the session, the node its
// worker runs on, and the attachment (a fresh id per route to a worker: a re-attach
// after the worker was replaced gets a new one).
type Attachment struct {
	Session    string `json:"session"`
	Node       string `json:"node"`
	Attachment string `json:"attachment"`
}

// SessionManagementToken is the server singleton "meshnode.session-management".
var SessionManagementToken = Define("meshnode.session-management", func(d *Describer, s *SessionManagement) {
	DescribeMethod(d, "create", &s.Create)
	DescribeMethod(d, "remove", &s.Remove)
	DescribeMethod(d, "attach", &s.Attach)
	DescribeMethod(d, "detach", &s.Detach)
})

// Action is what a client asks to do with a session (Authorize).
type Action string

const (
	ActionCreate Action = "create"
	ActionRemove Action = "remove"
	ActionAttach Action = "attach"
)

// Authorize decides whether client may do action to session; an *Error it returns is
// the caller's answer, any other error is not_authorized.
type Authorize func(ctx context.Context, client Client, action Action, session string) error

// AttacherOptions configures an Attacher.
type AttacherOptions struct {
	// Actors is the node's Actor host: workers and the directory are Actors on any node.
	Actors *actor.Host
	// Topics is the node's topic hub: the node subscribes once to each worker its
	// presentations attach to.
	Topics *topic.Hub
	// Kind is the session workers' Actor kind.
	Kind string
	// Authorize (nil: everyone may do everything) is asked before create, remove and
	// attach.
	Authorize Authorize
	// Timeout bounds a routed call, attach and the directory's answers (default 30 s,
	// the relay timeout).
	Timeout time.Duration
	Logger  *slog.Logger
}

// DefaultAttachTimeout is AttacherOptions.Timeout's default.
const DefaultAttachTimeout = 30 * time.Second

// reattach timing: a presentation whose route broke is attached again in the
// background, backing off, for at most reattachFor; then it stays degraded until its
// next session call.
const (
	reattachFirst = 50 * time.Millisecond
	reattachMax   = 2 * time.Second
	reattachFor   = 30 * time.Second
)

// Attacher is the server side of presentations on one node: it keeps which session
// each presentation (a STREAM session or a loopback connection) selected and the live
// route to that session's worker, routes the presentation's session-scoped frames to
// the worker as Actor messages (the server never decodes their payloads), serves
// SessionManagement, and passes on what the workers publish. A worker serves any
// number of presentations at once, each its own client.
//
// Attach, detach and re-attach of one presentation run one at a time. A route breaks
// when its worker's node fails, when the worker stops, or when the worker no longer
// knows the attachment (it was replaced); the presentation is then attached again in
// the background (a fresh attachment id, the attaching then attached or degraded
// notices), while the selection stays.
type Attacher struct {
	actors    *actor.Host
	topics    *topic.Hub
	kind      string
	authorize Authorize
	timeout   time.Duration
	log       *slog.Logger
	rl        ratelog.Limiter
	self      string // this node's lifecycle: RID#generation
	rid       string

	seq atomic.Uint64 // attaches on this node lifecycle

	mu      sync.Mutex
	pres    map[*presenter]*presentation
	wtopics map[string]*workerTopic
	stopped bool

	stop    chan struct{}
	wg      sync.WaitGroup // routed calls and re-attaches in flight
	unwatch func()         // membership
	mirror  *mirror        // the sessions directory, as this node serves it

	stats attacherCounters
	host  atomic.Pointer[Host] // the server host it serves: its metrics count the drops
}

type attacherCounters struct {
	routed, reattaches, staleNotices, dropped atomic.Int64
	opsRefused                                atomic.Int64
}

// AttacherStats are an Attacher's figures.
type AttacherStats struct {
	Presentations int   // presentations that selected a session
	Attached      int   // of which have a live route to a worker
	WorkerTopics  int   // worker topics this node subscribes to
	Routed        int64 // session-scoped calls routed to workers
	Reattaches    int64 // routes attached again after they broke
	StaleNotices  int64 // publications of a worker incarnation no presentation here is attached to
	Dropped       int64 // session subscriptions dropped because their presentation fell behind
	Subscriptions int   // session subscriptions the presentations hold
	OpsRefused    int64 // session subscribes, catalogues, unsubscribes and cancels refused at a presentation's bound of them in progress
}

// presentation is one presenter's selection and route.
type presentation struct {
	p  *presenter
	op sync.Mutex // serialises attach, detach and re-attach

	// under Attacher.mu
	session     string // the selection ("" none)
	route       *route // the live route (nil none)
	state       string
	closed      bool
	reattaching bool
	// subs are the session-scoped subscriptions made on the current route: what of
	// its worker's publications the presentation gets, each with the id its client
	// gave it (0: none).
	subs map[subAddr]uint64

	inflight atomic.Int64
}

// route is a presentation's live route to a worker.
type route struct {
	session    string
	attachment string
	client     string // the attachment's key at the worker
	worker     actor.Address
	inc        uint64
	node       string
	topic      string
}

// workerTopic is this node's subscription to one worker's topic, shared by the
// presentations attached to that worker.
type workerTopic struct {
	name  string
	refs  int
	ready chan struct{} // closed once subscribed (err set when it failed)
	err   error
	sub   *topic.LocalSubscription
	pres  atomic.Pointer[[]*presentation] // copy on write, under Attacher.mu
}

// NewAttacher starts the server side of presentations on the node of opts.Actors.
func NewAttacher(opts AttacherOptions) *Attacher {
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultAttachTimeout
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	self := opts.Actors.Node().ID()
	a := &Attacher{
		actors: opts.Actors, topics: opts.Topics, kind: opts.Kind, authorize: opts.Authorize,
		timeout: opts.Timeout, log: opts.Logger,
		self: self.RID + "#" + strconv.FormatUint(self.Generation, 10), rid: self.RID,
		pres: map[*presenter]*presentation{}, wtopics: map[string]*workerTopic{}, stop: make(chan struct{}),
	}
	a.mirror = newMirror(opts.Actors, opts.Topics, opts.Logger)
	a.mirror.start()
	a.unwatch = opts.Actors.Node().Membership().Subscribe(a.onMember)
	return a
}

// Facet provides SessionManagement in the node's server host.
func (a *Attacher) Facet() Facet {
	return Facet{ID: "meshnode.session-management", Setup: func(env *Env) {
		env.host.mu.Lock()
		env.host.att = a
		env.host.mu.Unlock()
		a.host.Store(env.host)
		Provide(env, SessionManagementToken, &SessionManagement{
			Create: Task(a.create), Remove: Task(a.remove), Attach: Task(a.attach), Detach: Task(a.detach),
		})
		Provide(env, SessionDirectoryToken, &SessionDirectory{Sessions: a.mirror.state, Changed: a.mirror.events})
	}}
}

// Stop ends the re-attaches and routed calls in flight and the node's worker
// subscriptions. The node stops it after its STREAM sessions closed.
func (a *Attacher) Stop() {
	a.mu.Lock()
	if a.stopped {
		a.mu.Unlock()
		return
	}
	a.stopped = true
	subs := make([]*topic.LocalSubscription, 0, len(a.wtopics))
	for _, wt := range a.wtopics {
		if wt.sub != nil {
			subs = append(subs, wt.sub)
		}
	}
	a.mu.Unlock()
	close(a.stop)
	a.unwatch()
	a.mirror.close()
	for _, s := range subs {
		s.Close()
	}
	a.wg.Wait()
}

// Stats returns the Attacher's figures.
func (a *Attacher) Stats() AttacherStats {
	a.mu.Lock()
	st := AttacherStats{WorkerTopics: len(a.wtopics)}
	for _, ps := range a.pres {
		if ps.session != "" {
			st.Presentations++
		}
		if ps.route != nil {
			st.Attached++
		}
		st.Subscriptions += len(ps.subs)
	}
	a.mu.Unlock()
	st.Routed, st.Reattaches, st.StaleNotices = a.stats.routed.Load(), a.stats.reattaches.Load(), a.stats.staleNotices.Load()
	st.OpsRefused = a.stats.opsRefused.Load()
	st.Dropped = a.stats.dropped.Load()
	return st
}

// state returns the presentation of p, making it on first use (it goes with p).
func (a *Attacher) state(p *presenter) (*presentation, error) {
	a.mu.Lock()
	if a.stopped {
		a.mu.Unlock()
		return nil, &Error{Code: CodeUnavailable, Message: "the server is stopping"}
	}
	if ps := a.pres[p]; ps != nil {
		a.mu.Unlock()
		return ps, nil
	}
	if p.ctx.Err() != nil {
		a.mu.Unlock()
		return nil, &Error{Code: CodeDisconnected, Message: "the connection is closed"}
	}
	ps := &presentation{p: p, state: AttachmentDetached}
	a.pres[p] = ps
	a.mu.Unlock()
	// Outside a.mu: a connection that ended meanwhile runs the hook at once.
	p.onClose(func() { a.gone(ps) })
	if p.ctx.Err() != nil {
		return nil, &Error{Code: CodeDisconnected, Message: "the connection is closed"}
	}
	return ps, nil
}

// gone ends a presentation whose connection closed: its worker forgets the attachment
// (cancelling its calls there) and the node's worker subscription is released.
func (a *Attacher) gone(ps *presentation) {
	a.mu.Lock()
	ps.closed = true
	r := ps.route
	ps.route, ps.session, ps.subs = nil, "", nil
	delete(a.pres, ps.p)
	a.mu.Unlock()
	if r != nil {
		a.release(ps, r)
		a.detachAsync(r)
	}
}

// sessionID is a valid session id.
var sessionID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$`)

func checkSession(id string) error {
	if !sessionID.MatchString(id) {
		return &Error{Code: CodeInvalidArguments, Message: fmt.Sprintf("session id %q: 1-128 of [A-Za-z0-9._:@-], starting with a letter or digit", id)}
	}
	return nil
}

func (a *Attacher) authorized(ctx context.Context, action Action, session string) error {
	if a.authorize == nil {
		return nil
	}
	client, _ := ClientOf(ctx)
	if err := a.authorize(ctx, client, action, session); err != nil {
		var e *Error
		if errors.As(err, &e) {
			return e
		}
		return &Error{Code: CodeNotAuthorized, Message: fmt.Sprintf("not authorized to %s session %s", action, session)}
	}
	return nil
}

// directoryRequest asks the sessions directory.
func (a *Attacher) directoryRequest(ctx context.Context, msg any) error {
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	v, err := a.actors.Request(ctx, actor.Address{Kind: DirectoryKind, ID: DirectoryID}, msg)
	if err != nil {
		return &Error{Code: CodeUnavailable, Message: "the sessions directory cannot be reached: " + err.Error()}
	}
	ans, ok := v.(*answer)
	if !ok {
		return &Error{Code: CodeInternal, Message: fmt.Sprintf("the sessions directory answered %T", v)}
	}
	return ans.err()
}

func (a *Attacher) create(ctx context.Context, in CreateArgs) (SessionRef, error) {
	if in.Session == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		in.Session = "s-" + hex.EncodeToString(b[:])
	}
	if err := checkSession(in.Session); err != nil {
		return SessionRef{}, err
	}
	if len(in.Title) > 256 {
		return SessionRef{}, &Error{Code: CodeInvalidArguments, Message: "a title is at most 256 bytes"}
	}
	if err := a.authorized(ctx, ActionCreate, in.Session); err != nil {
		return SessionRef{}, err
	}
	client, _ := ClientOf(ctx)
	if err := a.directoryRequest(ctx, &dirCreate{ID: in.Session, Title: in.Title, Owner: client.ID}); err != nil {
		return SessionRef{}, err
	}
	// The worker starts now (on the node placement picks), not at the first attach.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.timeout)
	defer cancel()
	if err := a.actors.Send(sctx, actor.Address{Kind: a.kind, ID: in.Session}, &workerStart{}); err != nil {
		a.rl.Log(a.log, slog.LevelWarn, "worker_start_failed", "services: a created session's worker did not start; it starts at its first attach",
			"session", in.Session, "err", err)
	}
	return SessionRef{Session: in.Session}, nil
}

func (a *Attacher) remove(ctx context.Context, in SessionRef) (struct{}, error) {
	if err := checkSession(in.Session); err != nil {
		return struct{}{}, err
	}
	if err := a.authorized(ctx, ActionRemove, in.Session); err != nil {
		return struct{}{}, err
	}
	if err := a.directoryRequest(ctx, &dirRemove{ID: in.Session}); err != nil {
		return struct{}{}, err
	}
	// A running worker tells its presentations and stops; none is started for it.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.timeout)
	defer cancel()
	if _, f, err := a.actors.Where(wctx, in.Session); err == nil {
		_ = a.actors.Send(wctx, f, &workerRemoved{})
	}
	return struct{}{}, nil
}

func (a *Attacher) attach(ctx context.Context, in AttachArgs) (Attachment, error) {
	p, ok := presenterOf(ctx)
	if !ok {
		return Attachment{}, &Error{Code: CodeNotAuthorized, Message: "attach needs a presentation connection (STREAM or loopback)"}
	}
	session := in.Session
	if session == "" {
		session = in.Actor
	}
	if err := checkSession(session); err != nil {
		return Attachment{}, err
	}
	ps, err := a.state(p)
	if err != nil {
		return Attachment{}, err
	}
	if err := a.authorized(ctx, ActionAttach, session); err != nil {
		return Attachment{}, err
	}
	ps.op.Lock()
	defer ps.op.Unlock()
	if err := a.directoryRequest(ctx, &dirLookup{ID: session}); err != nil {
		return Attachment{}, err
	}
	// The previous selection's calls, subscriptions and references end with its route.
	a.mu.Lock()
	old := ps.route
	ps.route, ps.session, ps.subs = nil, session, nil
	a.mu.Unlock()
	var replaces string
	if old != nil {
		a.release(ps, old)
		if old.session == session {
			replaces = old.client // the worker ends it in the attach's own turn
		} else {
			a.detachAsync(old)
		}
	}
	a.push(ps, AttachmentAttaching, session, nil, nil)
	r, err := a.connect(ctx, ps, session, replaces)
	if err != nil {
		if replaces != "" {
			a.detachAsync(old) // the attach may not have reached the worker to end it
		}
		a.mu.Lock()
		ps.state = AttachmentDegraded
		a.mu.Unlock()
		a.push(ps, AttachmentDegraded, session, nil, err)
		return Attachment{}, err
	}
	a.mu.Lock()
	node := r.node
	a.mu.Unlock()
	return Attachment{Session: session, Node: node, Attachment: r.attachment}, nil
}

func (a *Attacher) detach(ctx context.Context, _ struct{}) (struct{}, error) {
	p, ok := presenterOf(ctx)
	if !ok {
		return struct{}{}, &Error{Code: CodeNotAuthorized, Message: "detach needs a presentation connection (STREAM or loopback)"}
	}
	ps, err := a.state(p)
	if err != nil {
		return struct{}{}, err
	}
	ps.op.Lock()
	defer ps.op.Unlock()
	a.mu.Lock()
	r, session := ps.route, ps.session
	ps.route, ps.session, ps.state, ps.subs = nil, "", AttachmentDetached, nil
	a.mu.Unlock()
	if session == "" {
		return struct{}{}, &Error{Code: CodeNotAttached, Message: "no session is attached"}
	}
	if r != nil {
		a.release(ps, r)
		a.detachAsync(r)
	}
	a.push(ps, AttachmentDetached, "", nil, nil)
	return struct{}{}, nil
}

// connect makes a route from ps to session's worker (ps.op is held): the worker
// registers the attachment, this node subscribes to the worker's topic, and the
// presentation is told attached. replaces is the client key of the presentation's
// previous attachment to the same worker ("" for none), which the worker ends first.
func (a *Attacher) connect(ctx context.Context, ps *presentation, session, replaces string) (*route, error) {
	n := a.seq.Add(1)
	r := &route{
		session:    session,
		attachment: a.self + "." + strconv.FormatUint(n, 10),
		client:     a.self + "/" + ps.p.key + "#" + strconv.FormatUint(n, 10),
		worker:     actor.Address{Kind: a.kind, ID: session},
	}
	rctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	v, err := a.actors.Request(rctx, r.worker, &workerAttach{Client: r.client, Presenter: ps.p.id, Transport: ps.p.transport, Attachment: r.attachment, Replaces: replaces})
	if err != nil {
		return nil, workerError(err)
	}
	switch m := v.(type) {
	case *workerAttached:
		r.topic, r.node, r.inc = m.Topic, m.Node, m.Incarnation
	case *answer:
		if err := m.err(); err != nil {
			return nil, err
		}
		return nil, &Error{Code: CodeInternal, Message: "the session worker answered no attachment"}
	default:
		return nil, &Error{Code: CodeInternal, Message: fmt.Sprintf("the session worker answered %T", v)}
	}
	if err := a.acquire(rctx, ps, r); err != nil {
		a.detachAsync(r)
		return nil, err
	}
	a.mu.Lock()
	if ps.closed || ps.session != session {
		// The connection closed, or the selection changed, while this route was made.
		a.mu.Unlock()
		a.release(ps, r)
		a.detachAsync(r)
		return nil, &Error{Code: CodeDisconnected, Message: "the presentation went away while attaching"}
	}
	ps.route, ps.state, ps.subs = r, AttachmentAttached, nil
	a.mu.Unlock()
	a.push(ps, AttachmentAttached, session, r, nil)
	return r, nil
}

// acquire subscribes this node to r's worker topic (once for every presentation
// attached to that worker) and adds ps to its dispatch list.
func (a *Attacher) acquire(ctx context.Context, ps *presentation, r *route) error {
	a.mu.Lock()
	if a.stopped {
		a.mu.Unlock()
		return &Error{Code: CodeUnavailable, Message: "the server is stopping"}
	}
	wt := a.wtopics[r.topic]
	first := wt == nil
	if first {
		wt = &workerTopic{name: r.topic, ready: make(chan struct{})}
		empty := []*presentation{}
		wt.pres.Store(&empty)
		a.wtopics[r.topic] = wt
	}
	wt.refs++
	a.mu.Unlock()
	if first {
		wt.sub, wt.err = a.topics.SubscribeLocal(ctx, r.topic, func(d topic.Delivery) bool { return a.receive(wt, d) })
		close(wt.ready)
	} else {
		select {
		case <-wt.ready:
		case <-ctx.Done():
			a.unref(wt)
			return &Error{Code: CodeSessionUnavailable, Message: "the worker's updates could not be subscribed in time"}
		}
	}
	if wt.err != nil {
		a.unref(wt)
		return &Error{Code: CodeSessionUnavailable, Message: "the worker's updates cannot be subscribed: " + wt.err.Error()}
	}
	a.mu.Lock()
	list := append(append([]*presentation(nil), *wt.pres.Load()...), ps)
	wt.pres.Store(&list)
	a.mu.Unlock()
	return nil
}

// release takes ps off r's worker topic (unsubscribing the node after its last one).
func (a *Attacher) release(ps *presentation, r *route) {
	a.mu.Lock()
	wt := a.wtopics[r.topic]
	if wt == nil {
		a.mu.Unlock()
		return
	}
	cur := *wt.pres.Load()
	list := make([]*presentation, 0, len(cur))
	for _, x := range cur {
		if x != ps {
			list = append(list, x)
		}
	}
	wt.pres.Store(&list)
	a.mu.Unlock()
	a.unref(wt)
}

func (a *Attacher) unref(wt *workerTopic) {
	a.mu.Lock()
	wt.refs--
	last := wt.refs == 0
	if last && a.wtopics[wt.name] == wt {
		delete(a.wtopics, wt.name)
	}
	a.mu.Unlock()
	if last {
		<-wt.ready
		if wt.sub != nil {
			wt.sub.Close()
		}
	}
}

// detachAsync tells r's worker the attachment ended, without waiting.
func (a *Attacher) detachAsync(r *route) {
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = a.actors.Send(ctx, r.worker, &workerDetach{Client: r.client})
	}()
}

// attachmentNotice is NameAttachment's payload.
type attachmentNotice struct {
	State      string `json:"state"`
	Session    string `json:"session,omitempty"`
	Attachment string `json:"attachment,omitempty"`
	Node       string `json:"node,omitempty"`
	// Incarnation is the worker's (a replacement has another): the session's frames
	// carry it, and frames of another are not the current route's.
	Incarnation uint64 `json:"incarnation,omitempty"`
	Code        string `json:"code,omitempty"`
	Message     string `json:"message,omitempty"`
}

// push tells the presentation its attachment state (best effort: a connection that
// cannot take it now learns it from its next call's answer).
func (a *Attacher) push(ps *presentation, state, session string, r *route, err error) {
	n := attachmentNotice{State: state, Session: session}
	if r != nil {
		a.mu.Lock()
		n.Attachment, n.Node, n.Incarnation = r.attachment, r.node, r.inc
		a.mu.Unlock()
	}
	if err != nil {
		we := wireError(err)
		n.Code, n.Message = we.Code, we.Message
	}
	b, _ := json.Marshal(n)
	_ = ps.p.push(frame{name: NameAttachment, payload: b})
}

// current returns ps's live route, attaching again first when its selection has none
// (a route that broke). ps.op must not be held.
func (a *Attacher) current(ctx context.Context, ps *presentation) (*route, error) {
	a.mu.Lock()
	r, session := ps.route, ps.session
	a.mu.Unlock()
	switch {
	case r != nil:
		return r, nil
	case session == "":
		return nil, &Error{Code: CodeNotAttached, Message: "no session is attached"}
	}
	if err := a.reconnect(ctx, ps, session); err != nil {
		return nil, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if ps.route == nil {
		return nil, &Error{Code: CodeSessionUnavailable, Message: "the session worker cannot be reached"}
	}
	return ps.route, nil
}

// reconnect attaches ps to session again (a route that broke), unless that happened
// meanwhile or the selection changed. unknown_session ends the selection.
func (a *Attacher) reconnect(ctx context.Context, ps *presentation, session string) error {
	ps.op.Lock()
	defer ps.op.Unlock()
	a.mu.Lock()
	if ps.closed || ps.session != session || ps.route != nil {
		a.mu.Unlock()
		return nil
	}
	ps.state = AttachmentAttaching
	a.mu.Unlock()
	a.push(ps, AttachmentAttaching, session, nil, nil)
	if err := a.directoryRequest(ctx, &dirLookup{ID: session}); err != nil {
		if errors.Is(err, ErrUnknownSession) {
			a.mu.Lock()
			if ps.session == session {
				ps.session, ps.state = "", AttachmentDetached
			}
			a.mu.Unlock()
			a.push(ps, AttachmentDetached, "", nil, err)
		} else {
			a.degrade(ps, session, err)
		}
		return err
	}
	if _, err := a.connect(ctx, ps, session, ""); err != nil {
		a.degrade(ps, session, err)
		return err
	}
	a.stats.reattaches.Add(1)
	return nil
}

func (a *Attacher) degrade(ps *presentation, session string, err error) {
	a.mu.Lock()
	if ps.session == session {
		ps.state = AttachmentDegraded
	}
	a.mu.Unlock()
	a.push(ps, AttachmentDegraded, session, nil, err)
}

// broken drops r as ps's route (if it still is) and attaches ps again in the
// background.
func (a *Attacher) broken(ps *presentation, r *route, why string) {
	a.mu.Lock()
	if ps.route != r || ps.closed || a.stopped {
		a.mu.Unlock()
		return
	}
	ps.route, ps.state, ps.subs = nil, AttachmentDegraded, nil
	start := !ps.reattaching
	ps.reattaching = true
	session := ps.session
	a.mu.Unlock()
	a.release(ps, r)
	a.log.Debug("services: a presentation's route to its session worker broke", "session", r.session, "why", why)
	if !start {
		return
	}
	a.wg.Add(1)
	go a.reattachLoop(ps, session)
}

func (a *Attacher) reattachLoop(ps *presentation, session string) {
	defer a.wg.Done()
	defer func() {
		a.mu.Lock()
		ps.reattaching = false
		a.mu.Unlock()
	}()
	wait, until := reattachFirst, time.Now().Add(reattachFor)
	for {
		ctx, cancel := context.WithTimeout(ps.p.ctx, a.timeout)
		err := a.reconnect(ctx, ps, session)
		cancel()
		if err == nil || errors.Is(err, ErrUnknownSession) || time.Now().After(until) {
			return
		}
		t := time.NewTimer(wait)
		select {
		case <-a.stop:
			t.Stop()
			return
		case <-ps.p.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		wait = min(2*wait, reattachMax)
	}
}

// onMember breaks the routes to workers of a node that failed or left.
func (a *Attacher) onMember(ev mesh.MemberEvent) {
	if ev.Type == mesh.EventJoined {
		return
	}
	// The directory forgets the node's workers and presentations (every node says so:
	// one of them reaches it).
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), a.timeout)
		defer cancel()
		select {
		case <-a.stop:
			return
		default:
		}
		_ = a.actors.Send(ctx, actor.Address{Kind: DirectoryKind, ID: DirectoryID}, &dirNodeDown{RID: ev.Member.ID.RID})
	}()
	type broke struct {
		ps *presentation
		r  *route
	}
	var bs []broke
	a.mu.Lock()
	for _, ps := range a.pres {
		if r := ps.route; r != nil && r.node == ev.Member.ID.RID {
			bs = append(bs, broke{ps, r})
		}
	}
	a.mu.Unlock()
	for _, b := range bs {
		a.broken(b.ps, b.r, "the worker's node "+ev.Type.String())
	}
}

// receive takes one publication of a worker this node subscribes to (on the topic
// layer's delivery path: it must not block).
func (a *Attacher) receive(wt *workerTopic, d topic.Delivery) bool {
	if d.Message.Name != pubName {
		return false
	}
	h, value, err := decodePub(d.Message.Payload)
	if err != nil {
		a.rl.Log(a.log, slog.LevelWarn, "bad_publication", "services: a worker topic carried a publication that does not decode", "topic", wt.name, "err", err)
		return false
	}
	list := *wt.pres.Load()
	if h.Kind == pubNotice {
		took := false
		for _, ps := range list {
			a.mu.Lock()
			r := ps.route
			a.mu.Unlock()
			if r != nil && r.topic == wt.name && r.inc == h.Incarnation {
				took = true
				a.notice(ps, r, h.Notice, h.Message)
			}
		}
		if !took {
			a.stats.staleNotices.Add(1)
		}
		return took
	}
	addr, dv := h.delivery(value)
	f := dv.toFrame(addr, ScopeSession, h.Incarnation)
	var (
		encoded session.Frame
		encErr  error
		once    bool
		behind  []*presentation
		sent    int
	)
	for _, ps := range list {
		a.mu.Lock()
		r := ps.route
		_, subscribed := ps.subs[addr]
		a.mu.Unlock()
		if r == nil || r.topic != wt.name || r.inc != h.Incarnation || !subscribed {
			continue
		}
		var err error
		if ps.p.sendFrame != nil {
			if !once {
				once = true
				encoded, encErr = session.EncodeSend(f.name, wire.CodecJSON, f.payload, f.md)
			}
			if encErr != nil {
				a.rl.Log(a.log, slog.LevelWarn, "bad_publication", "services: a worker publication does not make a STREAM frame", "member", addr.String(), "err", encErr)
				return false
			}
			err = ps.p.sendFrame(encoded)
		} else {
			err = ps.p.push(f)
		}
		switch {
		case err == nil:
			sent++
		case errors.Is(err, session.ErrBehind):
			behind = append(behind, ps)
		}
		if dv.op == opClosed {
			a.mu.Lock()
			delete(ps.subs, addr)
			a.mu.Unlock()
		}
	}
	for _, ps := range behind {
		a.dropSubs(ps)
	}
	return sent > 0
}

// dropSubs drops every session subscription of a presentation whose connection fell
// behind: it is told (flow_control, in the room a socket keeps for what cannot wait)
// and subscribes again once it has caught up; its worker stops publishing for it.
func (a *Attacher) dropSubs(ps *presentation) {
	a.mu.Lock()
	r, subs := ps.route, ps.subs
	ps.subs = nil
	a.mu.Unlock()
	if r == nil || len(subs) == 0 {
		return
	}
	why := &delivery{op: opClosed, err: &Error{Code: CodeFlowControl, Message: "the presentation fell behind and its subscriptions were dropped; subscribe again"}}
	h := a.host.Load()
	for addr, sid := range subs {
		if h != nil {
			h.stats.countDrop() // in the node's metrics, before the attacher's own figure
		}
		a.stats.dropped.Add(1)
		notice := &delivery{op: why.op, err: why.err, sid: sid}
		_ = ps.p.push(notice.toFrame(addr, ScopeSession, r.inc))
		a.unsubscribeAsync(r, addr, sid, nil) // at most MaxSubscriptionsPerClient of them
	}
	a.rl.Log(a.log, slog.LevelWarn, "presentation_dropped", "services: a presentation fell behind; its session subscriptions were dropped",
		"presentation", ps.p.id, "subscriptions", len(subs))
}

// subscribe subscribes p's presentation to a member of its worker's: the snapshot it
// starts from is the answer; from then on what the worker publishes of it is passed on.
// sid is the client's id of the subscription (0: none), as Endpoint.subscribe has it:
// a subscribe overtaken by a later one of the same member is refused.
func (a *Attacher) subscribe(ctx context.Context, p *presenter, addr subAddr, sid uint64) (json.RawMessage, error) {
	ps, err := a.state(p)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	r, err := a.current(ctx, ps)
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	if ps.route != r {
		a.mu.Unlock()
		return nil, &Error{Code: CodeStaleGeneration, Message: "the route changed while subscribing"}
	}
	if ps.subs == nil {
		ps.subs = map[subAddr]uint64{}
	}
	cur, ok := ps.subs[addr]
	switch {
	case !ok && len(ps.subs) >= subscriptionsPerClient:
		a.mu.Unlock()
		return nil, &Error{Code: CodeUnavailable, Message: fmt.Sprintf("subscription to %s: this presentation holds %d session subscriptions (the bound)", addr, subscriptionsPerClient)}
	case ok && sid != 0 && cur > sid:
		a.mu.Unlock()
		return nil, superseded(addr)
	}
	// Passed on from now: what the worker publishes after its snapshot reaches us.
	ps.subs[addr] = sid
	a.mu.Unlock()
	v, err := a.actors.Request(ctx, r.worker, &workerSubscribe{Client: r.client, Svc: addr.svc, Key: addr.key, Gen: addr.gen, Ref: addr.ref, Member: addr.member, Sid: sid})
	var ans *answer
	if err == nil {
		var ok bool
		if ans, ok = v.(*answer); !ok {
			err = &Error{Code: CodeInternal, Message: fmt.Sprintf("the session worker answered %T", v)}
		} else {
			err = ans.err()
		}
	}
	if err != nil {
		a.mu.Lock()
		if cur, ok := ps.subs[addr]; ps.route == r && ok && cur == sid {
			delete(ps.subs, addr) // not a later subscribe's of the same member
		}
		a.mu.Unlock()
		if routeBroken(err) {
			a.broken(ps, r, err.Error())
		}
		if ans != nil && ans.staleRoute() {
			a.broken(ps, r, "the worker does not know the attachment")
		}
		return nil, workerError(err)
	}
	return json.RawMessage(ans.Raw), nil
}

// subscribeAsync is subscribe answered to done from a goroutine of the Attacher's.
func (a *Attacher) subscribeAsync(p *presenter, addr subAddr, sid uint64, done func(json.RawMessage, error)) {
	if !a.startOp(p) {
		done(nil, a.opsRefused(p, "subscribe to "+addr.String()))
		return
	}
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		defer p.ops.Add(-1)
		runOpHook()
		done(a.subscribe(p.ctx, p, addr, sid))
	}()
}

// opsPerPresenter is the bound of a presentation's session requests in progress in
// force (MaxInflightPerClient; tests lower it), and opHook, when a test sets it, runs
// first in each of them.
var (
	opsPerPresenter = func() *atomic.Int64 { var n atomic.Int64; n.Store(MaxInflightPerClient); return &n }()
	opHook          atomic.Pointer[func()]
)

func runOpHook() {
	if h := opHook.Load(); h != nil {
		(*h)()
	}
}

// startOp takes one of p's session requests in progress (false at the bound).
func (a *Attacher) startOp(p *presenter) bool {
	if p.ops.Add(1) > opsPerPresenter.Load() {
		p.ops.Add(-1)
		return false
	}
	return true
}

// opsRefused is the answer to a session request of p past its bound, counted.
func (a *Attacher) opsRefused(p *presenter, what string) error {
	a.stats.opsRefused.Add(1)
	return &Error{Code: CodeUnavailable, Message: fmt.Sprintf("%s: this presentation has %d session requests in progress (the bound)", what, opsPerPresenter.Load())}
}

// unsubscribe ends p's session subscription to addr: with a sid (not 0), only the
// subscription of that id or an older one (as Endpoint.unsubscribe), here and at the
// worker.
func (a *Attacher) unsubscribe(p *presenter, addr subAddr, sid uint64) {
	a.mu.Lock()
	ps := a.pres[p]
	var r *route
	if ps != nil {
		r = ps.route
		if cur, ok := ps.subs[addr]; ok && (sid == 0 || cur <= sid) {
			delete(ps.subs, addr)
		}
	}
	a.mu.Unlock()
	if r == nil {
		return
	}
	if !a.startOp(p) {
		// Nobody waits for an answer: the subscription ends with the attachment (and
		// counts against the presentation's bound of subscriptions meanwhile).
		_ = a.opsRefused(p, "unsubscribe from "+addr.String())
		return
	}
	a.unsubscribeAsync(r, addr, sid, func() { p.ops.Add(-1) })
}

func (a *Attacher) unsubscribeAsync(r *route, addr subAddr, sid uint64, done func()) {
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		if done != nil {
			defer done()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = a.actors.Send(ctx, r.worker, &workerUnsubscribe{Client: r.client, Svc: addr.svc, Key: addr.key, Gen: addr.gen, Ref: addr.ref, Member: addr.member, Sid: sid})
	}()
}

// notice handles what a worker says about itself.
func (a *Attacher) notice(ps *presentation, r *route, what, node string) {
	switch what {
	case noticeMoved:
		// The route stays (same worker, same topic); a failure of its new node breaks it.
		a.mu.Lock()
		if ps.route == r && node != "" {
			r.node = node // under a.mu, as every read of a live route's node
		}
		a.mu.Unlock()
	case noticeStopped:
		a.broken(ps, r, "the worker stopped")
	case noticeRemoved:
		a.mu.Lock()
		if ps.route != r {
			a.mu.Unlock()
			return
		}
		ps.route, ps.session, ps.state, ps.subs = nil, "", AttachmentDetached, nil
		a.mu.Unlock()
		a.release(ps, r)
		a.push(ps, AttachmentDetached, "", nil, &Error{Code: CodeUnknownSession, Message: "the session " + r.session + " was removed"})
	}
}

// workerError maps a failed Actor request to a worker to the presentation's answer.
func workerError(err error) error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	if k, ok := fault.Of(err); ok && k == fault.DeadlineExceeded {
		return &Error{Code: CodeSessionUnavailable, Message: "the session worker did not answer in time"}
	}
	return &Error{Code: CodeSessionUnavailable, Message: "the session worker cannot be reached: " + err.Error()}
}

// routeBroken reports whether a failed request means the route itself is gone (the
// worker's node, or the worker).
func routeBroken(err error) bool {
	k, ok := fault.Of(err)
	return ok && (k == fault.Unavailable || k == fault.NotFound)
}

// call routes one session-scoped call of p's presentation to its worker; done gets
// the result, once, from another goroutine.
func (a *Attacher) call(p *presenter, rid string, call Call, done func(json.RawMessage, error)) {
	ps, err := a.state(p)
	if err != nil {
		done(nil, err)
		return
	}
	if rid == "" {
		done(nil, &Error{Code: CodeInvalidArguments, Message: "a call needs a request id"})
		return
	}
	if ps.inflight.Add(1) > MaxInflightPerClient {
		ps.inflight.Add(-1)
		done(nil, &Error{Code: CodeUnavailable, Message: fmt.Sprintf("call %s.%s: this presentation has %d session calls in flight (the bound)", call.Service, call.Member, MaxInflightPerClient)})
		return
	}
	a.mu.Lock()
	r := ps.route
	a.mu.Unlock()
	if r != nil {
		// The usual case: no goroutine waits for the answer.
		a.send(ps, r, rid, call, done)
		return
	}
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		ctx, cancel := context.WithTimeout(p.ctx, a.timeout)
		r, err := a.current(ctx, ps)
		cancel()
		if err != nil {
			ps.inflight.Add(-1)
			done(nil, err)
			return
		}
		a.send(ps, r, rid, call, done)
	}()
}

// send sends a routed call on route r and answers done when the worker does; it
// gives back the call's place in ps's bound.
func (a *Attacher) send(ps *presentation, r *route, rid string, call Call, done func(json.RawMessage, error)) {
	p := ps.p
	a.stats.routed.Add(1)
	ctx, cancel := context.WithTimeout(p.ctx, a.timeout)
	a.actors.RequestFunc(ctx, r.worker, &workerCall{Client: r.client, Rid: rid, Svc: call.Service, Key: call.Key, Gen: call.Generation, Ref: call.Ref, Member: call.Member, Args: call.Args, Trace: call.Trace},
		func(v any, err error) {
			cancel()
			ps.inflight.Add(-1)
			if err != nil {
				if p.ctx.Err() != nil {
					done(nil, &Error{Code: CodeDisconnected, Message: "the connection closed"})
					return
				}
				if routeBroken(err) {
					a.broken(ps, r, err.Error())
				}
				done(nil, workerError(err))
				return
			}
			ans, ok := v.(*answer)
			if !ok {
				done(nil, &Error{Code: CodeInternal, Message: fmt.Sprintf("the session worker answered %T", v)})
				return
			}
			if err := ans.err(); err != nil {
				if ans.staleRoute() {
					a.broken(ps, r, "the worker does not know the attachment")
				}
				done(nil, err)
				return
			}
			done(json.RawMessage(ans.Raw), nil)
		})
}

// cancel passes a cancel of p's session call rid to its worker.
func (a *Attacher) cancel(p *presenter, rid string) {
	a.mu.Lock()
	ps := a.pres[p]
	var r *route
	if ps != nil {
		r = ps.route
	}
	a.mu.Unlock()
	if r == nil || rid == "" {
		return
	}
	if !a.startOp(p) {
		_ = a.opsRefused(p, "cancel of request "+rid) // the call runs on, answered as usual
		return
	}
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		defer p.ops.Add(-1)
		runOpHook()
		ctx, cancel := context.WithTimeout(p.ctx, 5*time.Second)
		defer cancel()
		_ = a.actors.Send(ctx, r.worker, &workerCancel{Client: r.client, Rid: rid})
	}()
}

// catalogue asks p's worker for its catalogue.
func (a *Attacher) catalogue(ctx context.Context, p *presenter) (json.RawMessage, error) {
	ps, err := a.state(p)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	r, err := a.current(ctx, ps)
	if err != nil {
		return nil, err
	}
	v, err := a.actors.Request(ctx, r.worker, &workerCatalogue{Client: r.client})
	if err != nil {
		if routeBroken(err) {
			a.broken(ps, r, err.Error())
		}
		return nil, workerError(err)
	}
	ans, ok := v.(*answer)
	if !ok {
		return nil, &Error{Code: CodeInternal, Message: fmt.Sprintf("the session worker answered %T", v)}
	}
	if err := ans.err(); err != nil {
		if ans.staleRoute() {
			a.broken(ps, r, "the worker does not know the attachment")
		}
		return nil, err
	}
	return json.RawMessage(ans.Raw), nil
}

// catalogueAsync is catalogue answered to done from a goroutine of the Attacher's.
func (a *Attacher) catalogueAsync(p *presenter, done func(json.RawMessage, error)) {
	if !a.startOp(p) {
		done(nil, a.opsRefused(p, "catalogue"))
		return
	}
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		defer p.ops.Add(-1)
		runOpHook()
		done(a.catalogue(p.ctx, p))
	}()
}
