// Package store keeps the state of the Actors whose kind persists it (actor.Kind
// Persist): one record per (kind, ActorId), its bytes and a version that only grows.
// Writes are compare-and-set on the version, which is how a save from an activation
// that lost its authority is refused (docs/persistence.md). This package holds the
// interface, its errors, the store URL and an in-memory store; boltstore (an embedded
// bbolt file) and pgstore (PostgreSQL) implement it.
package store

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/meshnode/meshnode/fault"
)

// Key names one Actor's record.
type Key struct {
	Kind string
	ID   string
}

func (k Key) String() string { return k.Kind + "/" + k.ID }

// Record is what a store holds for a key: the bytes last saved (nil when nothing was
// saved, or the state was deleted) and the record's version. Version 0 means the key
// was never written; every write (claim, save, delete) raises it by one, and it never
// goes back, not even after a delete (which leaves the key with no data).
type Record struct {
	Data    []byte
	Version uint64
}

// Info describes a store for operators and for moves between nodes.
type Info struct {
	// Name is the implementation: "bolt", "postgres", "memory".
	Name string
	// Location is where it keeps its data: a file path, host:port/database (never a
	// password), or "memory".
	Location string
	// ID names the store's contents: made once when the store is first created and
	// kept in it. Two nodes whose stores have the same ID share the records, so an
	// Actor that moves between them continues its version chain; otherwise the target
	// claims the record in its own store.
	ID string
	// Shared reports whether nodes on other machines can use the same store
	// (PostgreSQL). An embedded store belongs to one node.
	Shared bool
	// MaxStateSize is the largest state, in bytes, a save may write.
	MaxStateSize int
}

// Store keeps Actor state. Every method is safe for concurrent use. A write either
// happened, or returns an error that says whether it did not (ErrUnavailable,
// ErrConflict, ErrTooLarge) or may have (ErrUnknownOutcome).
type Store interface {
	// Info describes the store.
	Info() Info
	// Load reads the record of key without changing it (version 0, no data: never
	// written).
	Load(ctx context.Context, key Key) (Record, error)
	// Claim reads the record of key and takes authority over it in one atomic write:
	// the version is raised by one (a key never written gets version 1 and no data),
	// so that every save that expects an earlier version fails with ErrConflict. An
	// activation claims its Actor's record before it starts.
	Claim(ctx context.Context, key Key) (Record, error)
	// Save writes data (at most Info().MaxStateSize bytes) if the record's version is
	// expect, and returns the new version, expect+1. Otherwise nothing is written and
	// the error matches ErrConflict.
	Save(ctx context.Context, key Key, expect uint64, data []byte) (uint64, error)
	// Delete removes the record's data if its version is expect, keeping the key with
	// version expect+1 and no data (so that versions never repeat), and returns that
	// version.
	Delete(ctx context.Context, key Key, expect uint64) (uint64, error)
	// Ping reports whether the store answers now.
	Ping(ctx context.Context) error
	// Close releases the store; later calls fail with ErrClosed.
	Close() error
}

// Errors of a store, each of a fault kind (docs/persistence.md).
var (
	// ErrConflict: the record's version is not the one the write expected: another
	// activation claimed or wrote it since. Nothing was written. The activation that
	// gets it has lost its authority and stops; a requester may try again, reaching
	// the current activation (kind Unavailable).
	ErrConflict = fault.New(fault.Unavailable, "store: version conflict: another activation claimed or wrote the state")
	// ErrUnavailable: the store could not be reached or refused the operation; nothing
	// was written.
	ErrUnavailable = fault.New(fault.Unavailable, "store: unavailable")
	// ErrUnknownOutcome: the write was sent but no answer came in time (a timeout, a
	// connection lost mid-write): it may or may not have happened. Never reported as
	// success (kind DeadlineExceeded).
	ErrUnknownOutcome = fault.New(fault.DeadlineExceeded, "store: outcome unknown: the write may or may not have happened")
	// ErrTooLarge: the state is larger than the store's limit; nothing was written.
	ErrTooLarge = fault.New(fault.CapacityExceeded, "store: state larger than the store's limit")
	// ErrCorrupt: a stored state does not decode (its envelope or the kind's decoder
	// refuses it). It is left as it is, never replaced by an empty state.
	ErrCorrupt = fault.New(fault.DataLost, "store: stored state does not decode")
	// ErrBadURL: a store URL that does not parse, or names no known store.
	ErrBadURL = fault.New(fault.NotConfigured, "store: bad store URL")
	// ErrAccessDenied: the store's server refused the credentials or the database.
	ErrAccessDenied = fault.New(fault.Rejected, "store: access denied")
	// ErrClosed: the store was closed.
	ErrClosed = fault.New(fault.ShuttingDown, "store: closed")
)

// DefaultMaxStateSize is the largest state a store takes unless told otherwise: 1 MiB.
// A move carries the state in one record (4 MiB), so it stays well under that.
const DefaultMaxStateSize = 1 << 20

// Conflict returns the error of a compare-and-set that found version found where it
// expected expect.
func Conflict(key Key, expect, found uint64) error {
	return fmt.Errorf("%w: %s: expected version %d, stored version %d", ErrConflict, key, expect, found)
}

// TooLarge returns the error of a state of size bytes over limit.
func TooLarge(key Key, size, limit int) error {
	return fmt.Errorf("%w: %s: %d bytes, limit %d", ErrTooLarge, key, size, limit)
}

// Location is a parsed store URL.
type Location struct {
	// Scheme is "bolt", "postgres" or "memory".
	Scheme string
	// Path is the bolt file.
	Path string
	// URL is the PostgreSQL connection URL as given.
	URL string
}

// ParseURL parses a store URL: bolt:PATH (or bolt://PATH: an embedded bbolt file),
// postgres://... or postgresql://... (a PostgreSQL server; libpq's URL form), or
// memory: (in this process only, for tests). The PostgreSQL URL's own settings are
// checked by pgstore when it opens.
func ParseURL(s string) (Location, error) {
	scheme, rest, ok := strings.Cut(s, ":")
	if !ok || scheme == "" {
		return Location{}, fmt.Errorf("%w: %q has no scheme (bolt:PATH, postgres://..., memory:)", ErrBadURL, redact(s))
	}
	switch strings.ToLower(scheme) {
	case "bolt":
		p := strings.TrimPrefix(rest, "//")
		if p == "" {
			return Location{}, fmt.Errorf("%w: %q names no file", ErrBadURL, s)
		}
		return Location{Scheme: "bolt", Path: p}, nil
	case "postgres", "postgresql":
		u, err := url.Parse(s)
		if err != nil {
			return Location{}, fmt.Errorf("%w: %s", ErrBadURL, redact(err.Error()))
		}
		if u.Host == "" && u.Query().Get("host") == "" {
			return Location{}, fmt.Errorf("%w: %q names no host", ErrBadURL, redact(s))
		}
		return Location{Scheme: "postgres", URL: s}, nil
	case "memory":
		return Location{Scheme: "memory"}, nil
	}
	return Location{}, fmt.Errorf("%w: unknown scheme %q (bolt:PATH, postgres://..., memory:)", ErrBadURL, scheme)
}

// Redact returns s with the password of a URL in it replaced by "xxxxx", for messages.
func Redact(s string) string { return redact(s) }

func redact(s string) string {
	i := strings.Index(s, "://")
	if i < 0 {
		return s
	}
	rest := s[i+3:]
	at := strings.IndexByte(rest, '@')
	if at < 0 {
		return s
	}
	userinfo := rest[:at]
	if c := strings.IndexByte(userinfo, ':'); c >= 0 {
		return s[:i+3] + userinfo[:c] + ":xxxxx" + rest[at:]
	}
	return s
}
