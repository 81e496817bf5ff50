package connector

import (
	"fmt"
	"strings"

	"github.com/meshnode/meshnode/fault"
	"github.com/meshnode/meshnode/session/wire"
)

// The error meanings of digest §4.6, for errors.Is; each is of a fault kind too.
// Besides these, a request fails with a *RemoteError for an Error reply (which matches
// the fault kind of its code), with the context's error when its context is
// cancelled, and with the codec's error (codec.ErrDecode) when the reply payload does
// not decode into the caller's value.
var (
	// ErrConfiguration: New was given a bad endpoint or bad options.
	ErrConfiguration = fault.New(fault.NotConfigured, "connector: configuration error")
	// ErrValidation: the call's name, metadata or payload breaks a wire rule or the send
	// bound; nothing was written.
	ErrValidation = fault.New(fault.InvalidOperation, "connector: validation failed")
	// ErrDisconnected: there is no live connection, or it dropped while the operation was
	// in flight. Errors caused by a drop are *CloseError values carrying the reason.
	ErrDisconnected = fault.New(fault.Unavailable, "connector: disconnected")
	// ErrConnectTimeout: the connect attempt did not finish within ConnectTimeout.
	ErrConnectTimeout = fault.New(fault.DeadlineExceeded, "connector: connect timeout")
	// ErrTLSValidation: the server certificate failed verification, or the server
	// rejected ours.
	ErrTLSValidation = fault.New(fault.Rejected, "connector: tls validation failed")
	// ErrRequestTimeout: no reply before the context deadline or RequestTimeout. These
	// errors also match context.DeadlineExceeded.
	ErrRequestTimeout = fault.New(fault.DeadlineExceeded, "connector: request timeout")
	// ErrFrameDecode: a frame, header or Error payload could not be decoded.
	ErrFrameDecode = fault.New(fault.ProtocolError, "connector: frame decode failed")
	// ErrFrameTooLarge: an inbound payload (on the wire or decompressed) is over
	// MaxReceivePayload; the connection is ended.
	ErrFrameTooLarge = fault.New(fault.ProtocolError, "connector: frame too large")
	// ErrCompression: a call asked for compression that this connector cannot do.
	ErrCompression = fault.New(fault.NotConfigured, "connector: compression failed")
	// ErrDecompression: an inbound compressed payload could not be decompressed (or
	// compression is off); the connection is kept.
	ErrDecompression = fault.New(fault.ProtocolError, "connector: decompression failed")
	// ErrUnexpectedReply: a Response or Error names a request_seq that is not pending
	// (never sent, or already timed out or cancelled). Reported through OnError.
	ErrUnexpectedReply = fault.New(fault.ProtocolError, "connector: reply matches no pending request")
	// ErrUserCallback: a handler or callback panicked. Reported through OnError.
	ErrUserCallback = fault.New(fault.InternalFailure, "connector: user callback failed")
	// ErrClosed: Close was called; the connector is terminal.
	ErrClosed = fault.New(fault.ShuttingDown, "connector: closed")
)

// RemoteError is the failure a server reported with an Error frame (digest §2.11).
type RemoteError struct {
	Code    string
	Message string
}

func (e *RemoteError) Error() string {
	return "connector: remote error " + e.Code + ": " + e.Message
}

// Unwrap returns the fault kind of the code (none for a code outside the error model),
// so errors.Is(err, fault.NotFound) works on a client as on the server.
func (e *RemoteError) Unwrap() error {
	if k, ok := fault.KindOf(e.Code); ok {
		return k
	}
	return nil
}

// CloseError is how a drop of the connection reaches the operations it interrupted:
// Reason is the close reason (from session-closing, else TransportError, or
// HeartbeatTimeout, or ClientClose when Close was called). It matches ErrDisconnected and
// whatever Cause matches (ErrClosed after Close, ErrFrameTooLarge, a net error, ...).
type CloseError struct {
	Reason     wire.CloseReason
	Diagnostic string // the session-closing diagnostic, if the server sent one
	Cause      error  // may be nil
}

func (e *CloseError) Error() string {
	s := "connector: disconnected (" + e.Reason.String() + ")"
	if e.Diagnostic != "" {
		s += ": " + e.Diagnostic
	}
	if e.Cause != nil {
		s += ": " + e.Cause.Error()
	}
	return s
}

// Replaced reports whether the server closed the session because another session
// bound the Actor this one was bound to (ServerDrain with the diagnostic
// wire.DiagnosticReplaced), as opposed to a drain of the server. A session that
// reconnects after a replacement starts unbound.
func (e *CloseError) Replaced() bool {
	return e.Reason == wire.CloseServerDrain && strings.HasPrefix(e.Diagnostic, wire.DiagnosticReplaced)
}

// Unwrap lets errors.Is see both ErrDisconnected and the cause.
func (e *CloseError) Unwrap() []error {
	if e.Cause == nil {
		return []error{ErrDisconnected}
	}
	return []error{ErrDisconnected, e.Cause}
}

// validationError marks a wire rule violation found while building an outbound frame.
func validationError(err error) error {
	return fmt.Errorf("%w: %w", ErrValidation, err)
}
