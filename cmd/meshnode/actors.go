package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/meshnode/meshnode"
	"github.com/meshnode/meshnode/actor"
	"github.com/meshnode/meshnode/fault"
)

// Admin endpoints and commands for Actors: where one lives, moving one, draining the
// node.

// actorJSON is the answer of GET /v1/actors/{id} and POST /v1/actors/{id}/relocate.
type actorJSON struct {
	ID                       string `json:"id"`
	Kind                     string `json:"kind,omitempty"`
	ObjectGeneration         uint64 `json:"objectGeneration,string"`
	Node                     string `json:"node"`
	NodeGeneration           uint64 `json:"nodeGeneration,string"`
	AuthorityOwnerGeneration uint64 `json:"authorityOwnerGeneration,string"`
}

// activeActorJSON is one activation of GET /v1/actors and /v1/node/actors.
type activeActorJSON struct {
	ID               string `json:"id"`
	Kind             string `json:"kind"`
	ObjectGeneration uint64 `json:"objectGeneration,string"`
	// Arriving: it arrives by a move that has not committed yet.
	Arriving bool `json:"arriving,omitempty"`
	// Held: never idle-collected while so (a session binding, or the Actor itself).
	Held bool `json:"held,omitempty"`
}

// withSystem reads ?system=true: whether a listing includes the runtime's own Actors
// (kinds starting actor.SystemKindPrefix) and topics (topic.ReservedPrefix), which it
// leaves out by default: an application's operator counts the application's.
func withSystem(r *http.Request) bool {
	v, _ := strconv.ParseBool(r.URL.Query().Get("system"))
	return v
}

// listed is as without the runtime's own Actors unless system (as stays as it was).
func listed(as []actor.ActiveActor, system bool) []actor.ActiveActor {
	if system {
		return as
	}
	out := as[:0:0]
	for _, a := range as {
		if !actor.IsSystemKind(a.Kind) {
			out = append(out, a)
		}
	}
	return out
}

func activeJSON(as []actor.ActiveActor) []activeActorJSON {
	out := make([]activeActorJSON, len(as))
	for i, a := range as {
		out[i] = activeActorJSON{ID: a.ID, Kind: a.Kind, ObjectGeneration: a.ObjectGeneration, Arriving: a.Arriving, Held: a.Held}
	}
	return out
}

// errorJSON is the body of every 4xx and 5xx answer of the admin API.
type errorJSON struct {
	Error   string `json:"error"`   // the fault code: not_found, invalid_operation, ...
	Message string `json:"message"` // what went wrong, for a person
}

func fenceJSON(kind string, f actor.RouteFence) actorJSON {
	return actorJSON{ID: f.ID, Kind: kind, ObjectGeneration: f.ObjectGeneration, Node: f.Node.RID,
		NodeGeneration: f.Node.Generation, AuthorityOwnerGeneration: f.AuthorityOwnerGeneration}
}

// writeError answers with the HTTP status of err's fault kind and a JSON error body.
func writeError(w http.ResponseWriter, err error) {
	status := http.StatusInternalServerError
	k, ok := fault.Of(err)
	if ok {
		switch k {
		case fault.NotFound:
			status = http.StatusNotFound
		case fault.InvalidOperation, fault.TypeMismatch, fault.ProtocolError:
			status = http.StatusBadRequest
		case fault.AlreadyExists:
			status = http.StatusConflict
		case fault.Unavailable, fault.ShuttingDown, fault.CapacityExceeded:
			status = http.StatusServiceUnavailable
		case fault.DeadlineExceeded:
			status = http.StatusGatewayTimeout
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(errorJSON{Error: fault.Code(err), Message: err.Error()})
}

// adminActors adds the Actor endpoints; drain asks the serve loop to drain the node.
func adminActors(mux *http.ServeMux, node *meshnode.Node, drain func() bool) {
	mux.HandleFunc("GET /v1/actors/{id}", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		kind, f, err := node.Actors().Where(ctx, r.PathValue("id"))
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, fenceJSON(kind, f))
	})
	mux.HandleFunc("POST /v1/actors/{id}/relocate", func(w http.ResponseWriter, r *http.Request) {
		to := r.URL.Query().Get("to")
		if to == "" {
			writeError(w, fault.Errorf(fault.InvalidOperation, "relocate needs ?to=RID, the node to move the Actor to"))
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 15*time.Second)
		defer cancel()
		f, err := node.Actors().Relocate(ctx, r.PathValue("id"), to)
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, fenceJSON("", f))
	})
	mux.HandleFunc("POST /v1/drain", func(w http.ResponseWriter, _ *http.Request) {
		if !drain() {
			writeError(w, fault.Errorf(fault.ShuttingDown, "the node is already stopping"))
			return
		}
		w.WriteHeader(http.StatusAccepted)
		writeJSON(w, map[string]any{"draining": true})
	})
}

// runRelocate is `meshnode relocate ACTOR-ID NODE-RID`.
func runRelocate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("meshnode relocate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	target := adminFlags(fs)
	commandUsage(fs, "relocate")
	if err := parseCommandFlags(fs, args, stdout); err != nil {
		return err
	}
	if fs.NArg() != 2 {
		fs.Usage()
		return errUsage
	}
	t, err := target()
	if err != nil {
		return fmt.Errorf("relocate: %w", err)
	}
	var f actorJSON
	path := "/v1/actors/" + url.PathEscape(fs.Arg(0)) + "/relocate?to=" + url.QueryEscape(fs.Arg(1))
	if err := t.call(ctx, http.MethodPost, path, &f); err != nil {
		var ae *adminError
		if errors.As(err, &ae) && ae.code == fault.NotFound.Code() && strings.Contains(ae.message, "no such node") {
			// Perhaps the admin address is a node of another fleet: say whose members it knows.
			var ms []memberJSON
			if t.call(ctx, http.MethodGet, "/v1/members", &ms) == nil {
				rids := make([]string, len(ms))
				for i, m := range ms {
					rids[i] = m.RID
				}
				return fmt.Errorf("relocate: %w (the mesh of %s has %s: is %s the fleet you meant?)", err, t.addr, strings.Join(rids, ", "), t.where)
			}
		}
		return fmt.Errorf("relocate: %w", err)
	}
	fmt.Fprintf(stdout, "%s moved to %s (generation %d, authority %d)\n", f.ID, f.Node, f.NodeGeneration, f.AuthorityOwnerGeneration)
	return nil
}

// runDrain is `meshnode drain`: the node moves its Actors away, drains its sessions
// and leaves; the command waits until its admin address stops answering.
func runDrain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("meshnode drain", flag.ContinueOnError)
	fs.SetOutput(stderr)
	target := adminFlags(fs)
	wait := fs.Duration("wait", 2*time.Minute, "how long to wait for the node to stop")
	commandUsage(fs, "drain")
	if err := parseCommandFlags(fs, args, stdout); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("drain: unexpected argument %q", fs.Arg(0))
	}
	t, err := target()
	if err != nil {
		return fmt.Errorf("drain: %w", err)
	}
	if err := t.call(ctx, http.MethodPost, "/v1/drain", nil); err != nil {
		return fmt.Errorf("drain: %w", err)
	}
	fmt.Fprintf(stdout, "meshnode: %s is draining\n", t.addr)
	deadline := time.Now().Add(*wait)
	for time.Now().Before(deadline) {
		hctx, cancel := context.WithTimeout(ctx, time.Second)
		err := t.call(hctx, http.MethodGet, "/healthz", nil)
		cancel()
		if errors.Is(err, errNoAdminAPI) {
			fmt.Fprintf(stdout, "meshnode: %s stopped\n", t.addr)
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("drain: %s still answers after %s", t.addr, *wait)
}
