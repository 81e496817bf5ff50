package session

import (
	"errors"
	"fmt"

	"github.com/meshnode/meshnode/fault"
)

// ErrConfiguration is matched (errors.Is) by every start-up configuration error.
var ErrConfiguration = fault.New(fault.NotConfigured, "stream node configuration error")

// The start-up validations of the STREAM seed §3.2, one error each, plus the ones this
// implementation adds (bind/advertise identity of digest §11, value rules of §9).
var (
	ErrEmptyNodeName          = errors.New("stream node name is empty")
	ErrDuplicateNodeName      = errors.New("stream node name registered twice")
	ErrNoBindEndpoint         = errors.New("stream node has no bind endpoint")
	ErrMultipleSessionTypes   = errors.New("more than one session type registered on one stream node")
	ErrSessionTypeOnTwoNodes  = errors.New("session type registered on two stream nodes of one host")
	ErrTLSCertPathEmpty       = errors.New("TLS enabled with an empty certificate path")
	ErrTLSKeyPathEmpty        = errors.New("TLS enabled with an empty key path")
	ErrClientCertWithoutTLS   = errors.New("client certificate required without a TLS server")
	ErrNoSessionType          = errors.New("stream node has no session type")
	ErrNegativeMaxMessageSize = errors.New("MaxMessageSize is negative")
	ErrBadEndpoint            = errors.New("invalid bind endpoint")
	ErrTLSEndpointWithoutTLS  = errors.New("tls:// or wss:// endpoint without a TLS server")
	ErrNoAdvertiseHost        = errors.New("wildcard bind host without an advertise host")
	ErrTLSConfig              = errors.New("TLS server configuration unusable")
	ErrJobQueueLimit          = errors.New("application job queue limit out of range")
	ErrHostStarted            = errors.New("host already started")
	ErrDuplicateRoute         = errors.New("packet route registered twice or incomplete")
)

// ConfigError is a start-up configuration error of one stream node (or of the host when
// Node is empty). errors.Is matches both its cause and ErrConfiguration.
type ConfigError struct {
	Node string
	Err  error
}

func (e *ConfigError) Error() string {
	if e.Node == "" {
		return fmt.Sprintf("stream host: %v", e.Err)
	}
	return fmt.Sprintf("stream node %q: %v", e.Node, e.Err)
}

// Unwrap gives the cause and the kind (fault.Of finds NotConfigured unless the cause
// has a kind of its own).
func (e *ConfigError) Unwrap() []error { return []error{e.Err, fault.NotConfigured} }

// Is makes every ConfigError match ErrConfiguration (and so fault.NotConfigured).
func (e *ConfigError) Is(target error) bool {
	return target == ErrConfiguration || target == fault.NotConfigured
}

// Runtime errors of the session surface.
var (
	// ErrSessionClosed is returned by a push, reply or close on a session that is closing
	// or closed.
	ErrSessionClosed = fault.New(fault.ShuttingDown, "stream session closed")
	// ErrNotRequest is returned when a packet that is not a Request is replied to.
	ErrNotRequest = fault.New(fault.InvalidOperation, "packet is not a request")
	// ErrSlowConsumer is returned by a NonBlocking send to a session whose outbound
	// queue reached its hard limit; the session is closed with it (a transport error).
	ErrSlowConsumer = fault.New(fault.CapacityExceeded, "stream session is a slow consumer: its outbound queue is full")
	// ErrBehind is returned by Peer.SendFrame to a session whose outbound queue is at
	// its soft limit (MaxPendingWrite): the frame is not queued and the session stays
	// open; the caller decides what a client that falls behind loses (topics drop it).
	ErrBehind = fault.New(fault.CapacityExceeded, "stream session is behind: its outbound queue is at its soft limit")
	// ErrAlreadyReplied is returned by a second reply to the same request.
	ErrAlreadyReplied = fault.New(fault.InvalidOperation, "request already replied")
	// ErrMessageTooLarge marks an inbound message over MaxMessageSize (EMSGSIZE).
	ErrMessageTooLarge = fault.New(fault.ProtocolError, "EMSGSIZE: inbound message over MaxMessageSize")
	// ErrHostClosed is returned by operations on a host that was shut down.
	ErrHostClosed = fault.New(fault.ShuttingDown, "stream host closed")
)

// CodedError is an application error that chooses the code of the Error reply a failed
// Request gets (digest §2.11), any string. An error that is not a CodedError gets the
// code of its fault kind (fault.Code), or internal_failure when it has none.
type CodedError struct {
	Code    string
	Message string
	Err     error
}

func (e *CodedError) Error() string {
	if e.Err != nil {
		return e.Code + ": " + e.Message + ": " + e.Err.Error()
	}
	return e.Code + ": " + e.Message
}

func (e *CodedError) Unwrap() error { return e.Err }

// Is matches the fault kind of the code, when the code is one of the error model's.
func (e *CodedError) Is(target error) bool {
	k, ok := fault.KindOf(e.Code)
	return ok && target == k
}

// Errorf returns a CodedError with a formatted message.
func Errorf(code, format string, args ...any) *CodedError {
	return &CodedError{Code: code, Message: fmt.Sprintf(format, args...)}
}

// ErrorReply returns the code and message of the Error reply for err: a *CodedError's
// own; else the wire code of err's fault kind with err's message; an error without a
// kind is code internal_failure with the message "internal failure" (its text may say
// more than a client should read; the server log has it).
func ErrorReply(err error) (code, message string) {
	var ce *CodedError
	if errors.As(err, &ce) {
		return ce.Code, ce.Message
	}
	return fault.Public(err)
}
