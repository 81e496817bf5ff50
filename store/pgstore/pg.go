// Package pgstore keeps Actor state in PostgreSQL, for fleets: every node of the fleet
// uses the same server, so an Actor whose node died comes back on a survivor with its
// last saved state. It goes through jackc/pgx v5 with a connection pool; each
// operation is one statement (autocommit), bounded by its context; the fence is the
// version column, compared and raised by the statement itself.
//
// The schema is created on first use (docs/persistence.md):
//
//	CREATE TABLE meshnode_actor_state (
//	  kind     text        NOT NULL,
//	  id       text        NOT NULL,
//	  version  bigint      NOT NULL,   -- raised by every claim, save and delete
//	  data     bytea,                  -- NULL: nothing saved, or deleted
//	  saved_at timestamptz NOT NULL DEFAULT now(),
//	  PRIMARY KEY (kind, id))
//	CREATE TABLE meshnode_store_meta (key text PRIMARY KEY, value text NOT NULL)
package pgstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/meshnode/meshnode/store"
)

// Options tunes a PostgreSQL store.
type Options struct {
	// MaxStateSize is the largest state a save takes (0: store.DefaultMaxStateSize).
	MaxStateSize int
	// MaxConns bounds the pool's connections (0: 8, or pool_max_conns in the URL).
	MaxConns int32
	// ConnectTimeout bounds opening a connection (0: 5 s, or connect_timeout in the
	// URL).
	ConnectTimeout time.Duration
}

// Store is a PostgreSQL-backed store.Store.
type Store struct {
	pool   *pgxpool.Pool
	info   store.Info
	closed atomic.Bool
}

// ParseURL checks a PostgreSQL URL as Open will read it; the error never shows the
// password.
func ParseURL(url string) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		// pgx's message quotes the URL with the password masked.
		return nil, fmt.Errorf("%w: %s", store.ErrBadURL, store.Redact(err.Error()))
	}
	return cfg, nil
}

// Open connects to the server named by url (postgres://user:password@host:port/db),
// creates the schema when it is missing, and returns the store. A server that cannot
// be reached fails with store.ErrUnavailable, one that refuses the credentials or the
// database with store.ErrAccessDenied.
func Open(ctx context.Context, url string, opts Options) (*Store, error) {
	cfg, err := ParseURL(url)
	if err != nil {
		return nil, err
	}
	if opts.MaxStateSize <= 0 {
		opts.MaxStateSize = store.DefaultMaxStateSize
	}
	if opts.MaxConns > 0 {
		cfg.MaxConns = opts.MaxConns
	} else if _, set := cfg.ConnConfig.RuntimeParams["pool_max_conns"]; !set {
		cfg.MaxConns = 8
	}
	if opts.ConnectTimeout > 0 {
		cfg.ConnConfig.ConnectTimeout = opts.ConnectTimeout
	} else if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	}
	cfg.HealthCheckPeriod = 10 * time.Second
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: %s", store.ErrBadURL, store.Redact(err.Error()))
	}
	s := &Store{pool: pool}
	where := net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port))) + "/" + cfg.ConnConfig.Database
	id, err := s.ensureSchema(ctx)
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres %s: %w", where, err)
	}
	s.info = store.Info{Name: "postgres", Location: where, ID: id, Shared: true, MaxStateSize: opts.MaxStateSize}
	return s, nil
}

// schemaLock serialises schema creation between nodes starting at once (CREATE TABLE
// IF NOT EXISTS races otherwise).
const schemaLock = 0x6d6573686e6f6465 // "meshnode"

func (s *Store) ensureSchema(ctx context.Context) (string, error) {
	var b [16]byte
	_, _ = rand.Read(b[:])
	fresh := "postgres-" + hex.EncodeToString(b[:])
	var id string
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(schemaLock)); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS meshnode_actor_state (
			kind text NOT NULL, id text NOT NULL, version bigint NOT NULL, data bytea,
			saved_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (kind, id))`); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS meshnode_store_meta (key text PRIMARY KEY, value text NOT NULL)`); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO meshnode_store_meta (key, value) VALUES ('id', $1) ON CONFLICT (key) DO NOTHING`, fresh); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `SELECT value FROM meshnode_store_meta WHERE key = 'id'`).Scan(&id)
	})
	if err != nil {
		return "", connectError(err)
	}
	return id, nil
}

// connectError classifies an error of opening the store.
func connectError(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && (pe.Code[:2] == "28" || pe.Code == "3D000" || pe.Code == "42501") {
		// 28xxx: invalid authorization; 3D000: no such database; 42501: no privilege.
		return fmt.Errorf("%w: %s", store.ErrAccessDenied, store.Redact(err.Error()))
	}
	return fmt.Errorf("%w: %s", store.ErrUnavailable, store.Redact(err.Error()))
}

// Info implements store.Store.
func (s *Store) Info() store.Info { return s.info }

// acquire takes a pooled connection: a failure here sent nothing.
func (s *Store) acquire(ctx context.Context, key store.Key) (*pgxpool.Conn, error) {
	if s.closed.Load() {
		return nil, store.ErrClosed
	}
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %s", store.ErrUnavailable, key, store.Redact(err.Error()))
	}
	return c, nil
}

// opError classifies an error of a statement that was sent: an error the server
// answered (the statement failed, nothing committed) or one that certainly happened
// before anything was sent is unavailable; anything else (a timeout, a connection lost
// mid-statement) leaves the outcome of a write unknown.
func opError(key store.Key, write bool, err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) || pgconn.SafeToRetry(err) || !write {
		return fmt.Errorf("%w: %s: %s", store.ErrUnavailable, key, store.Redact(err.Error()))
	}
	return fmt.Errorf("%w: %s: %s", store.ErrUnknownOutcome, key, store.Redact(err.Error()))
}

// Load implements store.Store.
func (s *Store) Load(ctx context.Context, key store.Key) (store.Record, error) {
	c, err := s.acquire(ctx, key)
	if err != nil {
		return store.Record{}, err
	}
	defer c.Release()
	var r store.Record
	var ver int64
	err = c.QueryRow(ctx, `SELECT version, data FROM meshnode_actor_state WHERE kind = $1 AND id = $2`, key.Kind, key.ID).Scan(&ver, &r.Data)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return store.Record{}, nil
	case err != nil:
		return store.Record{}, opError(key, false, err)
	}
	r.Version = uint64(ver)
	return r, nil
}

// Claim implements store.Store.
func (s *Store) Claim(ctx context.Context, key store.Key) (store.Record, error) {
	c, err := s.acquire(ctx, key)
	if err != nil {
		return store.Record{}, err
	}
	defer c.Release()
	var r store.Record
	var ver int64
	err = c.QueryRow(ctx, `INSERT INTO meshnode_actor_state AS s (kind, id, version) VALUES ($1, $2, 1)
		ON CONFLICT (kind, id) DO UPDATE SET version = s.version + 1
		RETURNING version, data`, key.Kind, key.ID).Scan(&ver, &r.Data)
	if err != nil {
		return store.Record{}, opError(key, true, err)
	}
	r.Version = uint64(ver)
	return r, nil
}

// Save implements store.Store.
func (s *Store) Save(ctx context.Context, key store.Key, expect uint64, data []byte) (uint64, error) {
	if len(data) > s.info.MaxStateSize {
		return 0, store.TooLarge(key, len(data), s.info.MaxStateSize)
	}
	if data == nil {
		data = []byte{} // NULL means "no data"; a saved state of no bytes is not that
	}
	c, err := s.acquire(ctx, key)
	if err != nil {
		return 0, err
	}
	defer c.Release()
	var tag pgconn.CommandTag
	if expect == 0 {
		tag, err = c.Exec(ctx, `INSERT INTO meshnode_actor_state (kind, id, version, data) VALUES ($1, $2, 1, $3)
			ON CONFLICT (kind, id) DO NOTHING`, key.Kind, key.ID, data)
	} else {
		tag, err = c.Exec(ctx, `UPDATE meshnode_actor_state SET version = version + 1, data = $4, saved_at = now()
			WHERE kind = $1 AND id = $2 AND version = $3`, key.Kind, key.ID, int64(expect), data)
	}
	if err != nil {
		return 0, opError(key, true, err)
	}
	if tag.RowsAffected() != 1 {
		return 0, s.conflict(ctx, c, key, expect)
	}
	return expect + 1, nil
}

// Delete implements store.Store.
func (s *Store) Delete(ctx context.Context, key store.Key, expect uint64) (uint64, error) {
	c, err := s.acquire(ctx, key)
	if err != nil {
		return 0, err
	}
	defer c.Release()
	var tag pgconn.CommandTag
	if expect == 0 {
		tag, err = c.Exec(ctx, `INSERT INTO meshnode_actor_state (kind, id, version) VALUES ($1, $2, 1)
			ON CONFLICT (kind, id) DO NOTHING`, key.Kind, key.ID)
	} else {
		tag, err = c.Exec(ctx, `UPDATE meshnode_actor_state SET version = version + 1, data = NULL, saved_at = now()
			WHERE kind = $1 AND id = $2 AND version = $3`, key.Kind, key.ID, int64(expect))
	}
	if err != nil {
		return 0, opError(key, true, err)
	}
	if tag.RowsAffected() != 1 {
		return 0, s.conflict(ctx, c, key, expect)
	}
	return expect + 1, nil
}

// conflict reads the stored version for the conflict's message (best effort).
func (s *Store) conflict(ctx context.Context, c *pgxpool.Conn, key store.Key, expect uint64) error {
	var ver int64
	if err := c.QueryRow(ctx, `SELECT version FROM meshnode_actor_state WHERE kind = $1 AND id = $2`, key.Kind, key.ID).Scan(&ver); err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w: %s: expected version %d", store.ErrConflict, key, expect)
	}
	return store.Conflict(key, expect, uint64(ver))
}

// Ping implements store.Store.
func (s *Store) Ping(ctx context.Context) error {
	if s.closed.Load() {
		return store.ErrClosed
	}
	if err := s.pool.Ping(ctx); err != nil {
		return fmt.Errorf("%w: %s", store.ErrUnavailable, store.Redact(err.Error()))
	}
	return nil
}

// Close implements store.Store.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.pool.Close()
	return nil
}
