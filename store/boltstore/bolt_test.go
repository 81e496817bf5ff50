package boltstore_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/meshnode/meshnode/store"
	"github.com/meshnode/meshnode/store/boltstore"
	"github.com/meshnode/meshnode/store/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestBolt_Contract(t *testing.T) {
	s, err := boltstore.Open(filepath.Join(t.TempDir(), "node", boltstore.FileName), boltstore.Options{MaxStateSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	storetest.Run(t, s)
}

// A store reopened from its file has every record and the same identity.
func TestBolt_ReopenKeepsRecordsAndID(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), boltstore.FileName)
	s, err := boltstore.Open(path, boltstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	k := store.Key{Kind: "room", ID: "r1"}
	v, err := s.Save(ctx, k, 0, []byte("seven"))
	if err != nil {
		t.Fatal(err)
	}
	id := s.Info().ID
	_ = s.Close()
	if _, err := s.Save(ctx, k, v, nil); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("save after close: %v", err)
	}
	s2, err := boltstore.Open(path, boltstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if r, err := s2.Load(ctx, k); err != nil || string(r.Data) != "seven" || r.Version != v {
		t.Fatalf("after reopen: %+v %v", r, err)
	}
	if s2.Info().ID != id {
		t.Fatalf("id %s after reopen, was %s", s2.Info().ID, id)
	}
}

// A second opener of the same file (another node given the same data directory) fails
// at once, saying why, instead of waiting on the lock.
func TestBolt_FileInUseIsUnavailable(t *testing.T) {
	path := filepath.Join(t.TempDir(), boltstore.FileName)
	s, err := boltstore.Open(path, boltstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	start := time.Now()
	_, err = boltstore.Open(path, boltstore.Options{LockTimeout: 100 * time.Millisecond})
	if !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("second open: %v, want ErrUnavailable", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("second open took %v", d)
	}
}
