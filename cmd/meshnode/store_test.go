package main

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/meshnode/internal/testkit"
	"github.com/meshnode/meshnode/internal/testkit/pgtest"
)

// nodeStoreView is what GET /v1/node says of the store and of readiness.
type nodeStoreView struct {
	Store *struct {
		Name, Location string
		Shared, OK     bool
		Error          string
	}
	Health struct {
		Ready    bool
		NotReady string
	}
}

// The Actor state store on /readyz and GET /v1/node (docs/admin.md,
// docs/persistence.md), against a real PostgreSQL server: with it up the node is
// ready and names its store; with the server stopped /readyz answers 503 naming the
// store, and /v1/node says the store is not ok and the node not ready, and why; with
// the server back both say ready again.
func TestBinaryReadyzAndNodeSayWhenTheStoreIsDown(t *testing.T) {
	srv := pgtest.Start(t, pgtest.Options{})
	addrs, stop := startBinary(t, "--store", srv.URL(""), "--admin", "127.0.0.1:0", "--stream", "tcp://127.0.0.1:0",
		"--mesh", "127.0.0.1:0", "--remote", "127.0.0.1:0", "--node-id", "pg")
	stopped := false
	t.Cleanup(func() { // before the server's own clean-up (registered first)
		if !stopped {
			_ = stop()
		}
	})
	loc := fmt.Sprintf("127.0.0.1:%d/postgres", srv.Port)
	if want := "postgres " + loc + " (shared by the nodes that use it)"; addrs["store"] != want || addrs["data-dir"] != "" {
		t.Fatalf("start-up said store %q and data dir %q, want %q and no data dir", addrs["store"], addrs["data-dir"], want)
	}
	admin := "http://" + addrs["admin"]
	node := func() nodeStoreView {
		t.Helper()
		var v nodeStoreView
		if code := getJSON(t, admin+"/v1/node", &v); code != http.StatusOK || v.Store == nil {
			t.Fatalf("/v1/node: %d %+v", code, v)
		}
		return v
	}
	up := func(when string) {
		t.Helper()
		if code, body := httpGet(t, admin+"/readyz"); code != http.StatusOK || body != "ready\n" {
			t.Fatalf("%s: /readyz %d %q, want 200 ready", when, code, body)
		}
		if v := node(); v.Store.Name != "postgres" || v.Store.Location != loc || !v.Store.Shared || !v.Store.OK || v.Store.Error != "" ||
			!v.Health.Ready || v.Health.NotReady != "" {
			t.Fatalf("%s: /v1/node store %+v, health %+v", when, *v.Store, v.Health)
		}
	}
	up("with the server up")

	srv.Stop(t)
	notReady := "store postgres " + loc + ": "
	code, body := httpGet(t, admin+"/readyz")
	if code != http.StatusServiceUnavailable || !strings.HasPrefix(body, "not ready: "+notReady) || !strings.Contains(body, "unavailable") {
		t.Fatalf("with the server stopped: /readyz %d %q, want 503 %q...", code, body, "not ready: "+notReady)
	}
	v := node()
	if v.Store.Name != "postgres" || v.Store.Location != loc || v.Store.OK || v.Store.Error == "" {
		t.Fatalf("with the server stopped: /v1/node store %+v, want postgres %s not ok, with its error", *v.Store, loc)
	}
	if v.Health.Ready || !strings.HasPrefix(v.Health.NotReady, notReady) {
		t.Fatalf("with the server stopped: /v1/node health %+v, want not ready: %s... (what /readyz says)", v.Health, notReady)
	}
	for _, s := range []string{body, v.Store.Error, v.Health.NotReady} {
		if strings.Contains(s, srv.Password) {
			t.Fatalf("the store's error shows its password: %q", s)
		}
	}

	srv.StartAgain(t)
	// The pool's connections were cut: the next pings open new ones.
	testkit.Eventually(t, 10*time.Second, "/readyz ready with the server back", func() bool {
		code, _ := httpGet(t, admin+"/readyz")
		return code == http.StatusOK
	})
	up("with the server back")

	stopped = true
	if err := stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
}
