// Command question runs the question plugin pattern (the zlink plugin services
// specification's question tool) on a two-node mesh: the model calls a question tool
// in a session whose worker runs on node-b; every attached presentation shows the
// dialog, the first committed answer settles it for everyone, and the result is
// durable. It prints what each presentation sees while:
//
//   - three invocations run at once (three dialogs, three tasks per presentation; the
//     TUI shows them one at a time, the web client all at once);
//   - P1 (web, node-a) answers one and disconnects: the other two stay pending;
//   - P2 (TUI, node-b) attaches late and finds them in the initial directory;
//   - the worker is replaced before an answer committed (the dialogs come back under new
//     generations; an answer through the old one fails) and after one committed (the
//     replay stages the result from the memo without a dialog);
//   - P1 comes back, and P1 and P2 answer the last dialog at the same moment: it settles
//     once, both are told the same winner;
//   - the worker is replaced once more: the results come back from the store.
//
// Usage: question [-transport stream|loopback]
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"time"

	"github.com/meshnode/meshnode/examples/internal/demo"
	"github.com/meshnode/meshnode/examples/internal/durable"
	"github.com/meshnode/meshnode/services"
	"github.com/meshnode/meshnode/store"
)

func main() {
	transport := flag.String("transport", demo.Stream, "how presentations reach their node: stream or loopback")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if _, err := Run(ctx, os.Stdout, *transport); err != nil {
		fmt.Fprintln(os.Stderr, "question:", err)
		os.Exit(1)
	}
}

// Report is what a run established, for the tests.
type Report struct {
	Session    string
	WorkerNode string
	Seen       map[string][]Seen // by presentation
	// OpenAfterFirst: P1's dialogs still shown once the first invocation settled.
	OpenAfterFirst []string
	// ReplacedFirst is the dialog P2 showed when the worker was replaced before any
	// answer committed, StaleErr what answering through that old generation returned.
	ReplacedFirst string
	StaleErr      error
	// HeldKey is the invocation whose answer committed before the worker was replaced
	// (before its result was staged); HeldTasksAfter how many tasks P2 ever had for it.
	HeldKey        string
	HeldTasksAfter int
	// LastKey is the dialog P1' and P2 answered at once, Concurrent what each got.
	LastKey    string
	Concurrent map[string]Settled
	Results    map[string]Result // as P2 saw them before the last replacement
	Reloaded   map[string]Result // as P2 saw them after it (from the store)
	Record     record            // the session's durable record at the end
}

var questions = []Invocation{
	{ID: "q1", Request: Request{Question: "Which colour?", Options: []Option{{Label: "red"}, {Label: "green"}, {Label: "blue"}}}},
	{ID: "q2", Request: Request{Question: "Ship it?", Options: []Option{{Label: "yes"}, {Label: "no"}}}},
	{ID: "q3", Request: Request{Question: "Name the release", Options: []Option{{Label: "alpha"}, {Label: "beta"}}}},
}

// Run runs the scenario, printing to out, its presentations reaching their nodes over
// transport (demo.Stream or demo.Loopback).
func Run(ctx context.Context, out io.Writer, transport string) (*Report, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var pmu sync.Mutex
	print := func(format string, args ...any) {
		pmu.Lock()
		defer pmu.Unlock()
		fmt.Fprintf(out, format+"\n", args...)
	}
	dir, err := os.MkdirTemp("", "question-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	hold := demo.NewHold()
	log := slog.New(slog.DiscardHandler)
	m, err := demo.Start(ctx, dir, func(st store.Store) []services.Facet {
		return []services.Facet{SessionFacet(st, &Hooks{AfterCommit: hold.Hook}, log)}
	})
	if err != nil {
		return nil, err
	}
	defer m.Close()
	s := &scenario{m: m, print: print, transport: transport, rep: &Report{Seen: map[string][]Seen{}}}
	defer s.disconnect()
	err = s.run(ctx, hold)
	for _, p := range s.ps {
		s.rep.Seen[p.Name] = p.View().Seen
	}
	if err != nil {
		return s.rep, err
	}
	return s.rep, nil
}

type scenario struct {
	m         *demo.Mesh
	print     func(format string, args ...any)
	transport string
	rep       *Report
	ps        []*Presenter
	conns     []*demo.Presentation
}

func (s *scenario) present(ctx context.Context, node int, name, style, session string) (*Presenter, *demo.Presentation, error) {
	p := NewPresenter(name, style, s.print)
	c, err := s.m.Present(ctx, node, name, s.transport, p.Facet())
	if err != nil {
		return nil, nil, err
	}
	s.ps, s.conns = append(s.ps, p), append(s.conns, c)
	if session != "" {
		if err := c.Attach(ctx, session); err != nil {
			return nil, nil, fmt.Errorf("%s: attach %s: %w", name, session, err)
		}
		s.print("%s (%s, node-%c, %s) attached to %s", name, style, 'a'+node, s.transport, session)
	}
	return p, c, nil
}

func (s *scenario) disconnect() {
	for _, c := range s.conns {
		c.Disconnect()
	}
	s.conns = nil
}

func (s *scenario) run(ctx context.Context, hold *demo.Hold) error {
	session, err := s.m.SessionOn(ctx, 1, "question-")
	if err != nil {
		return err
	}
	s.rep.Session, s.rep.WorkerNode = session, s.m.Nodes[1].ID().String()
	s.print("mesh: node-a and node-b, one store; session %s has its worker on node-b", session)

	// Three invocations at once.
	p1, c1, err := s.present(ctx, 0, "P1", Web, "")
	if err != nil {
		return err
	}
	if _, err := c1.Mgmt.Create.Call(ctx, services.CreateArgs{Session: session, Title: "question demo"}); err != nil {
		return fmt.Errorf("create %s: %w", session, err)
	}
	if err := c1.Attach(ctx, session); err != nil {
		return err
	}
	s.print("P1 (web, node-a, %s) attached to %s", s.transport, session)
	s.print("model: invokes q1, q2 and q3 at once")
	errs := make(chan error, len(questions))
	for _, q := range questions {
		go func() { errs <- p1.Invoke(ctx, q) }()
	}
	for range questions {
		if err := <-errs; err != nil {
			return err
		}
	}
	if err := p1.Wait(ctx, "three dialogs shown", func(v View) bool { return len(v.Showing) == 3 }); err != nil {
		return err
	}

	// P1 answers one, the others stay open; then P1 goes without cancelling anything.
	p1.Answer("q1", Response{Kind: Selected, Index: 1})
	if err := p1.Wait(ctx, "q1's result", func(v View) bool { _, ok := v.Results["q1"]; return ok && v.Showing["q1"] == 0 }); err != nil {
		return err
	}
	for k := range p1.View().Showing {
		s.rep.OpenAfterFirst = append(s.rep.OpenAfterFirst, k)
	}
	s.print("P1 disconnects")
	c1.Disconnect()

	// A late presentation on the worker's node finds the pending two.
	p2, _, err := s.present(ctx, 1, "P2", TUI, session)
	if err != nil {
		return err
	}
	if err := p2.Wait(ctx, "q2 and q3, one shown", func(v View) bool {
		return v.Tasks["q2"] == 1 && v.Tasks["q3"] == 1 && len(v.Showing) == 1
	}); err != nil {
		return err
	}
	first := shownKey(p2.View())
	s.rep.ReplacedFirst = first

	// The worker is replaced before any answer committed: the same keys come back
	// under new generations, and the old generation's facade is stale.
	s.print("the worker of %s is replaced (no answer committed)", session)
	if err := s.m.Replace(ctx, session); err != nil {
		return err
	}
	if err := p2.Wait(ctx, "q2 and q3 under new generations", func(v View) bool {
		return v.Tasks["q2"] == 2 && v.Tasks["q3"] == 2 && len(v.Showing) == 1
	}); err != nil {
		return err
	}
	_, s.rep.StaleErr = p2.SubmitThrough(ctx, first, 1, Response{Kind: Selected, Index: 0})
	s.print("P2: an answer to %s through its old generation: %v", first, s.rep.StaleErr)

	// The worker is replaced after an answer committed, before its result was staged:
	// the replay stages it from the memo, with no dialog.
	held := shownKey(p2.View())
	last := "q2"
	if held == "q2" {
		last = "q3"
	}
	s.rep.HeldKey, s.rep.LastKey = held, last
	hold.Arm(held, nil) // never released: the worker goes first
	p2.Answer(held, Response{Kind: Selected, Index: 1})
	if err := hold.Wait(ctx, held+"'s answer to commit"); err != nil {
		return err
	}
	s.print("the worker of %s is replaced (%s's answer committed, its result not staged)", session, held)
	if err := s.m.Replace(ctx, session); err != nil {
		return err
	}
	if err := p2.Wait(ctx, held+"'s result and "+last+" under a third generation", func(v View) bool {
		_, ok := v.Results[held]
		return ok && v.Tasks[last] == 3 && v.Showing[last] == 3
	}); err != nil {
		return err
	}
	s.rep.HeldTasksAfter = p2.View().Tasks[held]

	// P1 comes back; P1' and P2 answer the last dialog at the same moment.
	p1b, _, err := s.present(ctx, 0, "P1'", Web, session)
	if err != nil {
		return err
	}
	if err := p1b.Wait(ctx, last+" shown", func(v View) bool { return v.Showing[last] > 0 }); err != nil {
		return err
	}
	// The dialog stays open until both answers are in (held after the first commit),
	// so the second reaches the instance too, and is told the durable winner.
	s.print("P1' and P2 answer %s at the same moment", last)
	release := make(chan struct{})
	hold.Arm(last, release)
	p1b.Answer(last, Response{Kind: Custom, Answer: "gamma"})
	p2.Answer(last, Response{Kind: Selected, Index: 0})
	s.rep.Concurrent = map[string]Settled{}
	for _, p := range []*Presenter{p1b, p2} {
		if err := p.Wait(ctx, "its answer to "+last+" settled", func(v View) bool { return answered(v, last) != nil }); err != nil {
			return err
		}
		s.rep.Concurrent[p.Name] = *answered(p.View(), last)
	}
	if err := hold.Wait(ctx, last+"'s answer to commit"); err != nil {
		return err
	}
	close(release)
	if err := p2.Wait(ctx, "three results", func(v View) bool { return len(v.Results) == 3 }); err != nil {
		return err
	}
	s.rep.Results = p2.View().Results

	// The results are durable: a new worker publishes them from the store.
	hydrated := p2.View().Hydrated
	s.print("the worker of %s is replaced once more", session)
	if err := s.m.Replace(ctx, session); err != nil {
		return err
	}
	if err := p2.Wait(ctx, "the results again from a new worker", func(v View) bool {
		return v.Hydrated > hydrated && len(v.Results) == 3
	}); err != nil {
		return err
	}
	s.rep.Reloaded = p2.View().Results
	if _, err := durable.New(s.m.Store, recordKind).Get(ctx, session, &s.rep.Record); err != nil {
		return err
	}
	for _, q := range questions {
		s.print("result of %s: %s", q.ID, s.rep.Reloaded[q.ID].Text)
	}
	return nil
}

func shownKey(v View) string {
	for k := range v.Showing {
		return k
	}
	return ""
}

// answered returns how a presentation's answer to key settled (nil: it has none; a
// refused answer settles nothing).
func answered(v View, key string) *Settled {
	for _, s := range v.Seen {
		switch {
		case s.Key != key:
		case s.What == "answered":
			return s.Settled
		case s.What == "failed":
			return &Settled{}
		}
	}
	return nil
}
