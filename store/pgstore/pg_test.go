package pgstore_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/meshnode/meshnode/internal/testkit"
	"github.com/meshnode/meshnode/internal/testkit/pgtest"
	"github.com/meshnode/meshnode/store"
	"github.com/meshnode/meshnode/store/pgstore"
	"github.com/meshnode/meshnode/store/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func open(t *testing.T, url string) *pgstore.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := pgstore.Open(ctx, url, pgstore.Options{MaxStateSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// The contract, on a real server; the schema is created on first use, and a second
// store on the same server (another node) finds it and has the same identity.
func TestPostgres_Contract(t *testing.T) {
	srv := pgtest.Start(t, pgtest.Options{})
	s := open(t, srv.URL(""))
	storetest.Run(t, s)
	other := open(t, srv.URL(""))
	if other.Info().ID != s.Info().ID || !other.Info().Shared {
		t.Fatalf("second node's store %+v, first %+v", other.Info(), s.Info())
	}
	if got := srv.SQL(t, `SELECT count(*) FROM information_schema.columns WHERE table_name = 'meshnode_actor_state'`); got != "5" {
		t.Fatalf("meshnode_actor_state has %s columns, want 5", got)
	}
}

// Bad input at open: a URL that does not parse, a server that refuses the
// credentials, a server that is not there. Each is typed and never shows a password.
func TestPostgres_BadURLAndRefusedCredentials(t *testing.T) {
	srv := pgtest.Start(t, pgtest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	wrong := strings.Replace(srv.URL(""), srv.Password, "not-the-password", 1)
	cases := []struct {
		url  string
		want error
	}{
		{"postgres://postgres:hunter2@127.0.0.1:notaport/db", store.ErrBadURL},
		{wrong, store.ErrAccessDenied},
		{strings.Replace(srv.URL(""), "/postgres?", "/nosuchdb?", 1), store.ErrAccessDenied},
		{strings.Replace(srv.URL(""), ":"+strconv.Itoa(srv.Port), ":1", 1), store.ErrUnavailable},
	}
	for _, c := range cases {
		s, err := pgstore.Open(ctx, c.url, pgstore.Options{ConnectTimeout: 2 * time.Second})
		if err == nil {
			_ = s.Close()
		}
		if !errors.Is(err, c.want) {
			t.Errorf("open %s: %v, want %v", store.Redact(c.url), err, c.want)
		}
		if err != nil && (strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "not-the-password") || strings.Contains(err.Error(), srv.Password)) {
			t.Errorf("open %s: the error shows a password: %v", store.Redact(c.url), err)
		}
	}
}

// The server stopped: writes fail as unavailable (nothing written) at once, not after
// a timeout; started again, the same store works without being reopened.
func TestPostgres_ServerDownAndBack(t *testing.T) {
	srv := pgtest.Start(t, pgtest.Options{})
	s := open(t, srv.URL(""))
	ctx := context.Background()
	k := store.Key{Kind: "room", ID: "down"}
	v, err := s.Save(ctx, k, 0, []byte("one"))
	if err != nil {
		t.Fatal(err)
	}
	srv.Stop(t)
	start := time.Now()
	for i := 0; i < 3; i++ {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := s.Save(cctx, k, v, []byte("two"))
		cancel()
		if !errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("save %d with the server down: %v, want ErrUnavailable", i, err)
		}
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("three saves with the server down took %v: they should fail at once", d)
	}
	srv.StartAgain(t)
	var v2 uint64
	deadline := time.Now().Add(10 * time.Second)
	for {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		v2, err = s.Save(cctx, k, v, []byte("two"))
		cancel()
		if err == nil || time.Now().After(deadline) {
			break
		}
		if !errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("save after the restart: %v", err)
		}
	}
	if err != nil || v2 != v+1 {
		t.Fatalf("save after the server came back: %d %v", v2, err)
	}
	if r, _ := s.Load(ctx, k); string(r.Data) != "two" || r.Version != v+1 {
		t.Fatalf("after the restart: %+v", r)
	}
}

// A save whose statement does not answer in time (its row locked by another
// transaction) is reported as an unknown outcome, never as success.
func TestPostgres_TimedOutSaveIsAnUnknownOutcome(t *testing.T) {
	srv := pgtest.Start(t, pgtest.Options{})
	s := open(t, srv.URL(""))
	ctx := context.Background()
	k := store.Key{Kind: "room", ID: "locked"}
	v, err := s.Save(ctx, k, 0, []byte("one"))
	if err != nil {
		t.Fatal(err)
	}
	lockDone := make(chan error, 1)
	go func() {
		// psql holds the row lock for 3 s in its own transaction.
		_, err := srv.Exec(`BEGIN; SELECT version FROM meshnode_actor_state WHERE kind = 'room' AND id = 'locked' FOR UPDATE; SELECT pg_sleep(3); COMMIT;`)
		lockDone <- err
	}()
	testkit.Eventually(t, 10*time.Second, "the row lock is held", func() bool {
		return srv.SQL(t, `SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation WHERE c.relname = 'meshnode_actor_state' AND l.mode = 'RowShareLock'`) != "0"
	})
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = s.Save(cctx, k, v, []byte("two"))
	cancel()
	if !errors.Is(err, store.ErrUnknownOutcome) {
		t.Fatalf("save blocked past its deadline: %v, want ErrUnknownOutcome", err)
	}
	if err := <-lockDone; err != nil {
		t.Fatal(err)
	}
	if r, _ := s.Load(ctx, k); r.Version != v || string(r.Data) != "one" {
		t.Fatalf("after the cancelled save: %+v", r)
	}
}
