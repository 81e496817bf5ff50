package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/meshnode/meshnode/internal/testkit"
	"github.com/meshnode/meshnode/mesh"
	"github.com/meshnode/meshnode/mesh/meshtest"
	"github.com/meshnode/meshnode/session/connector"
)

// chromiumPath finds the browser the dashboard test drives. It fails the test, never
// skips it: `make test` installs Chromium first (scripts/ensure-chromium.sh).
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no Chromium on PATH: the dashboard test drives a real headless browser; run `make test`, " +
		"or scripts/ensure-chromium.sh (apt-get install chromium), then run the test again")
	return ""
}

// The dashboard in a real browser: two binaries in one mesh, a STREAM session on node-a
// bound to a room on node-b. The page served by node-a shows both members, the one
// session and the one binding, the room with its node and bound session, and its
// records count goes up while the session talks to the room; with more sessions than
// a page holds it shows one page of them.
func TestDashboard_ShowsBothNodesSessionBindingAndRecords(t *testing.T) {
	browser := chromiumPath(t)
	base := []string{"--stream", "tcp://127.0.0.1:0", "--admin", "127.0.0.1:0", "--mesh", "127.0.0.1:0", "--remote", "127.0.0.1:0"}
	a, stopA := startBinary(t, append(base, "--node-id", "node-a")...)
	defer func() {
		if err := stopA(); err != nil {
			t.Errorf("stop node-a: %v", err)
		}
	}()
	b, stopB := startBinary(t, append(base, "--node-id", "node-b", "--join", a["mesh"])...)
	defer func() {
		if err := stopB(); err != nil {
			t.Errorf("stop node-b: %v", err)
		}
	}()
	testkit.Eventually(t, 10*time.Second, "both nodes see two members", func() bool {
		return countMembers(t, a["admin"]) == 2 && countMembers(t, b["admin"]) == 2
	})

	// One session on node-a, bound to a room that lives on node-b: its records cross.
	c := testkit.DialConnector(t, a["tcp"], 10*time.Second)
	defer c.Close()
	// The whole test's bound (each wait below has its own 20 s): under make test, with
	// every package's tests beside it on two cores, the browser's steps took 91 s.
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	if err := c.Request(ctx, "bind", map[string]string{"actor": "dash-room"}, nil); err != nil {
		t.Fatalf("bind: %v", err)
	}
	var where actorJSON
	if code := getJSON(t, "http://"+a["admin"]+"/v1/actors/dash-room", &where); code != http.StatusOK {
		t.Fatalf("GET /v1/actors/dash-room: %d", code)
	}
	if where.Node != "node-b" {
		var moved actorJSON
		if code := doJSON(t, http.MethodPost, "http://"+a["admin"]+"/v1/actors/dash-room/relocate?to=node-b", &moved); code != http.StatusOK || moved.Node != "node-b" {
			t.Fatalf("relocate to node-b: %d %+v", code, moved)
		}
	}
	echo := func(n int) {
		t.Helper()
		for range n {
			var out struct{ Node string }
			if err := c.Request(ctx, "room.echo", map[string]int{"n": 1}, &out); err != nil || out.Node != "node-b" {
				t.Fatalf("room.echo: %+v %v", out, err)
			}
		}
	}
	echo(3)
	// Two sessions, one per node, follow a topic: the dashboard's topics show it with its
	// fleet-wide subscribers.
	if err := c.Request(ctx, "subscribe", map[string]string{"topic": "dash-topic"}, nil); err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	cb := testkit.DialConnector(t, b["tcp"], 10*time.Second)
	defer cb.Close()
	if err := cb.Request(ctx, "subscribe", map[string]string{"topic": "dash-topic"}, nil); err != nil {
		t.Fatalf("subscribe on node-b: %v", err)
	}

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(browser), chromedp.Headless,
		chromedp.NoSandbox, // the tests run as root, where Chromium's sandbox refuses to start
		chromedp.DisableGPU, chromedp.WindowSize(1400, 1100))
	// Cancelling the allocator's context stops the browser and waits for it to exit:
	// no Chromium process outlives the test.
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	defer cancelBrowser()

	text := func(testid string) string {
		return `document.querySelector('[data-testid="` + testid + `"]').textContent`
	}
	waitFor := func(what, cond string) {
		t.Helper()
		if _, err := chromedp.Run(bctx, chromedp.Poll[bool](cond, chromedp.WithPollingTimeout(20*time.Second))); err != nil {
			page, _ := chromedp.Run(bctx, chromedp.Text(chromedp.CSS("main")))
			t.Fatalf("the dashboard never showed %s: %v\npage:\n%s", what, err, page)
		}
	}
	start := time.Now()
	if err := chromedp.Do(bctx, chromedp.Navigate("http://"+a["admin"]+"/")); err != nil {
		t.Fatalf("open the dashboard: %v", err)
	}
	waitFor("both members alive", `document.querySelectorAll('[data-testid="member-row"][data-state="alive"]').length === 2`)
	waitFor("two sessions and one binding", text("fleet-sessions")+` === "2" && `+text("fleet-bindings")+` === "1"`)
	waitFor("the room on node-b with one bound session", `(() => {
		const r = document.querySelector('[data-testid="actor-row"][data-actor="dash-room"]');
		return r !== null && r.children[2].textContent === "node-b" && r.querySelector('[data-testid="actor-bound"]').textContent === "1";
	})()`)
	waitFor("the topic with two subscribers over two nodes", `(() => {
		const r = document.querySelector('[data-testid="topic-row"]');
		return r !== null && r.children[0].textContent === "dash-topic" &&
			r.querySelector('[data-testid="topic-subscribers"]').textContent === "2" && r.children[2].textContent === "node-a 1, node-b 1";
	})()`)
	waitFor("records on both nodes", `document.querySelectorAll('[data-testid="node-card"]').length === 2 && Number(`+text("fleet-records")+`) > 0`)
	before, err := chromedp.Run(bctx, chromedp.Evaluate[string](text("fleet-records")))
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(before)
	if err != nil {
		t.Fatalf("records count %q: %v", before, err)
	}
	echo(5)
	waitFor(fmt.Sprintf("the records count going up from %d", n), `Number(`+text("fleet-records")+`) > `+strconv.Itoa(n))
	waitFor("a records rate", `Number(`+text("fleet-rate")+`) >= 0`)

	// Per-node health: ready, the version, an uptime, memory, open files.
	waitFor("each node's health", `(() => {
		const rows = document.querySelectorAll('[data-testid="member-row"]');
		return rows.length === 2 && [...rows].every((r) =>
			r.querySelector('[data-testid="member-ready"]').textContent === "ready" &&
			r.querySelector('[data-testid="member-version"]').textContent.startsWith(`+strconv.Quote(build().Version)+`) &&
			/^\d+(s|m \d\ds)$/.test(r.querySelector('[data-testid="member-uptime"]').textContent) &&
			/^\d+\.\d MiB \/ \d+\.\d MiB$/.test(r.querySelector('[data-testid="member-memory"]').textContent) &&
			/^\d+ \/ \d+$/.test(r.querySelector('[data-testid="member-files"]').textContent));
	})()`)

	// The charts draw, from the points each node keeps: a line per node in each, the
	// relayed request latency once the session's requests were timed, and pixels on
	// every canvas.
	echo(5)
	chart := func(id string) string { return `document.querySelector('[data-testid="` + id + `"]')` }
	painted := func(id string) string {
		return `(() => { const c = ` + chart(id) + `; const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
			let n = 0; for (let i = 3; i < d.length; i += 4) if (d[i] > 0) n++; return n; })()`
	}
	for _, id := range []string{"chart-records", "chart-sessions", "chart-errors"} {
		waitFor(id+" with a line per node", chart(id)+`.dataset.series === "2" && Number(`+chart(id)+`.dataset.points) >= 2 && `+painted(id)+` > 500`)
	}
	waitFor("the latency chart with node-a's p99", chart("chart-p99")+`.dataset.series === "1" && Number(`+chart("chart-p99")+`.dataset.points) >= 1`)
	waitFor("a legend naming both nodes", `[...document.querySelectorAll('[data-testid="legend-entry"]')].map((e) => e.textContent).sort().join() === "node-a,node-b"`)

	// A member that stops answering: suspect, then dead, in colour, with how long.
	// (A bare mesh node killed: peers detect its failure.)
	ghost, err := mesh.Start(ctx, mesh.Config{RID: "node-ghost", Join: []string{a["mesh"]}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	waitFor("the ghost alive", `document.querySelectorAll('[data-testid="member-row"][data-state="alive"]').length === 3`)
	meshtest.KillMesh(ghost)
	waitFor("the ghost dead, in red, for some seconds", `(() => {
		const r = document.querySelector('[data-testid="member-row"][data-rid="node-ghost"]');
		if (r === null || r.dataset.state !== "dead" || !r.classList.contains("state-dead")) return false;
		return /^dead for \d+s$/.test(r.querySelector('[data-testid="member-state"]').textContent) &&
			getComputedStyle(r.querySelector("td")).color === "rgb(180, 35, 24)";
	})()`)
	// A suspect is drawn the same way, amber (rendered from a fleet answer in the
	// page's own code: memberlist keeps a suspicion for about a second).
	if _, err := chromedp.Run(bctx, chromedp.Evaluate[bool](`(() => {
		const since = new Date(Date.now() - 75000).toISOString();
		renderFleet({self: "node-a", total: 1, members: [{rid: "node-s", generation: "1", address: "x", state: "suspect", since}]});
		const r = document.querySelector('[data-testid="member-row"][data-rid="node-s"]');
		const ok = r.classList.contains("state-suspect") && r.querySelector('[data-testid="member-state"]').textContent === "suspect for 1m 15s" &&
			getComputedStyle(r.querySelector("td")).color === "rgb(181, 71, 8)";
		if (!ok) throw new Error("suspect row: " + r.outerHTML);
		return ok;
	})()`)); err != nil {
		t.Errorf("a suspect member: %v", err)
	}

	// Bounded: with more sessions than a page holds, one page of rows and a next link.
	const extra = 24
	var more []*connector.Connector
	defer func() {
		for _, m := range more {
			_ = m.Close()
		}
	}()
	for range extra {
		more = append(more, testkit.DialConnector(t, a["tcp"], 10*time.Second))
	}
	waitFor("a page of node-a's 25 sessions", text("fleet-sessions")+` === "26" && document.querySelectorAll('[data-testid="session-row"]').length === 20 && !document.querySelector('[data-testid="sessions-next"]').disabled`)
	if err := chromedp.Do(bctx, chromedp.Click(chromedp.CSS(`[data-testid="sessions-next"]`))); err != nil {
		t.Fatal(err)
	}
	waitFor("the second page of sessions", `document.querySelectorAll('[data-testid="session-row"]').length === 5`)

	shot, err := chromedp.Run(bctx, chromedp.FullScreenshot(100)) // quality 100: PNG (below it, JPEG)
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	path := filepath.Join(t.TempDir(), "dashboard.png")
	if err := os.WriteFile(path, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("dashboard checks took %s; screenshot %s (%d bytes)", time.Since(start).Round(time.Millisecond), path, len(shot))
	cancelBrowser()
	cancelAlloc()
}

// The page and its files are served from the binary; the dashboard's endpoints answer
// a node's figures, page the fleet's Actors, and refuse bad parameters with a JSON
// error; a member without an admin address is shown with an error, not a failed page.
func TestBinaryDashboardPageAndEndpoints(t *testing.T) {
	a, stopA := startBinary(t, "--stream", "tcp://127.0.0.1:0", "--admin", "127.0.0.1:0", "--mesh", "127.0.0.1:0", "--remote", "127.0.0.1:0", "--node-id", "node-a")
	defer func() {
		if err := stopA(); err != nil {
			t.Errorf("stop: %v", err)
		}
	}()
	admin := "http://" + a["admin"]
	code, page := httpGet(t, admin+"/")
	if code != http.StatusOK || !strings.Contains(page, `<script src="/dashboard/app.js"`) || !strings.Contains(page, `data-testid="members"`) {
		t.Fatalf("GET /: %d\n%s", code, page)
	}
	for file, want := range map[string]string{"/dashboard/app.js": "/v1/fleet", "/dashboard/style.css": "table"} {
		if code, body := httpGet(t, admin+file); code != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("GET %s: %d", file, code)
		}
	}
	if code, _ := httpGet(t, admin+"/nope"); code != http.StatusNotFound {
		t.Errorf("GET /nope: %d, want 404", code)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := testkit.DialConnector(t, a["tcp"], 10*time.Second)
	defer c.Close()
	rooms := []string{"room-1", "room-2", "room-3"}
	for _, r := range rooms {
		if err := c.Request(ctx, "bind", map[string]string{"actor": r}, nil); err != nil {
			t.Fatalf("bind %s: %v", r, err)
		}
	}
	var node nodeJSON
	if code := getJSON(t, admin+"/v1/node", &node); code != http.StatusOK || node.RID != "node-a" || node.Admin != a["admin"] ||
		node.Sessions.Total != 1 || node.Sessions.ByTransport["tcp"] != 1 || node.Bindings != 3 || node.BoundSessions != 1 ||
		node.Actors != 3 || node.JobQueue.Limit <= 0 || node.Time.IsZero() {
		t.Fatalf("GET /v1/node: %d %+v", code, node)
	}
	if node.Health.Version != build().Version || !node.Health.Ready || node.Health.UptimeSeconds <= 0 || node.Health.RSSBytes <= 0 ||
		node.Health.HeapBytes <= 0 || node.Health.OpenFiles < 3 || node.Health.MaxFiles <= 0 {
		t.Errorf("GET /v1/node health: %+v", node.Health)
	}
	var p1, p2 fleetActorsJSON
	if code := getJSON(t, admin+"/v1/fleet/actors?limit=2", &p1); code != http.StatusOK || len(p1.Actors) != 2 || p1.Next != "room-2" || p1.Total != 3 {
		t.Fatalf("first page of Actors: %d %+v", code, p1)
	}
	if code := getJSON(t, admin+"/v1/fleet/actors?limit=2&after="+p1.Next, &p2); code != http.StatusOK || len(p2.Actors) != 1 || p2.Next != "" {
		t.Fatalf("second page of Actors: %d %+v", code, p2)
	}
	for i, act := range append(p1.Actors, p2.Actors...) {
		if act.ID != rooms[i] || act.Node != "node-a" || act.Kind != "room" || act.BoundSessions != 1 {
			t.Errorf("Actor %d: %+v", i, act)
		}
	}
	var na nodeActorsJSON
	if code := getJSON(t, admin+"/v1/node/actors?limit=1&after=room-1", &na); code != http.StatusOK || len(na.Actors) != 1 || na.Actors[0].ID != "room-2" || na.Next != "room-2" {
		t.Errorf("GET /v1/node/actors: %d %+v", code, na)
	}
	var bound struct{ Counts map[string]int }
	if code := getJSON(t, admin+"/v1/node/bound?actor=room-1&actor=nobody", &bound); code != http.StatusOK || bound.Counts["room-1"] != 1 || bound.Counts["nobody"] != 0 {
		t.Errorf("GET /v1/node/bound: %d %+v", code, bound)
	}

	tooMany := url.Values{}
	for i := range maxFleetPage + 1 {
		tooMany.Add("actor", "a"+strconv.Itoa(i))
	}
	for _, q := range []string{
		"/v1/fleet?limit=0", "/v1/fleet?limit=101", "/v1/fleet?limit=100000", "/v1/fleet?limit=x",
		"/v1/fleet/actors?limit=100000", "/v1/fleet/actors?limit=-1",
		"/v1/node/actors?limit=100000", "/v1/node/bound", "/v1/node/bound?" + tooMany.Encode(),
		"/v1/sessions?limit=100000", "/v1/sessions?after=4294967296", "/v1/bindings?after=-1",
		"/v1/node/series?since=x", "/v1/fleet/series?since=-1", "/v1/fleet/series?limit=0",
	} {
		var e errorJSON
		if code := getJSON(t, admin+q, &e); code != http.StatusBadRequest || e.Error != "invalid_operation" || e.Message == "" {
			t.Errorf("%.60s: %d %+v, want 400 invalid_operation", q, code, e)
		}
	}

	// A member started without --admin: listed, with an error instead of its figures.
	_, stopB := startBinary(t, "--stream", "tcp://127.0.0.1:0", "--admin", "", "--mesh", "127.0.0.1:0", "--remote", "127.0.0.1:0", "--node-id", "node-b", "--join", a["mesh"])
	defer func() {
		if err := stopB(); err != nil {
			t.Errorf("stop node-b: %v", err)
		}
	}()
	var f fleetJSON
	testkit.Eventually(t, 10*time.Second, "node-b in the fleet", func() bool {
		return getJSON(t, admin+"/v1/fleet", &f) == http.StatusOK && len(f.Members) == 2
	})
	if f.Self != "node-a" || f.Total != 2 || f.Members[0].RID != "node-a" || f.Members[0].Node == nil ||
		f.Members[1].RID != "node-b" || f.Members[1].Node != nil || !strings.Contains(f.Members[1].Error, "no admin address") {
		t.Fatalf("GET /v1/fleet: %+v", f)
	}
	var one fleetJSON
	if code := getJSON(t, admin+"/v1/fleet?limit=1", &one); code != http.StatusOK || len(one.Members) != 1 || one.Next != "node-a" {
		t.Errorf("GET /v1/fleet?limit=1: %d %+v", code, one)
	}
	var fa fleetActorsJSON
	if code := getJSON(t, admin+"/v1/fleet/actors", &fa); code != http.StatusOK || !strings.Contains(fa.Errors["node-b"], "no admin address") {
		t.Errorf("GET /v1/fleet/actors with node-b: %d %+v", code, fa)
	}
	// The series the node keeps: the two sessions, the relayed requests' p99 once some
	// were timed; since= leaves out what the caller has.
	c2 := testkit.DialConnector(t, a["tcp"], 10*time.Second)
	defer c2.Close()
	if err := c2.Request(ctx, "bind", map[string]string{"actor": "series-room"}, nil); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := c2.Request(ctx, "room.echo", map[string]int{"n": 1}, nil); err != nil {
			t.Fatal(err)
		}
	}
	var series seriesJSON
	testkit.Eventually(t, 10*time.Second, "a point with one session and a p99", func() bool {
		if getJSON(t, admin+"/v1/node/series", &series) != http.StatusOK {
			return false
		}
		for _, p := range series.Points {
			if p.Sessions == 2 && p.P99 != nil && *p.P99 > 0 && *p.P99 < 10000 {
				return true
			}
		}
		return false
	})
	if series.RID != "node-a" || series.Interval != 2 {
		t.Errorf("GET /v1/node/series: %+v", series)
	}
	last := series.Points[len(series.Points)-1].T
	var after seriesJSON
	if code := getJSON(t, admin+"/v1/node/series?since="+strconv.FormatInt(last, 10), &after); code != http.StatusOK || len(after.Points) > 1 {
		t.Errorf("series since the last point: %d %+v", code, after.Points)
	}
	var fs fleetSeriesJSON
	if code := getJSON(t, admin+"/v1/fleet/series", &fs); code != http.StatusOK || len(fs.Members) != 2 || fs.Members[0].Series == nil ||
		len(fs.Members[0].Series.Points) == 0 || fs.Members[1].Series != nil || !strings.Contains(fs.Members[1].Error, "no admin address") {
		t.Errorf("GET /v1/fleet/series: %d %+v", code, fs)
	}
}
