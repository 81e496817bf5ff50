package cluster

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/test/proc"
)

var benchOK = regexp.MustCompile(`(?m)^requests +(\d+) ok in `)

// okRequests reads the requests that succeeded from meshnode bench's report.
func okRequests(t *testing.T, out string) int {
	t.Helper()
	m := benchOK.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no requests line in:\n%s", out)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// meshnode bench against a fleet: echo and, with --bind, room.echo relayed to rooms
// on both nodes (32 of random names); it reports requests/s, the latency percentiles and no errors, and
// exits 0. The session node timed exactly as many relayed requests as bench counted.
func TestBenchReportsAFleet(t *testing.T) {
	fleet := startFleet(t, 2, "test")
	a := fleet[0]
	code, out, errs := meshnode(t, nil, "bench", "--stream", a.Endpoints["tcp"], "--sessions", "4", "--duration", "1s")
	if code != 0 || okRequests(t, out) == 0 || !strings.Contains(out, "errors    none") {
		t.Fatalf("bench echo: exit %d\n%s%s", code, out, errs)
	}
	if !regexp.MustCompile(`latency +p50 [0-9.]+ ms, p90 [0-9.]+ ms, p99 [0-9.]+ ms, max [0-9.]+ ms`).MatchString(out) {
		t.Errorf("no latency percentiles:\n%s", out)
	}
	before := a.Metric("meshnode_binding_relayed_request_duration_seconds_count")
	code, out, errs = meshnode(t, nil, "bench", "--stream", a.Endpoints["tcp"], "--sessions", "32", "--duration", "1s", "--bind", "--rate", "400")
	n := okRequests(t, out)
	if code != 0 || n == 0 || !strings.Contains(out, "room.echo for 1s, at 400 requests/s") || !strings.Contains(out, "errors    none") {
		t.Fatalf("bench --bind: exit %d\n%s%s", code, out, errs)
	}
	// Paced at 400/s for 1 s: 32 sessions, one request due every 80 ms each, the
	// sessions 2.5 ms apart; every request due before the end is sent, late or not.
	if n != 400 {
		t.Errorf("bench --rate 400 for 1s made %d requests, want 400", n)
	}
	if got := a.Metric("meshnode_binding_relayed_request_duration_seconds_count") - before; int(got) != n {
		t.Errorf("node-0 timed %v relayed requests, bench counted %d", got, n)
	}
	// Rooms of random names, placed by hashing: with 32, all on one node is a chance
	// of 2^-31 (with 8, none on node-1 was 1 in 256, and CI met it).
	if fleet[0].Actors() <= 0 || fleet[1].Actors() <= 0 {
		t.Errorf("the 32 rooms were not placed on both nodes: %d on node-0, %d on node-1", fleet[0].Actors(), fleet[1].Actors())
	}
}

// Bench exits 1 when requests fail (errors by code), when nothing listens (the cause
// named), and when the node refuses sessions at its connection limit (the node's
// reason named); the node goes on serving.
func TestBenchFailuresExitNonZero(t *testing.T) {
	n := proc.Start(t, proc.Config{ID: "node-0", Args: []string{"--max-connections", "2"}})
	tcp := n.Endpoints["tcp"]
	code, out, errs := meshnode(t, nil, "bench", "--stream", tcp, "--sessions", "1", "--duration", "300ms", "--request", "fail")
	if code != 1 || !regexp.MustCompile(`(?m)^errors +\d+ request rejected$`).MatchString(out) || !strings.Contains(errs, "requests (or sessions) failed") {
		t.Errorf("bench of a failing request: exit %d\n%s%s", code, out, errs)
	}
	nowhere := fmt.Sprintf("tcp://127.0.0.1:%d", proc.FreePort(t))
	code, out, errs = meshnode(t, nil, "bench", "--stream", nowhere, "--sessions", "2", "--duration", "300ms")
	if code != 1 || !strings.Contains(out, "2 connect dial: connect: connection refused") || !strings.Contains(errs, "no session of 2 could start on "+nowhere) {
		t.Errorf("bench where nothing listens: exit %d\n%s%s", code, out, errs)
	}
	code, out, errs = meshnode(t, nil, "bench", "--stream", tcp, "--sessions", "5", "--duration", "300ms")
	if code != 1 || !strings.Contains(out, "closed: ServerDrain (server at its connection limit)") {
		t.Errorf("bench past the connection limit: exit %d\n%s%s", code, out, errs)
	}
	// The node still serves (two sessions at a time).
	code, out, errs = meshnode(t, nil, "bench", "--stream", tcp, "--sessions", "2", "--duration", "300ms")
	if code != 0 || okRequests(t, out) == 0 {
		t.Errorf("bench after the refusals: exit %d\n%s%s", code, out, errs)
	}
}
