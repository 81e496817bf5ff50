package fault

import (
	"errors"
	"fmt"
)

// Kind is one error kind. Each Kind is itself an error (a sentinel), so
// errors.Is(err, fault.NotFound) tests the class of err.
type Kind uint8

// The error kinds, with the numbering of the zlink Framework Error Model.
const (
	NotFound         Kind = iota // no such Actor, handler, packet name
	AlreadyExists                // a registration that exists
	TypeMismatch                 // a value of the wrong type, an ActorId active under another kind
	NotConfigured                // a feature or codec not set up
	Rejected                     // refused by application policy
	Unavailable                  // a remote node, queue or route that cannot serve now
	CapacityExceeded             // a local bounded resource is full
	DeadlineExceeded             // a deadline passed before the answer
	ShuttingDown                 // the session, node or host is closing
	ProtocolError                // malformed input from a peer
	InvalidOperation             // a call not valid in the current state
	DataLost                     // data that cannot be recovered
	InternalFailure              // a bug or an unexpected failure
	kinds
)

var codes = [kinds]string{
	"not_found", "already_exists", "type_mismatch", "not_configured", "rejected",
	"unavailable", "capacity_exceeded", "deadline_exceeded", "shutting_down",
	"protocol_error", "invalid_operation", "data_lost", "internal_failure",
}

var texts = [kinds]string{
	"not found", "already exists", "type mismatch", "not configured", "rejected",
	"unavailable", "capacity exceeded", "deadline exceeded", "shutting down",
	"protocol error", "invalid operation", "data lost", "internal failure",
}

// Code returns the kind's wire code ("not_found", ...).
func (k Kind) Code() string {
	if k >= kinds {
		return codes[InternalFailure]
	}
	return codes[k]
}

func (k Kind) Error() string {
	if k >= kinds {
		return texts[InternalFailure]
	}
	return texts[k]
}

// String returns the kind's name as the error model spells it (NotFound, ...).
func (k Kind) String() string {
	names := [kinds]string{"NotFound", "AlreadyExists", "TypeMismatch", "NotConfigured", "Rejected",
		"Unavailable", "CapacityExceeded", "DeadlineExceeded", "ShuttingDown", "ProtocolError",
		"InvalidOperation", "DataLost", "InternalFailure"}
	if k >= kinds {
		return fmt.Sprintf("Kind(%d)", uint8(k))
	}
	return names[k]
}

// KindOf returns the kind of the wire code c, and false for a code outside the model.
func KindOf(c string) (Kind, bool) {
	for k, code := range codes {
		if code == c {
			return Kind(k), true
		}
	}
	return InternalFailure, false
}

// sentinel is a package's own error of a kind.
type sentinel struct {
	kind Kind
	msg  string
}

func (s *sentinel) Error() string { return s.msg }
func (s *sentinel) Unwrap() error { return s.kind }

// New returns a sentinel error of kind k with message msg: errors.Is matches both the
// sentinel and k.
func New(k Kind, msg string) error { return &sentinel{kind: k, msg: msg} }

// WithText returns an error whose message is text, exactly, and which matches err
// (a sentinel, a Kind) with errors.Is. It rebuilds an error that crossed nodes: the
// peer's message already names the error, so prefixing it again would repeat it.
func WithText(err error, text string) error { return &withText{err: err, text: text} }

type withText struct {
	err  error
	text string
}

func (w *withText) Error() string { return w.text }
func (w *withText) Unwrap() error { return w.err }

// Errorf returns an error of kind k with a formatted message; %w verbs wrap as in
// fmt.Errorf, and errors.Is also matches k.
func Errorf(k Kind, format string, args ...any) error {
	return &classified{kind: k, err: fmt.Errorf(format, args...)}
}

// classified is an error given a kind after the fact (Errorf).
type classified struct {
	kind Kind
	err  error
}

func (c *classified) Error() string   { return c.err.Error() }
func (c *classified) Unwrap() []error { return []error{c.err, c.kind} }

// Of returns the first kind in err's chain, and false when err has none (then
// InternalFailure is what it stands for on the wire).
func Of(err error) (Kind, bool) {
	var k Kind
	if errors.As(err, &k) {
		return k, true
	}
	return InternalFailure, false
}

// Code returns the wire code of err's kind: "internal_failure" for an error without
// one, "" for nil.
func Code(err error) string {
	if err == nil {
		return ""
	}
	k, _ := Of(err)
	return k.Code()
}

// WireError is an error that chooses its own wire code and message (a layer with a
// code namespace of its own, such as the service calls' codes); Public passes it as it
// is.
type WireError interface {
	error
	WireError() (code, message string)
}

// InternalMessage is the message a client gets for an error without a kind.
const InternalMessage = "internal failure"

// Public returns the wire code and message of err as a client may see them: a
// classified error's kind code and text; for an error without a kind (or of kind
// InternalFailure) "internal_failure" and InternalMessage, so that the text of an
// unexpected error (paths, addresses, internals) never reaches a client. Log such an
// error where it is handled.
func Public(err error) (code, message string) {
	var w WireError
	if errors.As(err, &w) {
		return w.WireError()
	}
	if k, ok := Of(err); ok && k != InternalFailure {
		return k.Code(), err.Error()
	}
	return InternalFailure.Code(), InternalMessage
}
