package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/meshnode/internal/testkit"
)

// getRaw decodes an admin answer into plain JSON values, numbers kept as written.
func getRaw(t *testing.T, url string) any {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s %s", url, resp.Status, body)
	}
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return v
}

var decimal = regexp.MustCompile(`^[1-9][0-9]*$`)

// generations walks v and returns every value of a key that names a generation, by
// its path; it fails the test for one that is not a JSON string of decimal digits.
func generations(t *testing.T, where string, v any, path string, out map[string]string) {
	t.Helper()
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			p := path + "." + k
			if strings.HasSuffix(strings.ToLower(k), "generation") {
				s, ok := e.(string)
				if !ok || !decimal.MatchString(s) {
					t.Errorf("%s %s = %v (%T), want a string of decimal digits", where, p, e, e)
					continue
				}
				out[p] = s
				continue
			}
			generations(t, where, e, p, out)
		}
	case []any:
		for i, e := range x {
			generations(t, where, e, path+"["+strconv.Itoa(i)+"]", out)
		}
	}
}

// Every generation in the admin API is a JSON string (generations exceed 2^53, which
// JavaScript and jq round), and it is exact: the node's generation reads back as the
// number the node printed at start, digit for digit.
func TestBinaryAdminAPI64BitIDsAreStrings(t *testing.T) {
	a, stop := startBinary(t, "--stream", "tcp://127.0.0.1:0", "--admin", "127.0.0.1:0", "--mesh", "127.0.0.1:0", "--remote", "127.0.0.1:0", "--node-id", "node-a")
	defer func() {
		if err := stop(); err != nil {
			t.Errorf("stop: %v", err)
		}
	}()
	gen, err := strconv.ParseUint(a["generation"], 10, 64)
	if err != nil || gen <= 1<<53 {
		t.Fatalf("printed generation %q: %v (a generation is above 2^53)", a["generation"], err)
	}
	c := testkit.DialConnector(t, a["tcp"], 10*time.Second)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c.Request(ctx, "bind", map[string]string{"actor": "ids-room"}, nil); err != nil {
		t.Fatalf("bind: %v", err)
	}
	admin := "http://" + a["admin"]
	want := map[string]int{ // endpoint -> generations it must hold, at least
		"/v1/members":         1, // the node's
		"/v1/actors":          1, // the room's object generation
		"/v1/actors/ids-room": 3, // object, node, authority owner
		"/v1/sessions":        3, // the binding's object, authority owner and binding generations
		"/v1/bindings":        3,
		"/v1/node":            1,
		"/v1/node/actors":     1,
		"/v1/fleet":           2, // the member's, and its node's
		"/v1/fleet/actors":    1,
	}
	for ep, n := range want {
		got := map[string]string{}
		generations(t, ep, getRaw(t, admin+ep), "", got)
		if len(got) < n {
			t.Errorf("%s: %d generations %v, want at least %d", ep, len(got), got, n)
		}
		for path, v := range got {
			if (strings.HasSuffix(path, ".generation") || strings.HasSuffix(path, ".nodeGeneration")) && v != a["generation"] {
				t.Errorf("%s %s = %s, want the node's generation %s exactly", ep, path, v, a["generation"])
			}
		}
	}
}
