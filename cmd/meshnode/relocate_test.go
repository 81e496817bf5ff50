package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/meshnode/internal/testkit"
)

// Two binaries in one mesh: the sample room moves between them with meshnode relocate
// and keeps its served count, the admin API answers where it is and refuses bad input
// with a JSON error, and meshnode drain moves it off a node that then stops.
func TestBinaryRelocateAndDrainKeepTheRoomsState(t *testing.T) {
	base := []string{"--stream", "tcp://127.0.0.1:0", "--admin", "127.0.0.1:0", "--mesh", "127.0.0.1:0", "--remote", "127.0.0.1:0"}
	a, stopA := startBinary(t, append(base, "--node-id", "node-a")...)
	defer func() {
		if err := stopA(); err != nil {
			t.Errorf("stop a: %v", err)
		}
	}()
	b, stopB := startBinary(t, append(base, "--node-id", "node-b", "--join", a["mesh"])...)
	bStopped := false
	defer func() {
		if !bStopped {
			_ = stopB()
		}
	}()
	testkit.Eventually(t, 10*time.Second, "both nodes see two members", func() bool {
		return countMembers(t, a["admin"]) == 2 && countMembers(t, b["admin"]) == 2
	})

	c := testkit.DialConnector(t, a["tcp"], 10*time.Second)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var bound struct{ Node string }
	if err := c.Request(ctx, "bind", map[string]string{"actor": "lobby"}, &bound); err != nil {
		t.Fatalf("bind: %v", err)
	}
	type echoed struct {
		Node   string
		Served int64
	}
	echo := func() echoed {
		t.Helper()
		var out echoed
		if err := c.Request(ctx, "room.echo", map[string]int{"n": 1}, &out); err != nil {
			t.Fatalf("room.echo: %v", err)
		}
		return out
	}
	first := echo()
	if first.Served != 1 {
		t.Fatalf("first echo %+v", first)
	}
	other := map[string]string{"node-a": "node-b", "node-b": "node-a"}[first.Node]

	var out, errb bytes.Buffer
	if err := run(ctx, []string{"relocate", "--admin", b["admin"], "lobby", other}, &out, &errb); err != nil {
		t.Fatalf("meshnode relocate: %v (%s)", err, errb.String())
	}
	if !strings.Contains(out.String(), "lobby moved to "+other) {
		t.Errorf("meshnode relocate printed %q", out.String())
	}
	if got := echo(); got.Node != other || got.Served != 2 {
		t.Fatalf("echo after the move %+v, want served 2 on %s", got, other)
	}
	var where actorJSON
	if code := getJSON(t, "http://"+a["admin"]+"/v1/actors/lobby", &where); code != http.StatusOK || where.Node != other || where.Kind != "room" {
		t.Errorf("GET /v1/actors/lobby: %d %+v", code, where)
	}

	// Bad input: a JSON error with the status of its kind, and the room keeps serving.
	for _, tc := range []struct {
		method, path string
		status       int
		code         string
	}{
		{http.MethodGet, "/v1/actors/nobody", http.StatusNotFound, "not_found"},
		{http.MethodPost, "/v1/actors/lobby/relocate", http.StatusBadRequest, "invalid_operation"},
		{http.MethodPost, "/v1/actors/lobby/relocate?to=no-such-node", http.StatusNotFound, "not_found"},
		{http.MethodPost, "/v1/actors/lobby/relocate?to=" + other, http.StatusBadRequest, "invalid_operation"},
		{http.MethodPost, "/v1/actors/nobody/relocate?to=" + other, http.StatusNotFound, "not_found"},
	} {
		var e errorJSON
		if code := doJSON(t, tc.method, "http://"+a["admin"]+tc.path, &e); code != tc.status || e.Error != tc.code || e.Message == "" {
			t.Errorf("%s %s: %d %+v, want %d %s", tc.method, tc.path, code, e, tc.status, tc.code)
		}
	}
	if got := echo(); got.Served != 3 {
		t.Fatalf("echo after refused moves %+v", got)
	}

	// Drain node-b with the room on it (moved there first if it is on node-a): the room
	// moves to node-a, node-b stops, the client on node-a keeps its session and room.
	served := int64(3)
	if other == "node-a" {
		if err := run(ctx, []string{"relocate", "--admin", a["admin"], "lobby", "node-b"}, &out, &errb); err != nil {
			t.Fatalf("meshnode relocate to node-b: %v (%s)", err, errb.String())
		}
		served++
		if got := echo(); got.Node != "node-b" || got.Served != served {
			t.Fatalf("echo on node-b %+v", got)
		}
	}
	out.Reset()
	if err := run(ctx, []string{"drain", "--admin", b["admin"], "--wait", "20s"}, &out, &errb); err != nil {
		t.Fatalf("meshnode drain: %v (%s)", err, errb.String())
	}
	if !strings.Contains(out.String(), "stopped") {
		t.Errorf("meshnode drain printed %q", out.String())
	}
	bStopped = true
	if err := stopB(); err != nil {
		t.Errorf("the drained node: %v", err)
	}
	var again actorJSON
	if code := getJSON(t, "http://"+a["admin"]+"/v1/actors/lobby", &again); code != http.StatusOK || again.Node != "node-a" {
		t.Fatalf("after the drain the directory says %d %+v", code, again)
	}
	if got := echo(); got.Served != served+1 || got.Node != "node-a" {
		t.Fatalf("echo after the drain %+v, want served %d on node-a", got, served+1)
	}
}

func countMembers(t *testing.T, admin string) int {
	var ms []memberJSON
	if getJSON(t, "http://"+admin+"/v1/members", &ms) != http.StatusOK {
		return 0
	}
	n := 0
	for _, m := range ms {
		if m.State == "alive" {
			n++
		}
	}
	return n
}

func getJSON(t *testing.T, url string, v any) int { return doJSON(t, http.MethodGet, url, v) }

func doJSON(t *testing.T, method, url string, v any) int {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("%s %s: Content-Type %q", method, url, ct)
	}
	_ = json.NewDecoder(resp.Body).Decode(v)
	return resp.StatusCode
}

// GET /v1/sessions counts the sessions by transport and state and pages them with
// their bindings; GET /v1/bindings lists the bindings; bad paging parameters are 400
// with a JSON error; meshnode sessions and meshnode actors print tables.
func TestBinarySessionsBindingsAndActorsEndpoints(t *testing.T) {
	a, stop := startBinary(t, "--stream", "tcp://127.0.0.1:0", "--admin", "127.0.0.1:0", "--mesh", "127.0.0.1:0", "--remote", "127.0.0.1:0", "--node-id", "solo")
	defer func() {
		if err := stop(); err != nil {
			t.Errorf("stop: %v", err)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var clients []interface{ Close() error }
	defer func() {
		for _, c := range clients {
			_ = c.Close()
		}
	}()
	for i := 0; i < 3; i++ {
		c := testkit.DialConnector(t, a["tcp"], 10*time.Second)
		clients = append(clients, c)
		if i == 0 {
			if err := c.Request(ctx, "bind", map[string]string{"actor": "hall"}, nil); err != nil {
				t.Fatalf("bind: %v", err)
			}
		}
	}
	var all sessionsJSON
	testkit.Eventually(t, 10*time.Second, "three sessions listed", func() bool {
		return getJSON(t, "http://"+a["admin"]+"/v1/sessions", &all) == http.StatusOK && all.Total == 3
	})
	if all.ByTransport["tcp"] != 3 || all.ByState["open"] != 3 || len(all.Sessions) != 3 || all.Next != "" {
		t.Fatalf("/v1/sessions %+v", all)
	}
	bound := 0
	for _, s := range all.Sessions {
		if s.Transport != "tcp" || s.Stream == "" || s.Remote == "" || s.Opened.IsZero() || s.State != "open" {
			t.Errorf("session %+v", s)
		}
		for _, b := range s.Bindings {
			if b.Actor == "hall" && b.Node == "solo" && b.BindingGeneration != 0 {
				bound++
			}
		}
	}
	if bound != 1 {
		t.Fatalf("one session should be bound to hall: %+v", all.Sessions)
	}
	var page sessionsJSON
	if code := getJSON(t, "http://"+a["admin"]+"/v1/sessions?limit=2", &page); code != http.StatusOK || len(page.Sessions) != 2 || page.Next == "" || page.Total != 3 {
		t.Fatalf("first page: %d %+v", code, page)
	}
	var rest sessionsJSON
	if code := getJSON(t, "http://"+a["admin"]+"/v1/sessions?limit=2&after="+page.Next, &rest); code != http.StatusOK || len(rest.Sessions) != 1 || rest.Next != "" ||
		rest.Sessions[0].ID <= page.Sessions[1].ID {
		t.Fatalf("second page: %d %+v", code, rest)
	}
	var bl bindingsJSON
	if code := getJSON(t, "http://"+a["admin"]+"/v1/bindings", &bl); code != http.StatusOK || len(bl.Bindings) != 1 || bl.Bindings[0].Actor != "hall" || bl.Bindings[0].Session == 0 {
		t.Fatalf("/v1/bindings: %d %+v", code, bl)
	}
	for _, q := range []string{"/v1/sessions?limit=0", "/v1/sessions?limit=501", "/v1/sessions?after=x", "/v1/bindings?limit=-1"} {
		var e errorJSON
		if code := getJSON(t, "http://"+a["admin"]+q, &e); code != http.StatusBadRequest || e.Error != "invalid_operation" {
			t.Errorf("%s: %d %+v", q, code, e)
		}
	}
	var out, errb bytes.Buffer
	if err := run(ctx, []string{"sessions", "--admin", a["admin"]}, &out, &errb); err != nil || !strings.Contains(out.String(), "hall@solo") {
		t.Errorf("meshnode sessions: %v\n%s%s", err, out.String(), errb.String())
	}
	// The counts are a table: a header of columns, then a row of numbers (no Go map syntax).
	lines := strings.Split(out.String(), "\n")
	if len(lines) < 2 || strings.Join(strings.Fields(lines[0]), " ") != "SESSIONS OPEN CLOSING TCP" ||
		strings.Join(strings.Fields(lines[1]), " ") != "3 3 0 3" || strings.Contains(out.String(), "map[") {
		t.Errorf("meshnode sessions counts:\n%s", out.String())
	}
	out.Reset()
	if err := run(ctx, []string{"actors", "--admin", a["admin"]}, &out, &errb); err != nil || !strings.Contains(out.String(), "hall") || !strings.Contains(out.String(), "room") {
		t.Errorf("meshnode actors: %v\n%s%s", err, out.String(), errb.String())
	}
}
