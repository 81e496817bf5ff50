package services

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Error is a service call's failure as it crosses a boundary: a stable Code that callers
// match with errors.Is against the sentinels below (or their own Error values), a
// Message for people, and optional JSON Data. An unexpected error of a provider crosses
// as CodeInternal with a fixed message: no stack, no cause text.
type Error struct {
	Code    string          `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

func (e *Error) Error() string {
	if e.Message == "" {
		return "services: " + e.Code
	}
	return "services: " + e.Code + ": " + e.Message
}

// WireError gives the code and message a STREAM Error frame carries (fault.WireError).
func (e *Error) WireError() (code, message string) { return e.Code, e.Message }

// Is matches any *Error with the same Code, so errors.Is(err, services.ErrUnknownService)
// holds for every unknown-service failure whatever its message.
func (e *Error) Is(target error) bool {
	var t *Error
	return errors.As(target, &t) && t.Code == e.Code
}

// Errorf returns an *Error with code and a formatted message: how a provider fails a
// call with a code of its own (an application code such as "review_not_found").
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// The stable codes of the service layer.
const (
	CodeCancelled          = "cancelled"               // the caller cancelled this one call
	CodeDisconnected       = "disconnected"            // the connection dropped with the call in flight
	CodeUnavailable        = "unavailable"             // no provider is bound (withdrawn, not connected)
	CodeSetupPhase         = "setup_phase"             // a facade used during facet setup
	CodeUnknownService     = "unknown_service"         // no such RPC-capable service here
	CodeUnknownMember      = "unknown_member"          // no such member of the service
	CodeInvalidArguments   = "invalid_arguments"       // arguments are not the member's JSON shape
	CodeInvalidResult      = "invalid_result"          // the provider's result is not JSON
	CodeStaleGeneration    = "stale_generation"        // a frame of a previous route or generation
	CodeNotAttached        = "not_attached"            // a session service with no session attached
	CodeNotAuthorized      = "not_authorized"          // attach or a call the caller may not make
	CodeUnknownSession     = "unknown_session"         // attach to a session (Actor) that does not exist
	CodeSessionUnavailable = "session_unavailable"     // the session worker is gone
	CodeNotImplemented     = "service_not_implemented" // a member the provider left unset
	CodeDuplicateRequest   = "duplicate_request"       // a request id already in flight on this connection
	CodeSessionExists      = "session_exists"          // create of a session id that exists
	CodeFlowControl        = "flow_control"            // a subscriber that could not keep up was dropped
	CodeStaleReference     = "stale_reference"         // a private reference used after it ended, or by another client
	CodeInternal           = "internal"                // an unexpected failure (details stay in the log)
)

// Sentinels for errors.Is.
var (
	ErrCancelled          = &Error{Code: CodeCancelled}
	ErrDisconnected       = &Error{Code: CodeDisconnected}
	ErrUnavailable        = &Error{Code: CodeUnavailable}
	ErrSetupPhase         = &Error{Code: CodeSetupPhase}
	ErrUnknownService     = &Error{Code: CodeUnknownService}
	ErrUnknownMember      = &Error{Code: CodeUnknownMember}
	ErrInvalidArguments   = &Error{Code: CodeInvalidArguments}
	ErrInvalidResult      = &Error{Code: CodeInvalidResult}
	ErrStaleGeneration    = &Error{Code: CodeStaleGeneration}
	ErrNotAttached        = &Error{Code: CodeNotAttached}
	ErrNotAuthorized      = &Error{Code: CodeNotAuthorized}
	ErrUnknownSession     = &Error{Code: CodeUnknownSession}
	ErrSessionUnavailable = &Error{Code: CodeSessionUnavailable}
	ErrNotImplemented     = &Error{Code: CodeNotImplemented}
	ErrDuplicateRequest   = &Error{Code: CodeDuplicateRequest}
	ErrSessionExists      = &Error{Code: CodeSessionExists}
	ErrFlowControl        = &Error{Code: CodeFlowControl}
	ErrStaleReference     = &Error{Code: CodeStaleReference}
	ErrInternal           = &Error{Code: CodeInternal}
)

// ErrAssembly is matched by every error of a host's assembly: a missing, duplicate or
// mode-mismatched provider, a dependency cycle, an acquisition after setup.
var ErrAssembly = errors.New("services: assembly")

// wireError returns what err becomes when it crosses a boundary: an *Error as it is
// (its code chosen by the provider), a context error as cancelled, anything else as
// internal with a fixed message.
func wireError(err error) *Error {
	var e *Error
	switch {
	case errors.As(err, &e):
		return e
	case errors.Is(err, errCallCancelled):
		return &Error{Code: CodeCancelled, Message: "the call was cancelled"}
	default:
		return &Error{Code: CodeInternal, Message: "internal error"}
	}
}
