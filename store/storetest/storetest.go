// Package storetest checks that a store.Store keeps the contract every implementation
// shares (versions, compare-and-set, claims, deletes, limits), for the implementations'
// own tests.
package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/meshnode/meshnode/fault"
	"github.com/meshnode/meshnode/store"
)

// Run runs the contract against a fresh store from open (each subtest gets its own
// keys, so one store may serve them all).
func Run(t *testing.T, s store.Store) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	key := func(t *testing.T) store.Key { return store.Key{Kind: "k-" + t.Name(), ID: "id/é 1"} }

	t.Run("VersionsOnlyGrow", func(t *testing.T) {
		k := key(t)
		r, err := s.Load(ctx, k)
		if err != nil || r.Version != 0 || r.Data != nil {
			t.Fatalf("load of a new key: %+v %v", r, err)
		}
		if v, err := s.Save(ctx, k, 0, []byte("a")); err != nil || v != 1 {
			t.Fatalf("first save: %d %v", v, err)
		}
		if v, err := s.Save(ctx, k, 1, []byte("bb")); err != nil || v != 2 {
			t.Fatalf("second save: %d %v", v, err)
		}
		if r, err := s.Load(ctx, k); err != nil || r.Version != 2 || string(r.Data) != "bb" {
			t.Fatalf("load: %+v %v", r, err)
		}
		// A save expecting a version other than the stored one writes nothing.
		for _, stale := range []uint64{0, 1, 3} {
			if _, err := s.Save(ctx, k, stale, []byte("stale")); !errors.Is(err, store.ErrConflict) || !errors.Is(err, fault.Unavailable) {
				t.Fatalf("save expecting %d of version 2: %v, want ErrConflict", stale, err)
			}
		}
		if r, _ := s.Load(ctx, k); r.Version != 2 || string(r.Data) != "bb" {
			t.Fatalf("a refused save changed the record: %+v", r)
		}
	})

	t.Run("ClaimFencesEarlierVersions", func(t *testing.T) {
		k := key(t)
		r, err := s.Claim(ctx, k)
		if err != nil || r.Version != 1 || r.Data != nil {
			t.Fatalf("claim of a new key: %+v %v", r, err)
		}
		v, err := s.Save(ctx, k, r.Version, []byte("state"))
		if err != nil || v != 2 {
			t.Fatalf("save after the claim: %d %v", v, err)
		}
		r2, err := s.Claim(ctx, k)
		if err != nil || r2.Version != 3 || string(r2.Data) != "state" {
			t.Fatalf("second claim: %+v %v", r2, err)
		}
		// The first claimant lost its authority.
		if _, err := s.Save(ctx, k, v, []byte("old")); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("save by the earlier claimant: %v, want ErrConflict", err)
		}
		if _, err := s.Save(ctx, k, r2.Version, []byte("new")); err != nil {
			t.Fatalf("save by the later claimant: %v", err)
		}
	})

	t.Run("DeleteKeepsTheVersion", func(t *testing.T) {
		k := key(t)
		v, _ := s.Save(ctx, k, 0, []byte("x"))
		if _, err := s.Delete(ctx, k, v+1); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("delete with the wrong version: %v", err)
		}
		dv, err := s.Delete(ctx, k, v)
		if err != nil || dv != v+1 {
			t.Fatalf("delete: %d %v", dv, err)
		}
		r, err := s.Load(ctx, k)
		if err != nil || r.Version != dv || r.Data != nil {
			t.Fatalf("load after delete: %+v %v, want version %d and no data", r, err, dv)
		}
		// A writer that read the record before the delete cannot bring it back.
		if _, err := s.Save(ctx, k, v, []byte("x")); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("save of the pre-delete version: %v", err)
		}
		if _, err := s.Save(ctx, k, 0, []byte("x")); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("save as if the key were new: %v", err)
		}
		c, err := s.Claim(ctx, k)
		if err != nil || c.Version != dv+1 || c.Data != nil {
			t.Fatalf("claim after delete: %+v %v", c, err)
		}
	})

	t.Run("EmptyStateIsNotNoState", func(t *testing.T) {
		k := key(t)
		if _, err := s.Save(ctx, k, 0, []byte{}); err != nil {
			t.Fatal(err)
		}
		r, err := s.Load(ctx, k)
		if err != nil || r.Data == nil || len(r.Data) != 0 {
			t.Fatalf("load of an empty saved state: %+v %v, want non-nil empty data", r, err)
		}
	})

	t.Run("TooLarge", func(t *testing.T) {
		k := key(t)
		limit := s.Info().MaxStateSize
		if _, err := s.Save(ctx, k, 0, make([]byte, limit+1)); !errors.Is(err, store.ErrTooLarge) || !errors.Is(err, fault.CapacityExceeded) {
			t.Fatalf("save of %d bytes: %v, want ErrTooLarge", limit+1, err)
		}
		if r, _ := s.Load(ctx, k); r.Version != 0 {
			t.Fatalf("a refused save wrote version %d", r.Version)
		}
		big := bytes.Repeat([]byte{0xA5}, limit)
		if _, err := s.Save(ctx, k, 0, big); err != nil {
			t.Fatalf("save of exactly the limit: %v", err)
		}
		if r, _ := s.Load(ctx, k); !bytes.Equal(r.Data, big) {
			t.Fatalf("load of %d bytes returned %d", limit, len(r.Data))
		}
	})

	t.Run("ConcurrentWritersOneWinsEachVersion", func(t *testing.T) {
		k := key(t)
		const writers, rounds = 8, 10
		var mu sync.Mutex
		won := map[uint64]int{}
		var wg sync.WaitGroup
		for w := range writers {
			wg.Go(func() {
				for range rounds {
					r, err := s.Load(ctx, k)
					if err != nil {
						t.Error(err)
						return
					}
					v, err := s.Save(ctx, k, r.Version, fmt.Appendf(nil, "w%d", w))
					if errors.Is(err, store.ErrConflict) {
						continue
					}
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					won[v]++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		r, _ := s.Load(ctx, k)
		for v, n := range won {
			if n != 1 {
				t.Errorf("version %d written by %d writers", v, n)
			}
		}
		if uint64(len(won)) != r.Version {
			t.Errorf("%d successful saves, stored version %d", len(won), r.Version)
		}
	})

	t.Run("Info", func(t *testing.T) {
		in := s.Info()
		if in.Name == "" || in.ID == "" || in.Location == "" || in.MaxStateSize <= 0 {
			t.Fatalf("info %+v", in)
		}
		if err := s.Ping(ctx); err != nil {
			t.Fatal(err)
		}
	})
}
