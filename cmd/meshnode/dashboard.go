package main

import (
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/meshnode/meshnode"
	"github.com/meshnode/meshnode/actor"
	"github.com/meshnode/meshnode/fault"
	"github.com/meshnode/meshnode/internal/buildinfo"
	"github.com/meshnode/meshnode/internal/procmem"
	"github.com/meshnode/meshnode/mesh"
	"github.com/meshnode/meshnode/session"
)

// The operator dashboard: a page at / (files embedded in the binary, nothing fetched
// from elsewhere) that polls JSON endpoints every second. Each node serves its own
// figures (GET /v1/node, /v1/node/actors, /v1/node/bound); GET /v1/fleet and
// /v1/fleet/actors gather them from every member server-side, so the browser talks to
// one origin only and one slow member costs a per-member error, not the page.
// docs/admin.md has the schemas.

//go:embed dashboard
var dashboardFiles embed.FS

const (
	// maxFleetPage bounds the members and Actors of one fleet page: the dashboard never
	// renders more rows than this, however large the mesh.
	maxFleetPage = 100
	// fleetPeerTimeout bounds one member's answer: a member that does not answer in
	// time is shown with an error.
	fleetPeerTimeout = 1500 * time.Millisecond
	// fleetParallel bounds the requests to members in flight at once.
	fleetParallel = 8
	// fleetDeadline bounds one fleet answer, however many members there are: members
	// not asked by then get their errors at once.
	fleetDeadline = 5 * time.Second
	// maxPeerAnswer bounds the bytes read from one member's answer.
	maxPeerAnswer = 4 << 20
)

// nodeJSON is the answer of GET /v1/node: this node's figures now. Counters (records,
// drops, waits) count since the node started; rates are the reader's to compute from
// two answers and their times.
type nodeJSON struct {
	RID        string    `json:"rid"`
	Generation uint64    `json:"generation,string"`
	Address    string    `json:"address"`
	Admin      string    `json:"admin,omitempty"`
	Time       time.Time `json:"time"`
	Sessions   struct {
		Total       int            `json:"total"`
		ByTransport map[string]int `json:"byTransport"`
		ByState     map[string]int `json:"byState"`
	} `json:"sessions"`
	JobQueue      jobQueueJSON `json:"jobQueue"`
	Bindings      int          `json:"bindings"`
	BoundSessions int          `json:"boundSessions"`
	Actors        int          `json:"actors"` // the application's (SystemActors: the runtime's own)
	SystemActors  int          `json:"systemActors"`
	Records       recordsJSON  `json:"records"`
	Health        healthJSON   `json:"health"`
	// Store is the Actor state store: which, its health now, and its figures.
	Store *nodeStoreJSON `json:"store,omitempty"`
	// Security is what protects the node (docs/security.md).
	Security *securityJSON `json:"security,omitempty"`
}

type nodeStoreJSON struct {
	storeHealthJSON
	actor.StoreStats
}

// healthJSON is how the node's process is doing.
type healthJSON struct {
	Ready    bool   `json:"ready"`
	NotReady string `json:"notReady,omitempty"` // why not, when not ready
	Version  string `json:"version"`
	Revision string `json:"revision,omitempty"`
	// Started is when the process started; UptimeSeconds how long ago that was.
	Started       time.Time `json:"started"`
	UptimeSeconds float64   `json:"uptimeSeconds"`
	// RSSBytes is the process's resident memory (0 when unknown), HeapBytes the Go heap
	// in use.
	RSSBytes  int64 `json:"rssBytes"`
	HeapBytes int64 `json:"heapBytes"`
	// OpenFiles is the process's open file descriptors (sockets included; -1 when
	// unknown) and MaxFiles its limit.
	OpenFiles int   `json:"openFiles"`
	MaxFiles  int64 `json:"maxFiles"`
}

type jobQueueJSON struct {
	Limit   int64 `json:"limit"`
	InUse   int64 `json:"inUse"`
	Queued  int64 `json:"queued"`
	Peak    int64 `json:"peak"`
	Waiters int64 `json:"waiters"`
	Waits   int64 `json:"waits"`
	Paused  bool  `json:"paused"`
}

type recordsJSON struct {
	Total      int64                           `json:"total"`
	ByCommand  map[string]mesh.DirectionCounts `json:"byCommand"`
	DropsTotal int64                           `json:"dropsTotal"`
	Drops      map[string]int64                `json:"drops"`
}

// nodeActorsJSON is the answer of GET /v1/node/actors.
type nodeActorsJSON struct {
	Total  int               `json:"total"`
	Actors []activeActorJSON `json:"actors"`
	Next   string            `json:"next,omitempty"`
}

// fleetJSON is the answer of GET /v1/fleet.
type fleetJSON struct {
	Self    string            `json:"self"`
	Total   int               `json:"total"`
	Members []fleetMemberJSON `json:"members"`
	Next    string            `json:"next,omitempty"`
}

type fleetMemberJSON struct {
	memberJSON
	Admin string    `json:"admin,omitempty"`
	Node  *nodeJSON `json:"node,omitempty"`
	Error string    `json:"error,omitempty"`
}

// fleetActorsJSON is the answer of GET /v1/fleet/actors.
type fleetActorsJSON struct {
	Total  int              `json:"total"`
	Actors []fleetActorJSON `json:"actors"`
	Next   string           `json:"next,omitempty"`
	// Errors names the members whose Actors or counts are missing, and why.
	Errors map[string]string `json:"errors,omitempty"`
}

type fleetActorJSON struct {
	ID               string `json:"id"`
	Kind             string `json:"kind"`
	Node             string `json:"node"`
	ObjectGeneration uint64 `json:"objectGeneration,string"`
	BoundSessions    int    `json:"boundSessions"`
}

// dashboard serves the page, its files and the endpoints it polls. self is this node's
// admin address as gossiped (empty: none).
type dashboard struct {
	node    *meshnode.Node
	self    string
	ready   *readiness
	started time.Time
	build   buildinfo.Info
	series  *series
	// sec asks other members with this node's own credentials (nil: plain HTTP).
	sec *adminSecurity
}

func adminDashboard(mux *http.ServeMux, node *meshnode.Node, self string, ready *readiness, started time.Time, series *series, sec *adminSecurity) {
	d := &dashboard{node: node, self: self, ready: ready, started: started, build: build(), series: series, sec: sec}
	files, err := fs.Sub(dashboardFiles, "dashboard")
	if err != nil {
		panic(err) // the embedded directory is part of the binary
	}
	static := http.StripPrefix("/dashboard/", http.FileServerFS(files))
	mux.Handle("GET /dashboard/", noCache(static))
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		// Scripts, styles and requests from this origin only: the page works offline
		// and nothing it shows reaches another host.
		w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:")
		http.ServeFileFS(w, r, files, "index.html")
	})
	mux.HandleFunc("GET /v1/node", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, d.nodeFigures()) })
	mux.HandleFunc("GET /v1/node/actors", d.nodeActors)
	mux.HandleFunc("GET /v1/node/bound", d.nodeBound)
	mux.HandleFunc("GET /v1/fleet", d.fleet)
	mux.HandleFunc("GET /v1/fleet/actors", d.fleetActors)
	mux.HandleFunc("GET /v1/node/series", d.nodeSeries)
	mux.HandleFunc("GET /v1/fleet/series", d.fleetSeries)
}

// noCache makes browsers revalidate the embedded files, so a new binary's page is
// never mixed with an old script.
func noCache(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		h.ServeHTTP(w, r)
	})
}

func (d *dashboard) nodeFigures() *nodeJSON {
	id := d.node.Mesh().ID()
	out := &nodeJSON{RID: id.RID, Generation: id.Generation, Address: d.node.Mesh().MeshAddr(), Admin: d.self, Time: time.Now().UTC()}
	out.Sessions.ByTransport, out.Sessions.ByState = map[string]int{}, map[string]int{}
	if host := d.node.Stream(); host != nil {
		// After the largest id: the counts without a page.
		_, counts := host.Sessions(session.RoutingID(math.MaxUint32), 0)
		out.Sessions.Total, out.Sessions.ByTransport, out.Sessions.ByState = counts.Total, counts.ByTransport, counts.ByState
		q := host.JobQueue()
		out.JobQueue = jobQueueJSON{Limit: q.Limit, InUse: q.InUse, Queued: q.Queued, Peak: q.Peak, Waiters: q.Waiters, Waits: q.Waits, Paused: q.Paused}
	}
	bs := d.node.Binder().Stats()
	out.Bindings, out.BoundSessions = bs.Bindings, bs.Sessions
	as := d.node.Actors().Stats()
	out.Actors, out.SystemActors = as.Active-as.System, as.System
	if st := d.node.Store(); st != nil {
		out.Store = &nodeStoreJSON{storeHealthJSON: storeHealth(context.Background(), st), StoreStats: d.node.Actors().StoreStats()}
	}
	out.Security = securityFigures(d.node, d.sec)
	rc := d.node.Records().Counts()
	out.Records = recordsJSON{ByCommand: rc.ByCommand, Drops: rc.Drops}
	for _, c := range rc.ByCommand {
		out.Records.Total += c.In + c.Out
	}
	for _, n := range rc.Drops {
		out.Records.DropsTotal += n
	}
	out.Health = d.health()
	// As /readyz: not ready while the store does not answer or the mesh certificate
	// has expired.
	if out.Health.Ready && out.Store != nil && !out.Store.OK {
		out.Health.Ready, out.Health.NotReady = false, out.Store.notReady()
	}
	if out.Health.Ready {
		if notReady, _ := securityReadiness(d.node, time.Now()); notReady != "" {
			out.Health.Ready, out.Health.NotReady = false, notReady
		}
	}
	return out
}

// health reads how the process is doing.
func (d *dashboard) health() healthJSON {
	h := healthJSON{Version: d.build.Version, Revision: d.build.ShortRevision(), Started: d.started.UTC(),
		UptimeSeconds: time.Since(d.started).Seconds()}
	h.NotReady = d.ready.why()
	h.Ready = h.NotReady == ""
	h.RSSBytes, h.HeapBytes = procmem.RSS(), procmem.Heap()
	h.OpenFiles, h.MaxFiles = procmem.OpenFiles(), procmem.MaxFiles()
	return h
}

// sinceParam reads ?since=MS (unix milliseconds; 0 when absent).
func sinceParam(r *http.Request) (int64, error) {
	v := r.URL.Query().Get("since")
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, fault.Errorf(fault.InvalidOperation, "since=%q: want unix milliseconds", v)
	}
	return n, nil
}

// GET /v1/node/series?since=MS: this node's points after since.
func (d *dashboard) nodeSeries(w http.ResponseWriter, r *http.Request) {
	since, err := sinceParam(r)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, d.ownSeries(since))
}

func (d *dashboard) ownSeries(since int64) seriesJSON {
	id := d.node.Mesh().ID()
	return seriesJSON{RID: id.RID, Generation: id.Generation, Interval: seriesInterval.Seconds(), Points: d.series.since(since)}
}

// fleetSeriesJSON is the answer of GET /v1/fleet/series.
type fleetSeriesJSON struct {
	Self    string                  `json:"self"`
	Members []fleetSeriesMemberJSON `json:"members"`
	Next    string                  `json:"next,omitempty"`
}

type fleetSeriesMemberJSON struct {
	RID        string      `json:"rid"`
	Generation uint64      `json:"generation,string"`
	State      string      `json:"state"`
	Series     *seriesJSON `json:"series,omitempty"`
	Error      string      `json:"error,omitempty"`
}

// GET /v1/fleet/series?after=RID&limit=N&since=MS: a page of the members, each live
// one with its series after since (or the error that kept it away).
func (d *dashboard) fleetSeries(w http.ResponseWriter, r *http.Request) {
	limit, err := limitParam(r, 50, maxFleetPage)
	if err != nil {
		writeError(w, err)
		return
	}
	since, err := sinceParam(r)
	if err != nil {
		writeError(w, err)
		return
	}
	after := r.URL.Query().Get("after")
	self := d.node.Mesh().ID().RID
	out := fleetSeriesJSON{Self: self, Members: []fleetSeriesMemberJSON{}}
	var admins []string
	for _, m := range d.node.Membership().Known() {
		if m.ID.RID <= after {
			continue
		}
		if len(out.Members) == limit {
			out.Next = out.Members[limit-1].RID
			break
		}
		out.Members = append(out.Members, fleetSeriesMemberJSON{RID: m.ID.RID, Generation: m.ID.Generation, State: string(m.State)})
		admins = append(admins, m.AdminAddr)
	}
	d.fanOut(r.Context(), len(out.Members), func(ctx context.Context, i int) {
		fm := &out.Members[i]
		switch {
		case fm.RID == self:
			s := d.ownSeries(since)
			fm.Series = &s
		case fm.State != string(mesh.StateAlive) && fm.State != string(mesh.StateSuspect):
		case admins[i] == "":
			fm.Error = "no admin address gossiped (started without --admin)"
		default:
			var s seriesJSON
			if err := d.get(ctx, admins[i], fm.RID, "/v1/node/series?since="+strconv.FormatInt(since, 10), &s); err != nil {
				fm.Error = err.Error()
				return
			}
			if s.RID != fm.RID || s.Generation != fm.Generation {
				fm.Error = fmt.Sprintf("%s answered as %s generation %d", admins[i], s.RID, s.Generation)
				return
			}
			fm.Series = &s
		}
	})
	writeJSON(w, out)
}

// limitParam reads ?limit=N (1..maxLimit, default def).
func limitParam(r *http.Request, def, maxLimit int) (int, error) {
	v := r.URL.Query().Get("limit")
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > maxLimit {
		return 0, fault.Errorf(fault.InvalidOperation, "limit=%q: want 1..%d", v, maxLimit)
	}
	return n, nil
}

// GET /v1/node/actors?after=ID&limit=N: a page of the Actors this node hosts, by id.
func (d *dashboard) nodeActors(w http.ResponseWriter, r *http.Request) {
	limit, err := limitParam(r, defaultPage, session.MaxSessionsPage)
	if err != nil {
		writeError(w, err)
		return
	}
	after := r.URL.Query().Get("after")
	all := listed(d.node.Actors().Active(), withSystem(r)) // sorted by id
	start, _ := slices.BinarySearchFunc(all, after, func(a actor.ActiveActor, id string) int { return strings.Compare(a.ID, id) })
	for start < len(all) && all[start].ID <= after {
		start++
	}
	page := all[start:min(start+limit, len(all))]
	out := nodeActorsJSON{Total: len(all), Actors: activeJSON(page)}
	if start+limit < len(all) {
		out.Next = page[len(page)-1].ID
	}
	writeJSON(w, out)
}

// GET /v1/node/bound?actor=ID&actor=ID...: for each Actor, how many of this node's
// sessions are bound to it.
func (d *dashboard) nodeBound(w http.ResponseWriter, r *http.Request) {
	ids := r.URL.Query()["actor"]
	if len(ids) == 0 || len(ids) > maxFleetPage {
		writeError(w, fault.Errorf(fault.InvalidOperation, "want 1..%d actor= parameters, got %d", maxFleetPage, len(ids)))
		return
	}
	counts := d.node.Binder().BoundSessions(ids)
	out := make(map[string]int, len(ids))
	for i, id := range ids {
		out[id] = counts[i]
	}
	writeJSON(w, map[string]any{"counts": out})
}

// GET /v1/fleet?after=RID&limit=N: a page of the members, each live one with its
// /v1/node figures or the error that kept them away.
func (d *dashboard) fleet(w http.ResponseWriter, r *http.Request) {
	limit, err := limitParam(r, 50, maxFleetPage)
	if err != nil {
		writeError(w, err)
		return
	}
	after := r.URL.Query().Get("after")
	known := d.node.Membership().Known() // sorted by RID
	out := fleetJSON{Self: d.node.Mesh().ID().RID, Total: len(known), Members: []fleetMemberJSON{}}
	for _, m := range known {
		if m.ID.RID <= after {
			continue
		}
		if len(out.Members) == limit {
			out.Next = out.Members[limit-1].RID
			break
		}
		out.Members = append(out.Members, fleetMemberJSON{memberJSON: memberOf(m), Admin: m.AdminAddr})
	}
	d.fanOut(r.Context(), len(out.Members), func(ctx context.Context, i int) {
		fm := &out.Members[i]
		switch {
		case fm.RID == out.Self:
			fm.Node = d.nodeFigures()
		case fm.State != string(mesh.StateAlive) && fm.State != string(mesh.StateSuspect):
			// Departed: no figures to ask for.
		case fm.Admin == "":
			fm.Error = "no admin address gossiped (started without --admin)"
		default:
			var n nodeJSON
			if err := d.get(ctx, fm.Admin, fm.RID, "/v1/node", &n); err != nil {
				fm.Error = err.Error()
				return
			}
			if n.RID != fm.RID || n.Generation != fm.Generation {
				// Another lifecycle (a restart gossip has not told of yet) or another
				// process on that address.
				fm.Error = fmt.Sprintf("%s answered as %s generation %d", fm.Admin, n.RID, n.Generation)
				return
			}
			fm.Node = &n
		}
	})
	writeJSON(w, out)
}

// GET /v1/fleet/actors?after=ID&limit=N: a page of the Actors of every live member, by
// id, each with its node and the sessions bound to it across the members.
func (d *dashboard) fleetActors(w http.ResponseWriter, r *http.Request) {
	limit, err := limitParam(r, defaultPage, maxFleetPage)
	if err != nil {
		writeError(w, err)
		return
	}
	after, system := r.URL.Query().Get("after"), withSystem(r)
	self := d.node.Mesh().ID().RID
	live := d.node.Membership().Live()
	type answer struct {
		page nodeActorsJSON
		err  error
	}
	answers := make([]answer, len(live))
	// Each member's first limit Actors after the cursor: the fleet's first limit are
	// among them (ids are unique in the fleet), so merging them pages the fleet.
	d.fanOut(r.Context(), len(live), func(ctx context.Context, i int) {
		m := live[i]
		q := "/v1/node/actors?limit=" + strconv.Itoa(limit) + "&after=" + url.QueryEscape(after) + "&system=" + strconv.FormatBool(system)
		switch {
		case m.ID.RID == self:
			all := listed(d.node.Actors().Active(), system)
			answers[i].page.Total = len(all)
			for _, a := range all {
				if a.ID <= after {
					continue
				}
				if len(answers[i].page.Actors) == limit {
					answers[i].page.Next = a.ID // only "more follow" matters here
					break
				}
				answers[i].page.Actors = append(answers[i].page.Actors, activeJSON([]actor.ActiveActor{a})...)
			}
		case m.AdminAddr == "":
			answers[i].err = fmt.Errorf("no admin address gossiped (started without --admin)")
		default:
			answers[i].err = d.get(ctx, m.AdminAddr, m.ID.RID, q, &answers[i].page)
		}
	})
	out := fleetActorsJSON{Actors: []fleetActorJSON{}}
	more := false // a member has Actors after its page
	for i, a := range answers {
		if a.err != nil {
			if out.Errors == nil {
				out.Errors = map[string]string{}
			}
			out.Errors[live[i].ID.RID] = a.err.Error()
			continue
		}
		out.Total += a.page.Total
		more = more || a.page.Next != ""
		for _, act := range a.page.Actors {
			out.Actors = append(out.Actors, fleetActorJSON{ID: act.ID, Kind: act.Kind, Node: live[i].ID.RID, ObjectGeneration: act.ObjectGeneration})
		}
	}
	slices.SortFunc(out.Actors, func(a, b fleetActorJSON) int { return strings.Compare(a.ID, b.ID) })
	if len(out.Actors) > limit || more && len(out.Actors) == limit {
		out.Actors = out.Actors[:limit]
		out.Next = out.Actors[limit-1].ID
	}
	if len(out.Actors) == 0 {
		writeJSON(w, out)
		return
	}
	// The bound sessions of the page's Actors, summed over the members that own sessions.
	ids := make([]string, len(out.Actors))
	q := url.Values{}
	for i, a := range out.Actors {
		ids[i] = a.ID
		q.Add("actor", a.ID)
	}
	var mu sync.Mutex
	total := make([]int, len(ids))
	d.fanOut(r.Context(), len(live), func(ctx context.Context, i int) {
		m := live[i]
		var counts []int
		switch {
		case m.ID.RID == self:
			counts = d.node.Binder().BoundSessions(ids)
		case m.AdminAddr == "":
			return // already reported
		default:
			var b struct {
				Counts map[string]int `json:"counts"`
			}
			if err := d.get(ctx, m.AdminAddr, m.ID.RID, "/v1/node/bound?"+q.Encode(), &b); err != nil {
				mu.Lock()
				if out.Errors == nil {
					out.Errors = map[string]string{}
				}
				out.Errors[m.ID.RID] = "bound sessions: " + err.Error()
				mu.Unlock()
				return
			}
			counts = make([]int, len(ids))
			for j, id := range ids {
				counts[j] = b.Counts[id]
			}
		}
		mu.Lock()
		for j, n := range counts {
			total[j] += n
		}
		mu.Unlock()
	})
	for i := range out.Actors {
		out.Actors[i].BoundSessions = total[i]
	}
	writeJSON(w, out)
}

// fanOut runs fn(ctx, i) for i in [0, n), at most fleetParallel at once, each with a
// context bounded by fleetPeerTimeout and all by fleetDeadline, and returns when every call has returned: the
// calling handler owns the goroutines.
func (d *dashboard) fanOut(ctx context.Context, n int, fn func(ctx context.Context, i int)) {
	ctx, cancel := context.WithTimeout(ctx, fleetDeadline)
	defer cancel()
	sem := make(chan struct{}, fleetParallel)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			cctx, cancel := context.WithTimeout(ctx, fleetPeerTimeout)
			defer cancel()
			fn(cctx, i)
		}()
	}
	wg.Wait()
}

// get fetches one member's admin endpoint (member rid at admin) with this node's own
// credentials and decodes its JSON answer.
func (d *dashboard) get(ctx context.Context, admin, rid, path string, out any) error {
	req, client, err := d.sec.peerRequest(ctx, admin, rid, path)
	if err != nil {
		return fmt.Errorf("admin address %q: %w", admin, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	body := io.LimitReader(resp.Body, maxPeerAnswer)
	if resp.StatusCode != http.StatusOK {
		var e errorJSON
		if json.NewDecoder(body).Decode(&e) == nil && e.Message != "" {
			return fmt.Errorf("GET %s: %s: %s", path, resp.Status, e.Message)
		}
		return fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	if err := json.NewDecoder(body).Decode(out); err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	return nil
}
