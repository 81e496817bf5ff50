package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"

	"github.com/meshnode/meshnode/examples/internal/durable"
	"github.com/meshnode/meshnode/services"
	"github.com/meshnode/meshnode/store"
)

// The contract the session and its presentations share (the zlink question plugin's,
// in Go): a keyed dialog per tool invocation, and the tool itself, which the model
// calls (in this example, a presentation stands in for the model).

// Option is one answer a question offers.
type Option struct {
	Label       string  `json:"label"`
	Description *string `json:"description"`
}

// Request is what a dialog asks.
type Request struct {
	Question string   `json:"question"`
	Options  []Option `json:"options"`
}

// Response kinds.
const (
	Selected  = "selected"
	Custom    = "custom"
	Cancelled = "cancelled"
)

// Response is an answer: one of selected{index}, custom{answer} or cancelled.
type Response struct {
	Kind   string `json:"kind"`
	Index  int    `json:"index,omitempty"`
	Answer string `json:"answer,omitempty"`
}

// Settled answers submitAnswer: the durable winner (the first answer committed, for
// every caller) and whether it was this call's.
type Settled struct {
	Winner Response `json:"winner"`
	Won    bool     `json:"won"`
}

// Dialog is one question instance, keyed by the tool invocation's id.
type Dialog struct {
	Request      services.State[Request]
	SubmitAnswer services.Method[Response, Settled]
}

// DialogsToken names the keyed dialogs.
var DialogsToken = services.Define("question.dialog", func(d *services.Describer, q *Dialog) {
	services.DescribeState(d, "request", &q.Request)
	services.DescribeMethod(d, "submitAnswer", &q.SubmitAnswer)
})

// Invocation is a call of the question tool.
type Invocation struct {
	ID      string  `json:"id"`
	Request Request `json:"request"`
}

// Details are the tool result's details.
type Details struct {
	Question string   `json:"question"`
	Options  []string `json:"options"`
	Answer   *string  `json:"answer"`
	Custom   bool     `json:"custom"`
}

// Result is a settled tool result: its text for the model, and its details.
type Result struct {
	Text    string  `json:"text"`
	Details Details `json:"details"`
}

// Tools is the session's question tool: Invoke starts an invocation (it returns at
// once; the invocation belongs to the session, not to whoever invoked it), Results
// has the settled results by invocation id.
type Tools struct {
	Invoke  services.Method[Invocation, struct{}]
	Results services.State[map[string]Result]
}

// ToolsToken names the tool.
var ToolsToken = services.Define("question.tools", func(d *services.Describer, t *Tools) {
	services.DescribeMethod(d, "invoke", &t.Invoke)
	services.DescribeState(d, "results", &t.Results)
})

// The durable record of a session's invocations, one store record per session (a
// compare-and-set on it is the session's mutation line). An invocation's record holds
// its request (what the harness persisted of the tool's arguments), its answer memo
// (pi.question.answer: the first committed answer) until the result is staged, and
// the staged result (outcome_ready), which replaces the memo in the same write.
type record struct {
	Invocations map[string]*invocation `json:"invocations"`
}

type invocation struct {
	Request Request   `json:"request"`
	Answer  *Response `json:"answer,omitempty"`
	Outcome *Result   `json:"outcome,omitempty"`
}

// recordKind is the store kind of the records: the example's own name.
const recordKind = "example.question"

// Hooks let a test (and the example's main) interrupt an invocation where a crash
// matters.
type Hooks struct {
	// AfterCommit runs once an invocation's answer is durable, before its result is
	// staged; a worker replaced while it runs has committed but not staged.
	AfterCommit func(ctx context.Context, invocation string)
}

// SessionFacet is the question plugin's session facet: it provides the tool and owns
// the dialogs. Its records are in st, under the session's id (the worker host's name).
func SessionFacet(st store.Store, hooks *Hooks, log *slog.Logger) services.Facet {
	return services.Facet{ID: "question.session", Setup: func(env *services.Env) {
		s := &sessionFacet{
			session: env.HostName(),
			recs:    durable.New(st, recordKind),
			dialogs: services.ProvideMany(env, DialogsToken),
			results: services.NewState(map[string]Result{}),
			running: map[string]bool{},
			hooks:   hooks,
			log:     log,
		}
		s.ctx, s.cancel = context.WithCancel(context.Background())
		services.Provide(env, ToolsToken, &Tools{
			Invoke:  services.Func(s.invoke),
			Results: s.results,
		})
		// Activation is recovery: every invocation without a staged result runs again
		// (safe to replay: its memo says whether it was answered).
		env.OnActivate(s.recover)
		// The session's invocations end with the worker (deactivated, replaced,
		// moved): without writing anything (an invocation's cancellation is not
		// durable), so the next activation replays them.
		env.Own(func(context.Context) error {
			s.cancel()
			s.wg.Wait()
			return nil
		})
	}}
}

type sessionFacet struct {
	session string
	recs    *durable.Records
	dialogs *services.Instances[Dialog]
	results *services.MutableState[map[string]Result]
	hooks   *Hooks
	log     *slog.Logger

	ctx    context.Context // the session's work: ends with the worker
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	running map[string]bool // invocations executing in this worker
}

func (s *sessionFacet) invoke(ctx context.Context, inv Invocation) (struct{}, error) {
	if inv.ID == "" {
		return struct{}{}, services.Errorf(services.CodeInvalidArguments, "an invocation needs an id")
	}
	if _, err := durable.Update(ctx, s.recs, s.session, func(r record, _ bool) (record, bool, error) {
		if r.Invocations == nil {
			r.Invocations = map[string]*invocation{}
		}
		if _, ok := r.Invocations[inv.ID]; !ok {
			r.Invocations[inv.ID] = &invocation{Request: inv.Request}
		}
		return r, false, nil
	}); err != nil {
		return struct{}{}, fmt.Errorf("question: record invocation %s: %w", inv.ID, err)
	}
	s.start(inv.ID, inv.Request)
	return struct{}{}, nil
}

func (s *sessionFacet) recover(ctx context.Context) error {
	var r record
	if _, err := s.recs.Get(ctx, s.session, &r); err != nil {
		return fmt.Errorf("question: recover session %s: %w", s.session, err)
	}
	results := map[string]Result{}
	ids := make([]string, 0, len(r.Invocations))
	for id, inv := range r.Invocations {
		if inv.Outcome != nil {
			results[id] = *inv.Outcome
		} else {
			ids = append(ids, id)
		}
	}
	if err := s.results.Set(ctx, results); err != nil {
		return err
	}
	sort.Strings(ids)
	for _, id := range ids {
		s.start(id, r.Invocations[id].Request)
	}
	return nil
}

// start runs invocation id, unless it runs already: the invocation belongs to the
// session (its goroutine to the facet), not to the call that started it.
func (s *sessionFacet) start(id string, req Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running[id] || s.ctx.Err() != nil {
		return
	}
	s.running[id] = true
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer func() {
			s.mu.Lock()
			delete(s.running, id)
			s.mu.Unlock()
		}()
		if err := s.execute(s.ctx, id, req); err != nil && s.ctx.Err() == nil {
			s.log.Error("question: an invocation failed", "session", s.session, "invocation", id, "err", err)
		}
	}()
}

// settlement is what a dialog's first committed answer resolves the invocation with.
type settlement struct {
	resp Response
	err  error
}

// execute is the question tool: it adds the dialog, waits for the first committed
// answer, and stages the result.
func (s *sessionFacet) execute(ctx context.Context, id string, req Request) error {
	if len(req.Options) == 0 {
		return s.stage(ctx, id, Result{Text: "no options", Details: details(req, nil)})
	}
	// A replay after the answer committed: stage from the memo, adding no dialog.
	var r record
	if _, err := s.recs.Get(ctx, s.session, &r); err != nil {
		return fmt.Errorf("question: read invocation %s: %w", id, err)
	}
	if inv := r.Invocations[id]; inv != nil && inv.Answer != nil {
		return s.stage(ctx, id, resultOf(req, *inv.Answer))
	}
	done := make(chan settlement, 1) // the one-shot completion
	var once sync.Once
	resolve := func(st settlement) { once.Do(func() { done <- st }) }
	closeDialog, err := s.dialogs.Add(id, &Dialog{
		Request: services.NewState(req),
		SubmitAnswer: services.Func(func(ctx context.Context, resp Response) (Settled, error) {
			if err := valid(req, resp); err != nil {
				return Settled{}, err
			}
			winner, err := s.memoOnce(ctx, id, resp)
			if err != nil {
				resolve(settlement{err: err}) // the tool's wait rejects, it does not hang
				return Settled{}, err
			}
			resolve(settlement{resp: winner})
			return Settled{Winner: winner, Won: winner == resp}, nil
		}),
	})
	if err != nil {
		return fmt.Errorf("question: add dialog %s: %w", id, err)
	}
	defer closeDialog() // the single cleanup path: answered, cancelled or failed
	var st settlement
	select {
	case st = <-done:
	case <-ctx.Done():
		return ctx.Err() // no durable cancellation: a replay asks again
	}
	if st.err != nil {
		return st.err
	}
	if s.hooks != nil && s.hooks.AfterCommit != nil {
		s.hooks.AfterCommit(ctx, id)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return s.stage(ctx, id, resultOf(req, st.resp))
}

// memoOnce commits resp as invocation id's answer unless one was committed, and
// returns the durable winner: one atomic read-or-write of the session's record, so
// concurrent answers (from any presentation, through any worker) settle once.
func (s *sessionFacet) memoOnce(ctx context.Context, id string, resp Response) (Response, error) {
	var winner Response
	_, err := durable.Update(ctx, s.recs, s.session, func(r record, _ bool) (record, bool, error) {
		inv := r.Invocations[id]
		switch {
		case inv == nil || inv.Outcome != nil:
			return r, false, services.Errorf(services.CodeStaleGeneration, "invocation %s is settled", id)
		case inv.Answer != nil:
			winner = *inv.Answer
		default:
			inv.Answer = &resp
			winner = resp
		}
		return r, false, nil
	})
	if err != nil {
		var se *services.Error
		if errors.As(err, &se) {
			return Response{}, se
		}
		return Response{}, fmt.Errorf("question: commit the answer of %s: %w", id, err)
	}
	return winner, nil
}

// stage writes the result as the invocation's outcome, deleting its memo in the same
// write, and publishes it.
func (s *sessionFacet) stage(ctx context.Context, id string, res Result) error {
	r, err := durable.Update(ctx, s.recs, s.session, func(r record, _ bool) (record, bool, error) {
		inv := r.Invocations[id]
		if inv == nil {
			return r, false, fmt.Errorf("question: invocation %s has no record", id)
		}
		if inv.Outcome == nil {
			inv.Outcome, inv.Answer = &res, nil
		}
		return r, false, nil
	})
	if err != nil {
		return fmt.Errorf("question: stage the result of %s: %w", id, err)
	}
	results := map[string]Result{}
	for k, inv := range r.Invocations {
		if inv.Outcome != nil {
			results[k] = *inv.Outcome
		}
	}
	return s.results.Set(ctx, results)
}

func valid(req Request, resp Response) error {
	switch resp.Kind {
	case Selected:
		if resp.Index < 0 || resp.Index >= len(req.Options) {
			return services.Errorf(services.CodeInvalidArguments, "option %d of %d", resp.Index, len(req.Options))
		}
	case Custom:
		if resp.Answer == "" {
			return services.Errorf(services.CodeInvalidArguments, "a custom answer is empty")
		}
	case Cancelled:
	default:
		return services.Errorf(services.CodeInvalidArguments, "response kind %q", resp.Kind)
	}
	return nil
}

func resultOf(req Request, resp Response) Result {
	switch resp.Kind {
	case Custom:
		a := resp.Answer
		d := details(req, &a)
		d.Custom = true
		return Result{Text: "User wrote: " + a, Details: d}
	case Selected:
		if resp.Index >= 0 && resp.Index < len(req.Options) { // checked again
			a := req.Options[resp.Index].Label
			return Result{Text: fmt.Sprintf("User selected: %d. %s", resp.Index+1, a), Details: details(req, &a)}
		}
	}
	return Result{Text: "cancelled", Details: details(req, nil)}
}

func details(req Request, answer *string) Details {
	d := Details{Question: req.Question, Answer: answer, Options: []string{}}
	for _, o := range req.Options {
		d.Options = append(d.Options, o.Label)
	}
	return d
}
