package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/meshnode/meshnode"
	"github.com/meshnode/meshnode/fault"
	"github.com/meshnode/meshnode/session"
)

// Admin endpoints and commands for sessions and their bindings (docs/admin.md has the
// schemas).

// sessionsJSON is the answer of GET /v1/sessions.
type sessionsJSON struct {
	Total       int            `json:"total"`
	ByTransport map[string]int `json:"byTransport"`
	ByState     map[string]int `json:"byState"`
	Sessions    []sessionJSON  `json:"sessions"`
	// Next is the after= value of the next page; empty on the last page.
	Next string `json:"next,omitempty"`
}

type sessionJSON struct {
	ID        uint64        `json:"id"`
	Stream    string        `json:"stream"`
	Transport string        `json:"transport"`
	Remote    string        `json:"remote"`
	Opened    time.Time     `json:"opened"`
	State     string        `json:"state"` // open or closing
	Bindings  []bindingJSON `json:"bindings"`
}

// bindingJSON is one binding of a session on this node (the session-owner side).
type bindingJSON struct {
	Session                  uint64 `json:"session,omitempty"`
	Actor                    string `json:"actor"`
	Node                     string `json:"node"`
	ObjectGeneration         uint64 `json:"objectGeneration,string"`
	AuthorityOwnerGeneration uint64 `json:"authorityOwnerGeneration,string"`
	BindingGeneration        uint64 `json:"bindingGeneration,string"`
}

// bindingsJSON is the answer of GET /v1/bindings.
type bindingsJSON struct {
	Bindings []bindingJSON `json:"bindings"`
	Next     string        `json:"next,omitempty"`
}

const defaultPage = 100

// pageParams reads ?after=ID&limit=N (limit 1..session.MaxSessionsPage, default 100).
func pageParams(r *http.Request) (session.RoutingID, int, error) {
	q := r.URL.Query()
	var after uint64
	if v := q.Get("after"); v != "" {
		n, err := strconv.ParseUint(v, 10, 32) // a RoutingID is 32 bits: a larger after= must not wrap
		if err != nil {
			return 0, 0, fault.Errorf(fault.InvalidOperation, "after=%q is not a session id", v)
		}
		after = n
	}
	limit := defaultPage
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > session.MaxSessionsPage {
			return 0, 0, fault.Errorf(fault.InvalidOperation, "limit=%q: want 1..%d", v, session.MaxSessionsPage)
		}
		limit = n
	}
	return session.RoutingID(after), limit, nil
}

func adminSessions(mux *http.ServeMux, node *meshnode.Node) {
	mux.HandleFunc("GET /v1/sessions", func(w http.ResponseWriter, r *http.Request) {
		after, limit, err := pageParams(r)
		if err != nil {
			writeError(w, err)
			return
		}
		out := sessionsJSON{ByTransport: map[string]int{}, ByState: map[string]int{}, Sessions: []sessionJSON{}}
		if host := node.Stream(); host != nil {
			page, counts := host.Sessions(after, limit+1)
			out.Total, out.ByTransport, out.ByState = counts.Total, counts.ByTransport, counts.ByState
			if len(page) > limit {
				page = page[:limit]
				out.Next = strconv.FormatUint(uint64(page[limit-1].RoutingID), 10)
			}
			for _, s := range page {
				state := "open"
				if s.Closing {
					state = "closing"
				}
				out.Sessions = append(out.Sessions, sessionJSON{ID: uint64(s.RoutingID), Stream: s.Stream, Transport: s.Transport,
					Remote: s.Remote, Opened: s.Opened.UTC(), State: state, Bindings: bindingsOf(node, s.RoutingID, false)})
			}
		}
		writeJSON(w, out)
	})
	mux.HandleFunc("GET /v1/bindings", func(w http.ResponseWriter, r *http.Request) {
		after, limit, err := pageParams(r)
		if err != nil {
			writeError(w, err)
			return
		}
		out := bindingsJSON{Bindings: []bindingJSON{}}
		if host := node.Stream(); host != nil {
			// Walk sessions in order until the page is full; a session's bindings are
			// never split across pages.
			for cursor := after; len(out.Bindings) < limit; {
				page, _ := host.Sessions(cursor, session.MaxSessionsPage)
				if len(page) == 0 {
					break
				}
				for _, s := range page {
					cursor = s.RoutingID
					out.Bindings = append(out.Bindings, bindingsOf(node, s.RoutingID, true)...)
					if len(out.Bindings) >= limit {
						out.Next = strconv.FormatUint(uint64(s.RoutingID), 10)
						break
					}
				}
			}
		}
		writeJSON(w, out)
	})
}

func bindingsOf(node *meshnode.Node, id session.RoutingID, withSession bool) []bindingJSON {
	out := []bindingJSON{}
	for _, b := range node.Binder().BindingsOf(id) {
		bj := bindingJSON{Actor: b.Actor.ID, Node: b.Actor.Node.RID, ObjectGeneration: b.Actor.ObjectGeneration,
			AuthorityOwnerGeneration: b.Actor.AuthorityOwnerGeneration, BindingGeneration: b.BindingGeneration}
		if withSession {
			bj.Session = uint64(id)
		}
		out = append(out, bj)
	}
	return out
}

// runSessions is `meshnode sessions`: the counts as a table (sessions in all, by
// state, by transport), then the sessions (one page) as a table.
func runSessions(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("meshnode sessions", flag.ContinueOnError)
	fs.SetOutput(stderr)
	target := adminFlags(fs)
	limit := fs.Int("limit", defaultPage, "sessions to list (1.."+strconv.Itoa(session.MaxSessionsPage)+")")
	commandUsage(fs, "sessions")
	if err := parseCommandFlags(fs, args, stdout); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("sessions: unexpected argument %q", fs.Arg(0))
	}
	t, err := target()
	if err != nil {
		return fmt.Errorf("sessions: %w", err)
	}
	var out sessionsJSON
	if err := t.call(ctx, http.MethodGet, "/v1/sessions?limit="+strconv.Itoa(*limit), &out); err != nil {
		return fmt.Errorf("sessions: %w", err)
	}
	// The counts: a column per state (open and closing always) and per transport.
	states := sortedKeys(out.ByState, "open", "closing")
	transports := sortedKeys(out.ByTransport)
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprint(tw, "SESSIONS")
	for _, s := range states {
		fmt.Fprint(tw, "\t"+strings.ToUpper(s))
	}
	for _, tr := range transports {
		fmt.Fprint(tw, "\t"+strings.ToUpper(tr))
	}
	fmt.Fprintf(tw, "\n%d", out.Total)
	for _, s := range states {
		fmt.Fprintf(tw, "\t%d", out.ByState[s])
	}
	for _, tr := range transports {
		fmt.Fprintf(tw, "\t%d", out.ByTransport[tr])
	}
	fmt.Fprintln(tw)
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(stdout)
	tw = tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTRANSPORT\tREMOTE\tSTATE\tOPENED\tBINDINGS")
	for _, s := range out.Sessions {
		bound := ""
		for i, b := range s.Bindings {
			if i > 0 {
				bound += ","
			}
			bound += b.Actor + "@" + b.Node
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", s.ID, s.Transport, s.Remote, s.State, s.Opened.Format(time.RFC3339), bound)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if out.Next != "" {
		fmt.Fprintf(stdout, "(more: GET /v1/sessions?after=%s)\n", out.Next)
	}
	return nil
}

// runActors is `meshnode actors`: the node's activations as a table.
func runActors(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("meshnode actors", flag.ContinueOnError)
	fs.SetOutput(stderr)
	target := adminFlags(fs)
	commandUsage(fs, "actors")
	if err := parseCommandFlags(fs, args, stdout); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("actors: unexpected argument %q", fs.Arg(0))
	}
	t, err := target()
	if err != nil {
		return fmt.Errorf("actors: %w", err)
	}
	var actors []activeActorJSON
	if err := t.call(ctx, http.MethodGet, "/v1/actors", &actors); err != nil {
		return fmt.Errorf("actors: %w", err)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tKIND\tOBJECT GENERATION")
	for _, a := range actors {
		fmt.Fprintf(tw, "%s\t%s\t%d\n", a.ID, a.Kind, a.ObjectGeneration)
	}
	return tw.Flush()
}

// sortedKeys returns always, then the other keys of m in order.
func sortedKeys(m map[string]int, always ...string) []string {
	out := append([]string{}, always...)
	var rest []string
	for k := range m {
		if !slices.Contains(always, k) {
			rest = append(rest, k)
		}
	}
	slices.Sort(rest)
	return append(out, rest...)
}
