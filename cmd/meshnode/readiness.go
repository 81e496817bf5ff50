package main

import (
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
)

// readiness is what /readyz answers: ready, or why not (starting, joining the mesh,
// draining), with how long it has been so.
type readiness struct {
	mu     sync.Mutex
	reason string // "" when ready
	since  time.Time
}

func newReadiness() *readiness { return &readiness{reason: "starting", since: time.Now()} }

// notReady records why the node is not ready.
func (r *readiness) notReady(reason string) {
	r.mu.Lock()
	r.reason, r.since = reason, time.Now()
	r.mu.Unlock()
}

// why returns why the node is not ready ("" when it is).
func (r *readiness) why() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reason
}

// ready marks the node ready.
func (r *readiness) ready() { r.notReady("") }

// serveHTTP is GET /readyz: 200 "ready", or 503 "not ready: REASON (for D)".
func (r *readiness) serveHTTP(w http.ResponseWriter, _ *http.Request) {
	r.mu.Lock()
	reason, since := r.reason, r.since
	r.mu.Unlock()
	if reason != "" {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, "not ready: %s (for %s)\n", reason, time.Since(since).Round(time.Millisecond))
		return
	}
	_, _ = io.WriteString(w, "ready\n")
}
