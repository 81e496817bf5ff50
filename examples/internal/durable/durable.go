// Package durable keeps the examples' application records in the project's Actor state
// store (an embedded bbolt file by default, docs/persistence.md): a record is a JSON
// value under a key of the example's own kind, and every write is a compare-and-set on
// the record's version, so a read-modify-write is linearisable and a first write wins
// for good. What it keeps survives a worker's replacement and the process's restart; a
// map would not.
package durable

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/meshnode/meshnode/store"
)

// Records are one application's records in a store.
type Records struct {
	st   store.Store
	kind string
}

// New keeps the records of kind (a name of the application's: it never collides with an
// Actor kind's records) in st.
func New(st store.Store, kind string) *Records { return &Records{st: st, kind: kind} }

// Get reads id's record into v; false when there is none.
func (r *Records) Get(ctx context.Context, id string, v any) (bool, error) {
	rec, err := r.st.Load(ctx, store.Key{Kind: r.kind, ID: id})
	if err != nil {
		return false, fmt.Errorf("durable: read %s/%s: %w", r.kind, id, err)
	}
	if rec.Data == nil {
		return false, nil
	}
	if err := json.Unmarshal(rec.Data, v); err != nil {
		return false, fmt.Errorf("durable: %s/%s does not decode: %w", r.kind, id, err)
	}
	return true, nil
}

// maxRetries bounds an update's retries when another writer got in between.
const maxRetries = 100

// Update applies fn to id's record (a zero T when there is none) and writes what it
// returns, atomically: when another write got in between, fn runs again on the record as
// it is now. fn returning delete true removes the record; an error leaves it as it was.
func Update[T any](ctx context.Context, r *Records, id string, fn func(cur T, exists bool) (next T, del bool, err error)) (T, error) {
	key := store.Key{Kind: r.kind, ID: id}
	var zero T
	for range maxRetries {
		rec, err := r.st.Load(ctx, key)
		if err != nil {
			return zero, fmt.Errorf("durable: read %s: %w", key, err)
		}
		var cur T
		exists := rec.Data != nil
		if exists {
			if err := json.Unmarshal(rec.Data, &cur); err != nil {
				return zero, fmt.Errorf("durable: %s does not decode: %w", key, err)
			}
		}
		next, del, err := fn(cur, exists)
		if err != nil {
			return zero, err
		}
		if del {
			if !exists {
				return next, nil
			}
			_, err = r.st.Delete(ctx, key, rec.Version)
		} else {
			var b []byte
			if b, err = json.Marshal(next); err != nil {
				return zero, fmt.Errorf("durable: %s: %w", key, err)
			}
			if exists && bytes.Equal(b, rec.Data) {
				return next, nil // unchanged: nothing to write
			}
			_, err = r.st.Save(ctx, key, rec.Version, b)
		}
		if errors.Is(err, store.ErrConflict) {
			continue // another writer got in between: again, on what it wrote
		}
		if err != nil {
			return zero, fmt.Errorf("durable: write %s: %w", key, err)
		}
		return next, nil
	}
	return zero, fmt.Errorf("durable: %s: gave up after %d conflicting writes", key, maxRetries)
}

// Once writes candidate as id's record unless it has one, and returns the record as
// it is then: the first write wins, for every caller, for good (memoOnce).
func Once[T any](ctx context.Context, r *Records, id string, candidate T) (T, error) {
	return Update(ctx, r, id, func(cur T, exists bool) (T, bool, error) {
		if exists {
			return cur, false, nil
		}
		return candidate, false, nil
	})
}

// Load reads id's record into v and returns its version (0 and false when there is
// none): with Save, a read-modify-write whose write fails with store.ErrConflict when
// another write got in between (the caller serialises its cycles, and learns of any
// writer that did not).
func Load(ctx context.Context, r *Records, id string, v any) (version uint64, exists bool, err error) {
	rec, err := r.st.Load(ctx, store.Key{Kind: r.kind, ID: id})
	if err != nil {
		return 0, false, fmt.Errorf("durable: read %s/%s: %w", r.kind, id, err)
	}
	if rec.Data == nil {
		return rec.Version, false, nil
	}
	if err := json.Unmarshal(rec.Data, v); err != nil {
		return 0, false, fmt.Errorf("durable: %s/%s does not decode: %w", r.kind, id, err)
	}
	return rec.Version, true, nil
}

// Save writes v as id's record if its version is still version (from Load).
func Save(ctx context.Context, r *Records, id string, version uint64, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("durable: %s/%s: %w", r.kind, id, err)
	}
	if _, err := r.st.Save(ctx, store.Key{Kind: r.kind, ID: id}, version, b); err != nil {
		return fmt.Errorf("durable: write %s/%s: %w", r.kind, id, err)
	}
	return nil
}

// Delete removes id's record if its version is still version (from Load).
func Delete(ctx context.Context, r *Records, id string, version uint64) error {
	if _, err := r.st.Delete(ctx, store.Key{Kind: r.kind, ID: id}, version); err != nil {
		return fmt.Errorf("durable: delete %s/%s: %w", r.kind, id, err)
	}
	return nil
}
