package wire

import "strconv"

// TerminalResult is request-terminal-result (u32).
type TerminalResult uint32

// Values of request-terminal-result.
const (
	ResultOK              TerminalResult = 0
	ResultTimedOut        TerminalResult = 101
	ResultNotFound        TerminalResult = 102
	ResultTerminated      TerminalResult = 103
	ResultProtocolError   TerminalResult = 104
	ResultInternalError   TerminalResult = 105
	ResultRejected        TerminalResult = 106
	ResultConflict        TerminalResult = 107
	ResultBusy            TerminalResult = 108
	ResultNotConnected    TerminalResult = 109
	ResultInvalidArgument TerminalResult = 110
	ResultInvalidState    TerminalResult = 111
	ResultNotSupported    TerminalResult = 112
	ResultBackpressured   TerminalResult = 113
)

// resultInfo is indexed by value-100 for 101..113. typed marks the results that carry a
// framework failure code (terminal-failure-integrity typedFrameworkFailure); the others
// are boundary failures with FailureNone.
var resultInfo = [...]struct {
	name  string
	typed bool
}{
	1:  {"timedOut", false},
	2:  {"notFound", true},
	3:  {"terminated", false},
	4:  {"protocolError", true},
	5:  {"internalError", true},
	6:  {"rejected", true},
	7:  {"conflict", true},
	8:  {"busy", false},
	9:  {"notConnected", false},
	10: {"invalidArgument", false},
	11: {"invalidState", false},
	12: {"notSupported", false},
	13: {"backpressured", false},
}

// Valid reports whether r is a value of the enum.
func (r TerminalResult) Valid() bool {
	return r == ResultOK || (r >= ResultTimedOut && r <= ResultBackpressured)
}

func (r TerminalResult) String() string {
	if r == ResultOK {
		return "ok"
	}
	if r.Valid() {
		return resultInfo[r-100].name
	}
	return "terminalResult(" + strconv.FormatUint(uint64(r), 10) + ")"
}

// FailureCode is framework-error-code (u32). The public error value is the wire value
// minus one; 23..32 are public-only and never valid on the wire.
type FailureCode uint32

// Values of framework-error-code.
const (
	FailureNone                         FailureCode = 0
	FailureActorRouteNotFound           FailureCode = 1
	FailureActorCreateFailed            FailureCode = 2
	FailureActorAlreadyExists           FailureCode = 3
	FailureActorTypeMismatch            FailureCode = 4
	FailureSpotCreateFailed             FailureCode = 5
	FailureSpotRouteNotFound            FailureCode = 6
	FailureSpotTypeMismatch             FailureCode = 7
	FailureActorSessionNotBound         FailureCode = 8
	FailureHandlerNotFound              FailureCode = 9
	FailureRouteHandlerNotFound         FailureCode = 10
	FailureActorDispatchHandlerNotFound FailureCode = 11
	FailurePayloadDecodeFailed          FailureCode = 12
	FailureRouteNotConnected            FailureCode = 13
	FailureRequestTargetNotFound        FailureCode = 14
	FailureRequestRejected              FailureCode = 15
	FailureRequestProtocolError         FailureCode = 16
	FailureRequestFailed                FailureCode = 17
	FailureWorkerQueueFull              FailureCode = 18
	FailureWorkerTimedOut               FailureCode = 19
	FailureWorkerFailed                 FailureCode = 20
	FailureActorLocationStale           FailureCode = 21
	FailureActorCreateRejected          FailureCode = 22
	FailureSpotGenerationStale          FailureCode = 33
	FailureSpotMoving                   FailureCode = 34
	FailureRelocationDataLost           FailureCode = 35
)

// failureInfo holds each code's name and the exact terminal result it must travel with
// (terminal-failure-integrity exactResultByFailureCode). An empty name is not a wire value.
var failureInfo = [...]struct {
	name   string
	result TerminalResult
}{
	0:  {"none", ResultOK},
	1:  {"actorRouteNotFound", ResultNotFound},
	2:  {"actorCreateFailed", ResultInternalError},
	3:  {"actorAlreadyExists", ResultConflict},
	4:  {"actorTypeMismatch", ResultConflict},
	5:  {"spotCreateFailed", ResultInternalError},
	6:  {"spotRouteNotFound", ResultNotFound},
	7:  {"spotTypeMismatch", ResultConflict},
	8:  {"actorSessionNotBound", ResultNotFound},
	9:  {"handlerNotFound", ResultNotFound},
	10: {"routeHandlerNotFound", ResultNotFound},
	11: {"actorDispatchHandlerNotFound", ResultNotFound},
	12: {"payloadDecodeFailed", ResultProtocolError},
	13: {"routeNotConnected", ResultInternalError},
	14: {"requestTargetNotFound", ResultNotFound},
	15: {"requestRejected", ResultRejected},
	16: {"requestProtocolError", ResultProtocolError},
	17: {"requestFailed", ResultInternalError},
	18: {"workerQueueFull", ResultRejected},
	19: {"workerTimedOut", ResultInternalError},
	20: {"workerFailed", ResultInternalError},
	21: {"actorLocationStale", ResultConflict},
	22: {"actorCreateRejected", ResultRejected},
	33: {"spotGenerationStale", ResultConflict},
	34: {"spotMoving", ResultConflict},
	35: {"relocationDataLost", ResultInternalError},
}

// Valid reports whether f is a value of the enum on the service wire.
func (f FailureCode) Valid() bool {
	return int(f) < len(failureInfo) && failureInfo[f].name != ""
}

// Result returns the terminal result f travels with (ResultOK for FailureNone). It is
// meaningless for an invalid code.
func (f FailureCode) Result() TerminalResult {
	if !f.Valid() {
		return ResultOK
	}
	return failureInfo[f].result
}

func (f FailureCode) String() string {
	if f.Valid() {
		return failureInfo[f].name
	}
	return "failureCode(" + strconv.FormatUint(uint64(f), 10) + ")"
}

// checkTerminal returns the field and reason a result/failure pair breaks the enums or
// terminal-failure-integrity, or "" "".
func checkTerminal(r TerminalResult, f FailureCode) (field, reason string) {
	if !r.Valid() {
		return "terminalResult", "not a request-terminal-result value"
	}
	if !f.Valid() {
		return "failureCode", "not a framework-error-code value"
	}
	typed := r != ResultOK && resultInfo[r-100].typed
	switch {
	case !typed && f != FailureNone:
		return "failureCode", "must be none for terminal result " + r.String()
	case typed && f == FailureNone:
		return "failureCode", "terminal result " + r.String() + " needs a failure code"
	case typed && failureInfo[f].result != r:
		return "failureCode", f.String() + " travels with " + failureInfo[f].result.String() + ", not " + r.String()
	}
	return "", ""
}

// RelocationRole is relocation-role (u8).
type RelocationRole uint8

// Values of relocation-role. RoleCoordinator is a wire value but never a valid sender of
// 42 or 44 in this protocol version.
const (
	RoleSource      RelocationRole = 1
	RoleTarget      RelocationRole = 2
	RoleCoordinator RelocationRole = 3
)

func (r RelocationRole) String() string {
	switch r {
	case RoleSource:
		return "source"
	case RoleTarget:
		return "target"
	case RoleCoordinator:
		return "coordinator"
	}
	return "relocationRole(" + strconv.Itoa(int(r)) + ")"
}

// BindingState is bound-session-binding-state (u8).
type BindingState uint8

// Values of bound-session-binding-state.
const (
	BindingActive    BindingState = 1
	BindingTombstone BindingState = 2
)

func (s BindingState) String() string {
	switch s {
	case BindingActive:
		return "active"
	case BindingTombstone:
		return "tombstone"
	}
	return "bindingState(" + strconv.Itoa(int(s)) + ")"
}

// Route actions of session-relocation-route-update.
const (
	actionCommit = 1
	actionAbort  = 2
)
