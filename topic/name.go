package topic

import (
	"fmt"
	"strings"

	"github.com/meshnode/meshnode/fault"
)

// MaxNameLen is the longest topic name, in bytes.
const MaxNameLen = 128

// Errors of the topic surface, each of a fault kind.
var (
	// ErrBadName: a topic name that is empty, longer than MaxNameLen, or has a byte
	// outside A-Z a-z 0-9 and . _ - : / @ (kind InvalidOperation).
	ErrBadName = fault.New(fault.InvalidOperation, "topic: bad topic name")
	// ErrTooManyTopics: a session at its bound of subscriptions, or a publisher at its
	// bound of topics (kind CapacityExceeded).
	ErrTooManyTopics = fault.New(fault.CapacityExceeded, "topic: too many topics")
	// ErrTooLarge: a published payload over Options.MaxPayload (kind CapacityExceeded).
	ErrTooLarge = fault.New(fault.CapacityExceeded, "topic: payload over the limit")
	// ErrSessionClosing: a subscribe or publish of a session that is closing (kind
	// ShuttingDown).
	ErrSessionClosing = fault.New(fault.ShuttingDown, "topic: the session is closing")
	// ErrReserved: a session subscribing or publishing to a name that starts with
	// ReservedPrefix (kind InvalidOperation).
	ErrReserved = fault.New(fault.InvalidOperation, "topic: the name is reserved for the runtime")
	// ErrStopped: the hub stopped with its node (kind ShuttingDown).
	ErrStopped = fault.New(fault.ShuttingDown, "topic: the node's topics stopped")
)

// ReservedPrefix starts the names of the runtime's own topics (the session directory,
// the session workers' fan-out to their presentations): no session subscribes or
// publishes to them, so no client can read or forge what they carry, and the admin
// API lists them only when asked for the system's (?system=true).
const ReservedPrefix = "meshnode."

// Reserved reports whether name is one of the runtime's own topics.
func Reserved(name string) bool { return strings.HasPrefix(name, ReservedPrefix) }

// checkSessionName is CheckName for a session's subscribe or publish: the runtime's
// own names are refused too.
func checkSessionName(name string) error {
	if err := CheckName(name); err != nil {
		return err
	}
	if Reserved(name) {
		return fmt.Errorf("%w: %q (names starting %q)", ErrReserved, name, ReservedPrefix)
	}
	return nil
}

// CheckName returns nil for a valid topic name, else an error matching ErrBadName that
// says what is wrong with it.
func CheckName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty", ErrBadName)
	case len(name) > MaxNameLen:
		return fmt.Errorf("%w: %d bytes, over %d", ErrBadName, len(name), MaxNameLen)
	}
	for i := 0; i < len(name); i++ {
		if !nameByte(name[i]) {
			return fmt.Errorf("%w: %q: byte %d (%q) is not one of A-Z a-z 0-9 . _ - : / @", ErrBadName, name, i, name[i])
		}
	}
	return nil
}

func nameByte(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	switch c {
	case '.', '_', '-', ':', '/', '@':
		return true
	}
	return false
}
