package demo

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sync"
	"time"
)

// Hold stops a worker at a named point of its work (a hook the example's facet calls
// with a key: an answer committed, a submission frozen), for the key it is armed for,
// until released or the worker goes: how the examples put a crash or a second
// presentation exactly there.
type Hold struct {
	mu      sync.Mutex
	key     string
	release chan struct{}
	held    chan struct{}
}

// NewHold returns a Hold armed for nothing.
func NewHold() *Hold { return &Hold{held: make(chan struct{}, 1)} }

// Arm holds key's next pass through the hook until release is closed (nil: until the
// worker goes).
func (h *Hold) Arm(key string, release chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.key, h.release = key, release
}

// Hook is what the worker calls at the point: it returns at once for another key.
func (h *Hold) Hook(ctx context.Context, key string) {
	h.mu.Lock()
	armed, release := h.key == key, h.release
	if armed {
		h.key = ""
	}
	h.mu.Unlock()
	if !armed {
		return
	}
	h.held <- struct{}{}
	select {
	case <-release:
	case <-ctx.Done():
	}
}

// Wait returns once the armed key reached the hook (what names it in the error).
func (h *Hold) Wait(ctx context.Context, what string) error {
	select {
	case <-h.held:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
	}
}

// Runs runs an example's scenario at most once per transport and keeps what it
// reported and printed: the tests each check a part of the same run.
type Runs[R any] struct {
	// Run is the scenario (what the example's main runs), printing to out.
	Run func(ctx context.Context, out io.Writer, transport string) (R, error)

	mu   sync.Mutex
	done map[string]*ranOnce[R]
}

type ranOnce[R any] struct {
	rep R
	out string
	err error
}

// Get returns the report, the output and the error of the run over transport, running
// it on first use (bounded by 30 s: a run takes about 2, a broken one fails on its
// first wait that times out).
func (r *Runs[R]) Get(transport string) (R, string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done == nil {
		r.done = map[string]*ranOnce[R]{}
	}
	d := r.done[transport]
	if d == nil {
		var out bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		rep, err := r.Run(ctx, &out, transport)
		cancel()
		d = &ranOnce[R]{rep: rep, out: out.String(), err: err}
		r.done[transport] = d
	}
	return d.rep, d.out, d.err
}
