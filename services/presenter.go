package services

import (
	"context"
	"strconv"
	"sync/atomic"

	"github.com/meshnode/meshnode/session"
	"github.com/meshnode/meshnode/session/wire"
)

// What a server host pushes to a client connection besides answers: the control
// frames of the service layer. Over STREAM each is a Send with the frame's name, its
// control fields as metadata and its payload; over a loopback connection the frame is
// handed over in process.
const (
	// NameAttachment: the presentation's attachment changed (payload: JSON
	// {"state","session","attachment","node","code","message"}; state is one of
	// attached, attaching, degraded, detached).
	NameAttachment = "$svc.attachment"
)

// Attachment states, as NameAttachment carries them (docs/services.md).
const (
	AttachmentDetached  = "detached"
	AttachmentAttaching = "attaching"
	AttachmentAttached  = "attached"
	AttachmentDegraded  = "degraded"
)

// frame is one push from a server host to a client connection.
type frame struct {
	name    string
	md      wire.Metadata
	payload []byte
}

// presenter is the server's handle on one client connection that may attach to a
// session worker (a presentation): a STREAM session or a loopback connection. Its
// identity is the one the server authenticated; push hands it a frame without waiting
// (a connection that cannot take it at once fails the push).
type presenter struct {
	id        string // Client.ID
	transport string
	// key names the connection among those of this node's lifecycle: the attacher adds
	// the node's identity and a count of attaches to make attachment keys.
	key  string
	ctx  context.Context // ends when the connection ends
	push func(f frame) error
	// sendFrame, for a STREAM session, writes a frame encoded once for many (a
	// worker's publication) in the room below the socket's soft limit: at the limit
	// it fails with session.ErrBehind.
	sendFrame func(session.Frame) error
	// onClose registers fn to run once the connection ended.
	onClose func(fn func())
	// ops counts the session-scope subscribes, catalogues, unsubscribes and cancels
	// in progress (each on a goroutine of the Attacher's): bounded by
	// MaxInflightPerClient like its calls, so a client cannot start goroutines
	// without bound by sending them faster than the worker answers.
	ops atomic.Int64
}

// presenterKey holds the presenter of a call's connection in the endpoint's context:
// SessionManagement finds the presentation that calls it there.
type presenterKey struct{}

func presenterOf(ctx context.Context) (*presenter, bool) {
	p, ok := ctx.Value(presenterKey{}).(*presenter)
	return p, ok
}

// loopbackKeys numbers loopback presentations in this process.
var loopbackKeys atomic.Uint64

func nextLoopbackKey() string { return "l" + strconv.FormatUint(loopbackKeys.Add(1), 10) }
