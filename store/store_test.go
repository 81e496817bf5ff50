package store_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/meshnode/meshnode/fault"
	"github.com/meshnode/meshnode/store"
	"github.com/meshnode/meshnode/store/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestMemory_Contract(t *testing.T) {
	s := store.NewMemory(1024)
	storetest.Run(t, s)
	_ = s.Close()
	if _, err := s.Load(context.Background(), store.Key{Kind: "k", ID: "i"}); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("load after close: %v", err)
	}
}

func TestParseURL_BadInputIsTyped(t *testing.T) {
	good := map[string]store.Location{
		"bolt:/var/lib/x.db":               {Scheme: "bolt", Path: "/var/lib/x.db"},
		"bolt://rel/x.db":                  {Scheme: "bolt", Path: "rel/x.db"},
		"postgres://u:p@db:5432/app":       {Scheme: "postgres", URL: "postgres://u:p@db:5432/app"},
		"postgresql://u@127.0.0.1/app?x=1": {Scheme: "postgres", URL: "postgresql://u@127.0.0.1/app?x=1"},
		"memory:":                          {Scheme: "memory"},
	}
	for in, want := range good {
		if got, err := store.ParseURL(in); err != nil || got != want {
			t.Errorf("ParseURL(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "nothing", "redis://x", "bolt:", "postgres://u:secret@/db", "postgres://u:secret@%zz/db"} {
		_, err := store.ParseURL(in)
		if !errors.Is(err, store.ErrBadURL) || !errors.Is(err, fault.NotConfigured) {
			t.Errorf("ParseURL(%q): %v, want ErrBadURL", in, err)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("ParseURL(%q): the error shows the password: %v", in, err)
		}
	}
}
