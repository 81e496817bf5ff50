package main

import (
	"context"
	"fmt"
	"maps"
	"sync"

	"golang.org/x/sync/semaphore"

	"github.com/meshnode/meshnode/services"
)

// Presentation styles: a TUI shows one dialog at a time (a modal queue: FIFO, and a
// queued dialog whose task ends leaves it before it is shown); a web client shows them
// all at once.
const (
	TUI = "tui"
	Web = "web"
)

// Seen is one thing a presentation saw or did: What is "task" (a dialog's task
// started), "shown", "withdrawn" (its task ended while it was queued for the modal),
// "dismissed" (its task ended while it was shown), "answered", "failed" (an answer
// was refused), Task counts the dialog's tasks in this presentation from 1 (a new one
// per generation of the key).
type Seen struct {
	What    string
	Key     string
	Task    int
	Detail  string
	Settled *Settled // "answered": how the answer settled
}

// Presenter is the question plugin's presentation facet, with a scripted user: each
// dialog it shows waits for Answer (or its task's end).
type Presenter struct {
	Name  string
	style string
	print func(format string, args ...any)
	modal *semaphore.Weighted // a TUI's one dialog at a time

	mu       sync.Mutex
	changed  chan struct{} // closed and replaced at every change
	seen     []Seen
	tasks    map[string]int           // key → tasks started
	facades  map[string][]*Dialog     // key → each task's facade
	showing  map[string]int           // key → the task shown now
	maxShown int                      // the most dialogs shown at once
	answers  map[string]chan Response // the scripted user's answers by key
	results  map[string]Result
	hydrated int // hydrations of the results replica (the first, and every replacement)
	tools    *Tools
}

// NewPresenter returns a presentation named name of style (TUI or Web) that prints
// what it sees with print.
func NewPresenter(name, style string, print func(format string, args ...any)) *Presenter {
	p := &Presenter{Name: name, style: style, print: print, changed: make(chan struct{}),
		tasks: map[string]int{}, facades: map[string][]*Dialog{}, showing: map[string]int{},
		answers: map[string]chan Response{}}
	if style == TUI {
		p.modal = semaphore.NewWeighted(1)
	}
	return p
}

// Facet observes the session's dialogs and its tool's results.
func (p *Presenter) Facet() services.Facet {
	return services.Facet{ID: "question.presentation", Setup: func(env *services.Env) {
		p.tools = services.Use(env, ToolsToken)
		services.Observe(env, DialogsToken, p.dialog)
		env.OnActivate(func(context.Context) error {
			unsub := p.tools.Results.Subscribe(p.onResults)
			env.Own(func(context.Context) error { unsub(); return nil })
			return nil
		})
	}}
}

func (p *Presenter) onResults(ctx context.Context, m map[string]Result) {
	d, _ := services.DeliveryOf(ctx)
	p.mu.Lock()
	defer p.mu.Unlock()
	if d.Kind == services.DeliveryHydration {
		p.hydrated++
	}
	for k, r := range m {
		if _, ok := p.results[k]; !ok {
			p.print("%s: result of %s: %s", p.Name, k, r.Text)
		}
	}
	p.results = m
	p.notify()
}

// dialog is the observer task of one dialog instance: it starts once the instance's
// request is hydrated and ends when the instance closes, is replaced, or the
// presentation goes.
func (p *Presenter) dialog(ctx context.Context, key string, d *Dialog) error {
	req, _ := d.Request.Value()
	p.mu.Lock()
	p.tasks[key]++
	n := p.tasks[key]
	p.facades[key] = append(p.facades[key], d)
	p.note(Seen{What: "task", Key: key, Task: n, Detail: req.Question})
	p.mu.Unlock()
	if p.modal != nil {
		if err := p.modal.Acquire(ctx, 1); err != nil {
			p.record(Seen{What: "withdrawn", Key: key, Task: n})
			return nil
		}
		defer p.modal.Release(1)
	}
	p.mu.Lock()
	p.showing[key] = n
	p.maxShown = max(p.maxShown, len(p.showing))
	p.note(Seen{What: "shown", Key: key, Task: n, Detail: fmt.Sprintf("%q %v", req.Question, labels(req))})
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		if p.showing[key] == n {
			delete(p.showing, key)
		}
		p.notify()
		p.mu.Unlock()
	}()
	resp, err := p.decide(ctx, key)
	if err != nil {
		p.record(Seen{What: "dismissed", Key: key, Task: n})
		return nil
	}
	st, err := d.SubmitAnswer.Call(ctx, resp)
	if err != nil {
		p.record(Seen{What: "failed", Key: key, Task: n, Detail: err.Error()})
		return nil
	}
	p.record(Seen{What: "answered", Key: key, Task: n, Settled: &st,
		Detail: fmt.Sprintf("%s (won %v, settled as %s)", describe(resp), st.Won, describe(st.Winner))})
	return nil
}

// decide is the scripted user: the answer given to Answer for key, or none when the
// task ends first.
func (p *Presenter) decide(ctx context.Context, key string) (Response, error) {
	select {
	case r := <-p.answerChan(key):
		return r, nil
	case <-ctx.Done():
		return Response{}, ctx.Err()
	}
}

func (p *Presenter) answerChan(key string) chan Response {
	p.mu.Lock()
	defer p.mu.Unlock()
	ch := p.answers[key]
	if ch == nil {
		ch = make(chan Response, 1)
		p.answers[key] = ch
	}
	return ch
}

// Answer is the user answering the dialog of key shown now.
func (p *Presenter) Answer(key string, r Response) { p.answerChan(key) <- r }

// Invoke calls the question tool (the presentation stands in for the model).
func (p *Presenter) Invoke(ctx context.Context, inv Invocation) error {
	if _, err := p.tools.Invoke.Call(ctx, inv); err != nil {
		return fmt.Errorf("%s: invoke %s: %w", p.Name, inv.ID, err)
	}
	return nil
}

// SubmitThrough answers through the facade of the key's task-th task (an old
// generation, say), not through the dialog shown.
func (p *Presenter) SubmitThrough(ctx context.Context, key string, task int, r Response) (Settled, error) {
	p.mu.Lock()
	fs := p.facades[key]
	p.mu.Unlock()
	if task < 1 || task > len(fs) {
		return Settled{}, fmt.Errorf("%s: no task %d of %s", p.Name, task, key)
	}
	return fs[task-1].SubmitAnswer.Call(ctx, r)
}

// View is what a presentation has seen so far.
type View struct {
	Seen     []Seen
	Tasks    map[string]int
	Showing  map[string]int
	MaxShown int
	Results  map[string]Result
	Hydrated int
}

// View returns a copy of what the presentation has seen.
func (p *Presenter) View() View {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.viewLocked()
}

func (p *Presenter) viewLocked() View {
	return View{Seen: append([]Seen(nil), p.seen...), Tasks: maps.Clone(p.tasks), Showing: maps.Clone(p.showing),
		MaxShown: p.maxShown, Results: maps.Clone(p.results), Hydrated: p.hydrated}
}

// Wait returns once cond holds of the presentation's view (checked at every change),
// or fails when ctx ends first.
func (p *Presenter) Wait(ctx context.Context, what string, cond func(v View) bool) error {
	for {
		p.mu.Lock()
		ok, ch := cond(p.viewLocked()), p.changed
		p.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("%s waiting for %s: %w", p.Name, what, ctx.Err())
		}
	}
}

func (p *Presenter) record(s Seen) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.note(s)
}

// note records s and prints it; p.mu is held.
func (p *Presenter) note(s Seen) {
	p.seen = append(p.seen, s)
	line := fmt.Sprintf("%s: %s %s#%d", p.Name, s.What, s.Key, s.Task)
	if s.Detail != "" {
		line += ": " + s.Detail
	}
	p.print("%s", line)
	p.notify()
}

func (p *Presenter) notify() {
	close(p.changed)
	p.changed = make(chan struct{})
}

func labels(req Request) []string { return details(req, nil).Options }

func describe(r Response) string {
	switch r.Kind {
	case Selected:
		return fmt.Sprintf("selected %d", r.Index)
	case Custom:
		return fmt.Sprintf("custom %q", r.Answer)
	}
	return r.Kind
}
