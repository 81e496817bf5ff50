// Package boltstore is the embedded store: the Actor records of one node in one bbolt
// file (go.etcd.io/bbolt). Every write is one bbolt transaction, committed with an
// fsync before it returns: a save that returned is on disk. The file is locked while
// open, so a second process with the same data directory fails at once.
package boltstore

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/meshnode/meshnode/store"
)

// Options tunes a bolt store.
type Options struct {
	// MaxStateSize is the largest state a save takes (0: store.DefaultMaxStateSize).
	MaxStateSize int
	// LockTimeout bounds the wait for the file's lock, held by another process using
	// the same file (0: 1 s).
	LockTimeout time.Duration
}

// FileName is the store's file in a node's data directory.
const FileName = "state.db"

var (
	bucketState = []byte("actor-state/v1")
	bucketMeta  = []byte("meta")
	keyID       = []byte("id")
)

// Store is a bbolt-backed store.Store.
type Store struct {
	db   *bolt.DB
	info store.Info
}

// Open opens (creating it and its directory when missing) the bbolt file at path.
func Open(path string, opts Options) (*Store, error) {
	if opts.MaxStateSize <= 0 {
		opts.MaxStateSize = store.DefaultMaxStateSize
	}
	if opts.LockTimeout <= 0 {
		opts.LockTimeout = time.Second
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("%w: %w", store.ErrUnavailable, err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: opts.LockTimeout})
	if err != nil {
		if errors.Is(err, berrors.ErrTimeout) {
			return nil, fmt.Errorf("%w: %s is locked by another process (another node with the same data directory?)", store.ErrUnavailable, path)
		}
		return nil, fmt.Errorf("%w: open %s: %w", store.ErrUnavailable, path, err)
	}
	s := &Store{db: db}
	var id string
	err = db.Update(func(tx *bolt.Tx) error {
		if _, err := tx.CreateBucketIfNotExists(bucketState); err != nil {
			return err
		}
		meta, err := tx.CreateBucketIfNotExists(bucketMeta)
		if err != nil {
			return err
		}
		if v := meta.Get(keyID); v != nil {
			id = string(v)
			return nil
		}
		var b [16]byte
		_, _ = rand.Read(b[:])
		id = "bolt-" + hex.EncodeToString(b[:])
		return meta.Put(keyID, []byte(id))
	})
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("%w: initialise %s: %w", store.ErrUnavailable, path, err)
	}
	abs, _ := filepath.Abs(path)
	s.info = store.Info{Name: "bolt", Location: abs, ID: id, MaxStateSize: opts.MaxStateSize}
	return s, nil
}

// Info implements store.Store.
func (s *Store) Info() store.Info { return s.info }

// A record's value: version (8 bytes, big-endian), a flags byte (1: it has data),
// then the data.
const headerSize = 9

func recordKey(k store.Key) []byte {
	b := make([]byte, 0, binary.MaxVarintLen64+len(k.Kind)+len(k.ID))
	b = binary.AppendUvarint(b, uint64(len(k.Kind)))
	b = append(b, k.Kind...)
	return append(b, k.ID...)
}

func decodeValue(v []byte) (version uint64, data []byte, has bool, err error) {
	if v == nil {
		return 0, nil, false, nil
	}
	if len(v) < headerSize {
		return 0, nil, false, fmt.Errorf("%w: a record of %d bytes", store.ErrCorrupt, len(v))
	}
	return binary.BigEndian.Uint64(v), v[headerSize:], v[8]&1 != 0, nil
}

func encodeValue(version uint64, data []byte, has bool) []byte {
	v := make([]byte, headerSize+len(data))
	binary.BigEndian.PutUint64(v, version)
	if has {
		v[8] = 1
	}
	copy(v[headerSize:], data)
	return v
}

// Load implements store.Store.
func (s *Store) Load(_ context.Context, key store.Key) (store.Record, error) {
	var r store.Record
	err := s.db.View(func(tx *bolt.Tx) error {
		ver, data, has, err := decodeValue(tx.Bucket(bucketState).Get(recordKey(key)))
		if err != nil {
			return err
		}
		r.Version = ver
		if has {
			r.Data = append([]byte{}, data...)
		}
		return nil
	})
	if err != nil {
		return store.Record{}, s.readError(key, err)
	}
	return r, nil
}

// write runs fn in one write transaction: a failure to begin is unavailable (nothing
// written), a failed commit an unknown outcome (bbolt rolls back, but an fsync that
// failed leaves the file's state to the kernel).
func (s *Store) write(key store.Key, fn func(b *bolt.Bucket, k []byte) error) error {
	tx, err := s.db.Begin(true)
	if err != nil {
		if errors.Is(err, berrors.ErrDatabaseNotOpen) {
			return store.ErrClosed
		}
		return fmt.Errorf("%w: %s: %w", store.ErrUnavailable, key, err)
	}
	if err := fn(tx.Bucket(bucketState), recordKey(key)); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("%w: %s: commit: %w", store.ErrUnknownOutcome, key, err)
	}
	return nil
}

// Claim implements store.Store.
func (s *Store) Claim(_ context.Context, key store.Key) (store.Record, error) {
	var r store.Record
	err := s.write(key, func(b *bolt.Bucket, k []byte) error {
		ver, data, has, err := decodeValue(b.Get(k))
		if err != nil {
			return err
		}
		r.Version = ver + 1
		if has {
			r.Data = append([]byte{}, data...)
		}
		return b.Put(k, encodeValue(r.Version, data, has))
	})
	if err != nil {
		return store.Record{}, err
	}
	return r, nil
}

// Save implements store.Store.
func (s *Store) Save(_ context.Context, key store.Key, expect uint64, data []byte) (uint64, error) {
	if len(data) > s.info.MaxStateSize {
		return 0, store.TooLarge(key, len(data), s.info.MaxStateSize)
	}
	err := s.write(key, func(b *bolt.Bucket, k []byte) error {
		ver, _, _, err := decodeValue(b.Get(k))
		if err != nil {
			return err
		}
		if ver != expect {
			return store.Conflict(key, expect, ver)
		}
		return b.Put(k, encodeValue(expect+1, data, true))
	})
	if err != nil {
		return 0, err
	}
	return expect + 1, nil
}

// Delete implements store.Store.
func (s *Store) Delete(_ context.Context, key store.Key, expect uint64) (uint64, error) {
	err := s.write(key, func(b *bolt.Bucket, k []byte) error {
		ver, _, _, err := decodeValue(b.Get(k))
		if err != nil {
			return err
		}
		if ver != expect {
			return store.Conflict(key, expect, ver)
		}
		return b.Put(k, encodeValue(expect+1, nil, false))
	})
	if err != nil {
		return 0, err
	}
	return expect + 1, nil
}

// Ping implements store.Store: the file is open and readable.
func (s *Store) Ping(context.Context) error {
	err := s.db.View(func(tx *bolt.Tx) error {
		if tx.Bucket(bucketState) == nil {
			return fmt.Errorf("%w: the state bucket is missing", store.ErrCorrupt)
		}
		return nil
	})
	if err != nil {
		return s.readError(store.Key{}, err)
	}
	return nil
}

func (s *Store) readError(key store.Key, err error) error {
	switch {
	case errors.Is(err, berrors.ErrDatabaseNotOpen):
		return store.ErrClosed
	case errors.Is(err, store.ErrCorrupt):
		return err
	}
	return fmt.Errorf("%w: %s: %w", store.ErrUnavailable, key, err)
}

// Close implements store.Store.
func (s *Store) Close() error { return s.db.Close() }
