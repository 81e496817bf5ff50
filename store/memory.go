package store

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"
)

// Memory is a store in this process's memory: nothing survives the process. Test kits
// share one between the nodes of an in-process mesh (mesh/meshtest), which then behaves
// as a fleet sharing a PostgreSQL server would.
type Memory struct {
	mu      sync.Mutex
	records map[Key]Record
	closed  bool
	info    Info
}

// NewMemory returns an empty in-memory store; maxStateSize 0 means DefaultMaxStateSize.
func NewMemory(maxStateSize int) *Memory {
	if maxStateSize <= 0 {
		maxStateSize = DefaultMaxStateSize
	}
	var id [8]byte
	_, _ = rand.Read(id[:])
	return &Memory{records: map[Key]Record{},
		info: Info{Name: "memory", Location: "memory", ID: "memory-" + hex.EncodeToString(id[:]), MaxStateSize: maxStateSize}}
}

// Info implements Store.
func (m *Memory) Info() Info { return m.info }

// Load implements Store.
func (m *Memory) Load(_ context.Context, key Key) (Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return Record{}, ErrClosed
	}
	r := m.records[key]
	return Record{Data: bytes.Clone(r.Data), Version: r.Version}, nil
}

// Claim implements Store.
func (m *Memory) Claim(_ context.Context, key Key) (Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return Record{}, ErrClosed
	}
	r := m.records[key]
	r.Version++
	m.records[key] = r
	return Record{Data: bytes.Clone(r.Data), Version: r.Version}, nil
}

// Save implements Store.
func (m *Memory) Save(_ context.Context, key Key, expect uint64, data []byte) (uint64, error) {
	if len(data) > m.info.MaxStateSize {
		return 0, TooLarge(key, len(data), m.info.MaxStateSize)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return 0, ErrClosed
	}
	r := m.records[key]
	if r.Version != expect {
		return 0, Conflict(key, expect, r.Version)
	}
	d := make([]byte, len(data)) // never nil: a save of no bytes is still a saved state
	copy(d, data)
	m.records[key] = Record{Data: d, Version: expect + 1}
	return expect + 1, nil
}

// Delete implements Store.
func (m *Memory) Delete(_ context.Context, key Key, expect uint64) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return 0, ErrClosed
	}
	r := m.records[key]
	if r.Version != expect {
		return 0, Conflict(key, expect, r.Version)
	}
	m.records[key] = Record{Version: expect + 1}
	return expect + 1, nil
}

// Ping implements Store.
func (m *Memory) Ping(context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	return nil
}

// Close implements Store.
func (m *Memory) Close() error {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	return nil
}
