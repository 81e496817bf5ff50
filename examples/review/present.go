package main

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/meshnode/meshnode/services"
)

// Seen is one thing a presentation saw: What is "open" (a review's panel opened with
// its document), "activity" (the panel rendered an activity), "close" (the panel
// closed: its instance closed, was replaced, or the presentation went). Task counts
// the review's panels in this presentation from 1.
type Seen struct {
	What     string
	Review   string
	Task     int
	Revision int
	Comments int
	Status   string
}

// Panel is what a presentation shows of a review now.
type Panel struct {
	Task     int
	Files    int
	Revision int
	Comments []Comment
	Status   string
}

// Presenter is the shared-review presentation facet: a panel per review, opened by
// the observer task once both state members are hydrated, with a scripted user whose
// actions (Comment, Submit) each carry their own context.
type Presenter struct {
	Name    string
	print   func(format string, args ...any)
	manager *Manager

	mu       sync.Mutex
	changed  chan struct{}
	seen     []Seen
	tasks    map[string]int
	facades  map[string][]*Review
	panels   map[string]*Panel
	actions  map[string]chan action
	prompts  []Prompt
	hydrated int // hydrations of the prompts replica
}

type action struct {
	run   func(ctx context.Context, r *Review) (any, error)
	reply chan reply
}

type reply struct {
	v   any
	err error
}

// NewPresenter returns a presentation named name that prints what it sees.
func NewPresenter(name string, print func(format string, args ...any)) *Presenter {
	return &Presenter{Name: name, print: print, changed: make(chan struct{}),
		tasks: map[string]int{}, facades: map[string][]*Review{}, panels: map[string]*Panel{},
		actions: map[string]chan action{}}
}

// Facet observes the session's reviews and its accepted prompts.
func (p *Presenter) Facet() services.Facet {
	return services.Facet{ID: "review.presentation", Setup: func(env *services.Env) {
		p.manager = services.Use(env, ManagerToken)
		services.Observe(env, ReviewsToken, p.review)
		env.OnActivate(func(context.Context) error {
			unsub := p.manager.Prompts.Subscribe(p.onPrompts)
			env.Own(func(context.Context) error { unsub(); return nil })
			return nil
		})
	}}
}

func (p *Presenter) onPrompts(ctx context.Context, ps []Prompt) {
	d, _ := services.DeliveryOf(ctx)
	p.mu.Lock()
	defer p.mu.Unlock()
	if d.Kind == services.DeliveryHydration {
		p.hydrated++
	}
	for _, x := range ps[min(len(p.prompts), len(ps)):] {
		p.print("%s: the session accepted the prompt of %s (%s)", p.Name, x.ReviewID, x.SubmissionID)
	}
	p.prompts = ps
	p.notify()
}

// review is the observer task of one review: it starts with both states hydrated,
// opens the panel once, renders every activity, and runs the user's actions until
// the review closes.
func (p *Presenter) review(ctx context.Context, id string, r *Review) error {
	doc, _ := r.Document.Value()
	p.mu.Lock()
	p.tasks[id]++
	n := p.tasks[id]
	p.facades[id] = append(p.facades[id], r)
	pn := &Panel{Task: n, Files: len(doc.Patch.Files)}
	p.panels[id] = pn
	p.note(Seen{What: "open", Review: id, Task: n})
	p.mu.Unlock()
	unsub := r.Activity.Subscribe(func(_ context.Context, a Activity) {
		p.mu.Lock()
		defer p.mu.Unlock()
		pn.Revision, pn.Comments, pn.Status = a.Revision, a.Comments, a.Status
		p.note(Seen{What: "activity", Review: id, Task: n, Revision: a.Revision, Comments: len(a.Comments), Status: a.Status})
	})
	var wg sync.WaitGroup
	defer func() {
		unsub()
		wg.Wait()
		p.mu.Lock()
		if p.panels[id] == pn {
			delete(p.panels, id)
		}
		p.note(Seen{What: "close", Review: id, Task: n})
		p.mu.Unlock()
	}()
	for {
		select {
		case a := <-p.actionChan(id):
			wg.Add(1)
			go func() {
				defer wg.Done()
				// Each action has its own context: the task's ends the panel, not
				// what the user asked for.
				actx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				v, err := a.run(actx, r)
				a.reply <- reply{v, err}
			}()
		case <-ctx.Done():
			return nil
		}
	}
}

func (p *Presenter) actionChan(id string) chan action {
	p.mu.Lock()
	defer p.mu.Unlock()
	ch := p.actions[id]
	if ch == nil {
		ch = make(chan action)
		p.actions[id] = ch
	}
	return ch
}

// do has the panel of review id run f (waiting for a panel while ctx lasts).
func (p *Presenter) do(ctx context.Context, id string, f func(ctx context.Context, r *Review) (any, error)) (any, error) {
	a := action{run: f, reply: make(chan reply, 1)}
	select {
	case p.actionChan(id) <- a:
	case <-ctx.Done():
		return nil, fmt.Errorf("%s: no panel of %s: %w", p.Name, id, ctx.Err())
	}
	r := <-a.reply // the action's own context bounds it
	return r.v, r.err
}

// Create asks the session for a review of its working tree.
func (p *Presenter) Create(ctx context.Context) (string, error) {
	c, err := p.manager.CreateReview.Call(ctx, struct{}{})
	if err != nil {
		return "", fmt.Errorf("%s: createReview: %w", p.Name, err)
	}
	p.print("%s: created review %s", p.Name, c.ReviewID)
	return c.ReviewID, nil
}

// Comment is the user commenting in the panel of review id.
func (p *Presenter) Comment(ctx context.Context, id string, in CommentInput) (int, error) {
	v, err := p.do(ctx, id, func(ctx context.Context, r *Review) (any, error) { return r.AddComment.Call(ctx, in) })
	if err != nil {
		p.print("%s: comment %s on %s refused: %v", p.Name, in.CommentID, id, err)
		return 0, err
	}
	p.print("%s: commented %s on %s (revision %d)", p.Name, in.CommentID, id, v.(Revision).Revision)
	return v.(Revision).Revision, nil
}

// Submit is the user submitting review id from its panel.
func (p *Presenter) Submit(ctx context.Context, id string) (string, error) {
	v, err := p.do(ctx, id, func(ctx context.Context, r *Review) (any, error) { return r.Submit.Call(ctx, struct{}{}) })
	if err != nil {
		p.print("%s: submit of %s failed: %v", p.Name, id, err)
		return "", err
	}
	p.print("%s: submitted %s as %s", p.Name, id, v.(Submitted).SubmissionID)
	return v.(Submitted).SubmissionID, nil
}

// CommentThrough comments through the facade of review id's task-th panel (an old
// generation, say).
func (p *Presenter) CommentThrough(ctx context.Context, id string, task int, in CommentInput) error {
	p.mu.Lock()
	fs := p.facades[id]
	p.mu.Unlock()
	if task < 1 || task > len(fs) {
		return fmt.Errorf("%s: no panel %d of %s", p.Name, task, id)
	}
	_, err := fs[task-1].AddComment.Call(ctx, in)
	return err
}

// View is what a presentation has seen so far.
type View struct {
	Seen     []Seen
	Tasks    map[string]int
	Panels   map[string]Panel
	Prompts  []Prompt
	Hydrated int
}

// View returns a copy of what the presentation has seen.
func (p *Presenter) View() View {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.viewLocked()
}

func (p *Presenter) viewLocked() View {
	v := View{Seen: append([]Seen(nil), p.seen...), Tasks: maps.Clone(p.tasks), Panels: map[string]Panel{},
		Prompts: append([]Prompt(nil), p.prompts...), Hydrated: p.hydrated}
	for id, pn := range p.panels {
		v.Panels[id] = *pn
	}
	return v
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

// note records s and prints it; p.mu is held.
func (p *Presenter) note(s Seen) {
	p.seen = append(p.seen, s)
	switch s.What {
	case "activity":
		p.print("%s: %s#%d at revision %d: %d comments, %s", p.Name, s.Review, s.Task, s.Revision, s.Comments, s.Status)
	default:
		p.print("%s: %s panel %s#%d", p.Name, s.What, s.Review, s.Task)
	}
	p.notify()
}

func (p *Presenter) notify() {
	close(p.changed)
	p.changed = make(chan struct{})
}
