// Command review runs the shared-review pattern (the zlink plugin services
// specification's collaborative diff review) on a two-node mesh: a presentation asks
// the session (its worker on node-b) to review the working-tree diff; every attached
// presentation renders the review, anyone may comment or submit, and submitting hands
// the whole review to the session as one prompt. It prints what each presentation
// sees while:
//
//   - P1 (node-a) opens two reviews at once and comments on each, then disconnects:
//     the reviews stay open;
//   - P2 (node-b) attaches late and finds both, with their comments;
//   - the worker is replaced: the reviews come back from their records under new
//     generations (a comment through an old one fails), and again in the middle of a
//     submission, which the new worker finishes without a second prompt;
//   - P1 comes back; P1 and P2 comment at the same moment (both kept), then submit at
//     the same moment: one prompt, one submission id for both, and a comment that
//     arrives after the freeze is refused review_closed;
//   - the worker is replaced once more: the accepted prompts come back from the store.
//
// Usage: review [-transport stream|loopback]
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
	"github.com/meshnode/meshnode/services"
	"github.com/meshnode/meshnode/store"
)

func main() {
	transport := flag.String("transport", demo.Stream, "how presentations reach their node: stream or loopback")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if _, err := Run(ctx, os.Stdout, *transport); err != nil {
		fmt.Fprintln(os.Stderr, "review:", err)
		os.Exit(1)
	}
}

// workingTree is the example's diff source: the working tree's changes.
func workingTree(context.Context) (Patch, error) {
	return Patch{Files: []File{
		{Path: "main.go", Old: []string{"func main() {", "\tfmt.Println(\"hi\")", "}"},
			New: []string{"func main() {", "\tfmt.Println(\"hello\")", "\tos.Exit(run())", "}"}},
		{Path: "README.md", Old: []string{"# demo"}, New: []string{"# demo", "", "Run it."}},
	}}, nil
}

// Report is what a run established, for the tests.
type Report struct {
	Session   string
	Transport string
	Seen      map[string][]Seen // by presentation
	// Opened: P1's reviews, open at once, with a comment each.
	Opened []string
	// StaleErr: a comment through a review's generation before the replacement.
	StaleErr error
	// Interrupted is the review submitted when the worker was replaced after its
	// prompt was accepted (before its record was completed); InterruptedErr what that
	// submit returned.
	Interrupted    string
	InterruptedErr error
	// Shared is the review P1' and P2 both commented on and submitted: the revisions
	// their comments got, the submission ids both submits returned, and what the
	// comment after the freeze got.
	Shared      string
	Revisions   map[string]int
	Submissions map[string]string
	LateErr     error
	Prompts     []Prompt // as P2 saw them before the last replacement
	Reloaded    []Prompt // as P2 saw them after it (from the store)
	Pending     []string // reviews with records at the end
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
	dir, err := os.MkdirTemp("", "review-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	freeze, enqueue := demo.NewHold(), demo.NewHold()
	log := slog.New(slog.DiscardHandler)
	var st store.Store
	m, err := demo.Start(ctx, dir, func(s store.Store) []services.Facet {
		st = s
		return []services.Facet{SessionFacet(s, workingTree, &Hooks{AfterFreeze: freeze.Hook, AfterEnqueue: enqueue.Hook}, log)}
	})
	if err != nil {
		return nil, err
	}
	defer m.Close()
	s := &scenario{m: m, st: st, print: print, transport: transport, rep: &Report{Transport: transport, Seen: map[string][]Seen{}}}
	defer s.disconnect()
	err = s.run(ctx, freeze, enqueue)
	for _, p := range s.ps {
		s.rep.Seen[p.Name] = p.View().Seen
	}
	return s.rep, err
}

type scenario struct {
	m         *demo.Mesh
	st        store.Store
	print     func(format string, args ...any)
	transport string
	rep       *Report
	ps        []*Presenter
	conns     []*demo.Presentation
}

func (s *scenario) present(ctx context.Context, node int, name, session string, create bool) (*Presenter, *demo.Presentation, error) {
	p := NewPresenter(name, s.print)
	c, err := s.m.Present(ctx, node, name, s.transport, p.Facet())
	if err != nil {
		return nil, nil, err
	}
	s.ps, s.conns = append(s.ps, p), append(s.conns, c)
	if create {
		if _, err := c.Mgmt.Create.Call(ctx, services.CreateArgs{Session: session, Title: "review demo"}); err != nil {
			return nil, nil, fmt.Errorf("create %s: %w", session, err)
		}
	}
	if err := c.Attach(ctx, session); err != nil {
		return nil, nil, fmt.Errorf("%s: attach %s: %w", name, session, err)
	}
	s.print("%s (node-%c, %s) attached to %s", name, 'a'+node, s.transport, session)
	return p, c, nil
}

func (s *scenario) disconnect() {
	for _, c := range s.conns {
		c.Disconnect()
	}
	s.conns = nil
}

func comment(id, path, side string, line int, body string) CommentInput {
	return CommentInput{CommentID: id, Path: path, Side: side, Line: line, Body: body}
}

func (s *scenario) run(ctx context.Context, freeze, enqueue *demo.Hold) error {
	session, err := s.m.SessionOn(ctx, 1, "review-")
	if err != nil {
		return err
	}
	s.rep.Session = session
	s.print("mesh: node-a and node-b, one store; session %s has its worker on node-b", session)

	// Two reviews at once, a comment on each.
	p1, c1, err := s.present(ctx, 0, "P1", session, true)
	if err != nil {
		return err
	}
	ids := make([]string, 2)
	errs := make(chan error, 2)
	for i := range ids {
		go func() {
			id, err := p1.Create(ctx)
			if err == nil {
				ids[i] = id
				_, err = p1.Comment(ctx, id, comment("c-"+id, "main.go", "new", 2, "say hello to whom?"))
			}
			errs <- err
		}()
	}
	for range ids {
		if err := <-errs; err != nil {
			return err
		}
	}
	s.rep.Opened = ids
	if err := p1.Wait(ctx, "both panels at revision 1", func(v View) bool {
		return v.Panels[ids[0]].Revision == 1 && v.Panels[ids[1]].Revision == 1
	}); err != nil {
		return err
	}
	s.print("P1 disconnects")
	c1.Disconnect()

	// A late presentation finds both, with their comments.
	p2, _, err := s.present(ctx, 1, "P2", session, false)
	if err != nil {
		return err
	}
	if err := p2.Wait(ctx, "both reviews", func(v View) bool {
		return len(v.Panels[ids[0]].Comments) == 1 && len(v.Panels[ids[1]].Comments) == 1
	}); err != nil {
		return err
	}

	// The worker is replaced: the reviews come back from their records.
	s.print("the worker of %s is replaced", session)
	if err := s.m.Replace(ctx, session); err != nil {
		return err
	}
	if err := p2.Wait(ctx, "both reviews again", func(v View) bool {
		return v.Panels[ids[0]].Task == 2 && v.Panels[ids[1]].Task == 2 &&
			v.Panels[ids[0]].Revision == 1 && v.Panels[ids[1]].Revision == 1
	}); err != nil {
		return err
	}
	s.rep.StaleErr = p2.CommentThrough(ctx, ids[0], 1, comment("c-stale", "main.go", "new", 1, "too late"))
	s.print("P2: a comment through %s's old generation: %v", ids[0], s.rep.StaleErr)

	// The worker is replaced in the middle of a submission: after the session accepted
	// the prompt, before the record was completed. The new worker finishes it.
	interrupted, shared := ids[1], ids[0]
	s.rep.Interrupted, s.rep.Shared = interrupted, shared
	enqueue.Arm(interrupted, nil)
	submitted := make(chan error, 1)
	go func() { _, err := p2.Submit(ctx, interrupted); submitted <- err }()
	if err := enqueue.Wait(ctx, "a submission to reach its hook"); err != nil {
		return err
	}
	s.print("the worker of %s is replaced (%s's prompt accepted, its record not completed)", session, interrupted)
	if err := s.m.Replace(ctx, session); err != nil {
		return err
	}
	s.rep.InterruptedErr = <-submitted
	if err := p2.Wait(ctx, shared+" again, "+interrupted+" finished", func(v View) bool {
		_, open := v.Panels[interrupted]
		return v.Panels[shared].Task == 3 && !open && len(v.Prompts) == 1
	}); err != nil {
		return err
	}

	// P1 comes back. P1' and P2 comment at the same moment, then submit at the same
	// moment, one of them while the other's submission holds after the freeze.
	p1b, _, err := s.present(ctx, 0, "P1'", session, false)
	if err != nil {
		return err
	}
	if err := p1b.Wait(ctx, shared+"'s panel", func(v View) bool { return v.Panels[shared].Revision == 1 }); err != nil {
		return err
	}
	s.rep.Revisions = map[string]int{}
	var mu sync.Mutex
	for i, p := range []*Presenter{p1b, p2} {
		go func() {
			rev, err := p.Comment(ctx, shared, comment(fmt.Sprintf("c-%s-%d", shared, i), "README.md", "new", 3, p.Name+" was here"))
			mu.Lock()
			s.rep.Revisions[p.Name] = rev
			mu.Unlock()
			errs <- err
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			return err
		}
	}
	release := make(chan struct{})
	freeze.Arm(shared, release)
	subs := make(chan error, 1)
	s.rep.Submissions = map[string]string{}
	go func() {
		sub, err := p2.Submit(ctx, shared)
		mu.Lock()
		s.rep.Submissions["P2"] = sub
		mu.Unlock()
		subs <- err
	}()
	if err := freeze.Wait(ctx, "a submission to reach its hook"); err != nil {
		return err
	}
	_, s.rep.LateErr = p1b.Comment(ctx, shared, comment("c-late", "main.go", "old", 1, "one more thing"))
	sub, err := p1b.Submit(ctx, shared)
	if err != nil {
		return err
	}
	s.rep.Submissions["P1'"] = sub
	close(release)
	if err := <-subs; err != nil {
		return err
	}
	if err := p2.Wait(ctx, "two prompts, no panel", func(v View) bool { return len(v.Prompts) == 2 && len(v.Panels) == 0 }); err != nil {
		return err
	}
	s.rep.Prompts = p2.View().Prompts

	// The accepted prompts are durable.
	hydrated := p2.View().Hydrated
	s.print("the worker of %s is replaced once more", session)
	if err := s.m.Replace(ctx, session); err != nil {
		return err
	}
	if err := p2.Wait(ctx, "the prompts from a new worker", func(v View) bool { return v.Hydrated > hydrated && len(v.Prompts) == 2 }); err != nil {
		return err
	}
	s.rep.Reloaded = p2.View().Prompts
	pending, err := newRecords(s.st, session).listPending(ctx)
	if err != nil {
		return err
	}
	for _, r := range pending {
		s.rep.Pending = append(s.rep.Pending, r.ID)
	}
	for _, x := range s.rep.Reloaded {
		s.print("prompt of %s (%s):\n%s", x.ReviewID, x.SubmissionID, x.Text)
	}
	return nil
}
