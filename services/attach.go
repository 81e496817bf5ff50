package services

import (
	"context"
	"errors"
	"sync"

	"github.com/meshnode/meshnode/actor"
	"github.com/meshnode/meshnode/binding"
	"github.com/meshnode/meshnode/fault"
	"github.com/meshnode/meshnode/session"
	"github.com/meshnode/meshnode/session/wire"
)

// SessionManagement is the server's control plane for a presentation's selected
// session: Attach binds the presentation's STREAM session to a session worker (an
// Actor, on any node) so that its session-service calls go there; Detach unbinds it.
// It is an ordinary server service (SessionManagementToken).
type SessionManagement struct {
	Attach Method[AttachArgs, Attachment]
	Detach Method[struct{}, struct{}]
}

// AttachArgs names the session worker to attach to.
type AttachArgs struct {
	Actor string `json:"actor"`
}

// Attachment is the selected session after an attach.
type Attachment struct {
	Actor string `json:"actor"`
	Node  string `json:"node"`
}

// SessionManagementToken is the server singleton "meshnode.session-management".
var SessionManagementToken = Define("meshnode.session-management", func(d *Describer, s *SessionManagement) {
	DescribeMethod(d, "attach", &s.Attach)
	DescribeMethod(d, "detach", &s.Detach)
})

// Authorize decides whether client may attach to the worker actorID; an *Error it
// returns is the caller's answer (ErrUnknownSession, say), any other error is
// not_authorized.
type Authorize func(ctx context.Context, client Client, actorID string) error

// Attacher keeps which worker each STREAM session of a node is attached to, and routes
// the session's session-service packets there through the binding (a relay to the
// bound Actor, any node). The binding generation of the attachment is the incarnation
// that fences frames of a previous selection.
type Attacher struct {
	binder    *binding.Binder
	kind      string
	authorize Authorize

	mu       sync.Mutex
	attached map[*session.Peer]string
	watched  map[*session.Peer]bool
}

// NewAttacher attaches sessions to Actors of workerKind through b; authorize (nil:
// everyone may attach to every worker) is asked first.
func NewAttacher(b *binding.Binder, workerKind string, authorize Authorize) *Attacher {
	return &Attacher{binder: b, kind: workerKind, authorize: authorize, attached: map[*session.Peer]string{}, watched: map[*session.Peer]bool{}}
}

// Facet provides SessionManagement in the server host.
func (a *Attacher) Facet() Facet {
	return Facet{ID: "meshnode.session-management", Setup: func(env *Env) {
		Provide(env, SessionManagementToken, &SessionManagement{Attach: Task(a.attach), Detach: Task(a.detach)})
	}}
}

// AttachedTo returns the worker the session of peer is attached to ("" for none).
func (a *Attacher) AttachedTo(p *session.Peer) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.attached[p]
}

// peerKey holds the STREAM session of a call served by a StreamServer.
type peerKey struct{}

func peerOf(ctx context.Context) (*session.Peer, bool) {
	p, ok := ctx.Value(peerKey{}).(*session.Peer)
	return p, ok
}

func (a *Attacher) attach(ctx context.Context, in AttachArgs) (Attachment, error) {
	peer, ok := peerOf(ctx)
	if !ok {
		return Attachment{}, &Error{Code: CodeNotAuthorized, Message: "attach needs a STREAM session"}
	}
	if in.Actor == "" || len(in.Actor) > 255 {
		return Attachment{}, &Error{Code: CodeInvalidArguments, Message: `attach needs {"actor": ID} (1-255 bytes)`}
	}
	if a.authorize != nil {
		client, _ := ClientOf(ctx)
		if err := a.authorize(ctx, client, in.Actor); err != nil {
			var e *Error
			if errors.As(err, &e) {
				return Attachment{}, e
			}
			return Attachment{}, &Error{Code: CodeNotAuthorized, Message: "not authorized to attach to " + in.Actor}
		}
	}
	a.mu.Lock()
	prev := a.attached[peer]
	a.mu.Unlock()
	if prev != "" && prev != in.Actor {
		// The previous selection's requests end with its binding: the worker closes that
		// presentation's endpoint, cancelling its calls.
		if err := a.binder.Unbind(ctx, peer, prev); err != nil && !errors.Is(err, fault.NotFound) {
			return Attachment{}, &Error{Code: CodeSessionUnavailable, Message: "detach from " + prev + " failed"}
		}
		a.forget(peer, prev)
	}
	bd, err := a.binder.Bind(ctx, peer, actor.Address{Kind: a.kind, ID: in.Actor})
	if err != nil {
		switch {
		case errors.Is(err, fault.NotFound), errors.Is(err, fault.NotConfigured):
			return Attachment{}, &Error{Code: CodeUnknownSession, Message: "no session worker " + in.Actor}
		default:
			return Attachment{}, &Error{Code: CodeSessionUnavailable, Message: "the session worker " + in.Actor + " cannot be reached"}
		}
	}
	a.mu.Lock()
	a.attached[peer] = in.Actor
	watch := !a.watched[peer]
	a.watched[peer] = true
	a.mu.Unlock()
	if watch {
		a.binder.Session(peer).OnReplaced(func(_ context.Context, actorID string) { a.forget(peer, actorID) })
		peer.AfterDisconnect(func(context.Context, wire.CloseReason) {
			a.mu.Lock()
			delete(a.attached, peer)
			delete(a.watched, peer)
			a.mu.Unlock()
		})
	}
	return Attachment{Actor: in.Actor, Node: bd.Actor.Node.RID}, nil
}

// forget drops the attachment of peer if it is still to actorID.
func (a *Attacher) forget(peer *session.Peer, actorID string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.attached[peer] == actorID {
		delete(a.attached, peer)
	}
}

func (a *Attacher) detach(ctx context.Context, _ struct{}) (struct{}, error) {
	peer, ok := peerOf(ctx)
	if !ok {
		return struct{}{}, &Error{Code: CodeNotAuthorized, Message: "detach needs a STREAM session"}
	}
	id := a.AttachedTo(peer)
	if id == "" {
		return struct{}{}, &Error{Code: CodeNotAttached, Message: "no session is attached"}
	}
	if err := a.binder.Unbind(ctx, peer, id); err != nil && !errors.Is(err, fault.NotFound) {
		return struct{}{}, &Error{Code: CodeSessionUnavailable, Message: "detach from " + id + " failed"}
	}
	a.forget(peer, id)
	return struct{}{}, nil
}

// relay sends a session-scoped service packet to the attached worker. The server reads
// no payload: the packet goes as it is, its metadata with it. A Request it cannot
// route gets the returned error as its answer.
func (a *Attacher) relay(ctx context.Context, p *session.Packet) *Error {
	id := a.AttachedTo(p.Peer)
	if id == "" {
		return &Error{Code: CodeNotAttached, Message: "no session is attached"}
	}
	if err := a.binder.Relay(ctx, p, id); err != nil {
		return &Error{Code: CodeSessionUnavailable, Message: "the session worker cannot be reached"}
	}
	return nil
}
