package main

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/meshnode/meshnode/services"
	"github.com/meshnode/meshnode/store"
)

// The contract the session and its presentations share (the zlink shared-review
// pattern, in Go): a manager singleton that opens reviews, and the reviews, keyed by
// review id. A client never supplies the patch, an author or a review id.

// Created answers createReview.
type Created struct {
	ReviewID string `json:"reviewId"`
}

// Manager is the singleton review.manager: CreateReview snapshots the working tree's
// diff and opens a review of it; Prompts are the prompts the session accepted (the
// submitted reviews), in order.
type Manager struct {
	CreateReview services.Method[struct{}, Created]
	Prompts      services.State[[]Prompt]
}

// ManagerToken names the manager.
var ManagerToken = services.Define("review.manager", func(d *services.Describer, m *Manager) {
	services.DescribeMethod(d, "createReview", &m.CreateReview)
	services.DescribeState(d, "prompts", &m.Prompts)
})

// Document is a review's immutable document.
type Document struct {
	ReviewID string `json:"reviewId"`
	Patch    Patch  `json:"patch"`
}

// Review statuses.
const (
	Open       = "open"
	Submitting = "submitting"
)

// Activity is a review's live part: its comments, and whether it is being submitted.
// Revision is the application's own (it grows with every change of the review), never
// a storage sequence.
type Activity struct {
	Revision int       `json:"revision"`
	Comments []Comment `json:"comments"`
	Status   string    `json:"status"`
}

// CommentInput is what a client says about a line: CommentID is an idempotency key
// (stable across retries; it grants nothing), Side "old" or "new".
type CommentInput struct {
	CommentID string `json:"commentId"`
	Path      string `json:"path"`
	Side      string `json:"side"`
	Line      int    `json:"line"`
	Body      string `json:"body"`
}

// Author is who wrote a comment: the authenticated identity of the call.
type Author struct {
	UserID      string `json:"userId"`
	DisplayName string `json:"displayName"`
}

// Comment is a stored comment.
type Comment struct {
	CommentInput
	Author    Author `json:"author"`
	CreatedAt string `json:"createdAt"`
}

// Revision answers addComment.
type Revision struct {
	Revision int `json:"revision"`
}

// Submitted answers submit: the review's submission (the same for every submitter).
type Submitted struct {
	SubmissionID string `json:"submissionId"`
}

// Review is one review instance.
type Review struct {
	Document   services.State[Document]
	Activity   services.State[Activity]
	AddComment services.Method[CommentInput, Revision]
	Submit     services.Method[struct{}, Submitted]
}

// ReviewsToken names the keyed reviews.
var ReviewsToken = services.Define("review.diff", func(d *services.Describer, r *Review) {
	services.DescribeState(d, "document", &r.Document)
	services.DescribeState(d, "activity", &r.Activity)
	services.DescribeMethod(d, "addComment", &r.AddComment)
	services.DescribeMethod(d, "submit", &r.Submit)
})

// CodeReviewClosed: a comment (or a submit) for a review frozen for submission.
const CodeReviewClosed = "review_closed"

// Hooks let a test (and the example's main) stop a submission where a crash or a
// concurrent caller matters. Each runs under the session's context (it ends with the
// worker).
type Hooks struct {
	AfterFreeze  func(ctx context.Context, reviewID string) // frozen, the prompt not enqueued
	AfterEnqueue func(ctx context.Context, reviewID string) // enqueued, the record not completed
}

// SessionFacet is the shared-review plugin's session facet. Its records (the reviews,
// the prompt queue) are in st under the session's id; source snapshots the working
// tree.
func SessionFacet(st store.Store, source func(context.Context) (Patch, error), hooks *Hooks, log *slog.Logger) services.Facet {
	return services.Facet{ID: "review.session", Setup: func(env *services.Env) {
		s := &sessionFacet{
			recs:    newRecords(st, env.HostName()),
			queue:   newPromptQueue(st, env.HostName()),
			source:  source,
			reviews: services.ProvideMany(env, ReviewsToken),
			prompts: services.NewState([]Prompt{}),
			exposed: map[string]*exposed{},
			hooks:   hooks,
			log:     log,
		}
		s.ctx, s.cancel = context.WithCancel(context.Background())
		services.Provide(env, ManagerToken, &Manager{
			CreateReview: services.Task(s.create),
			Prompts:      s.prompts,
		})
		env.OnActivate(s.recover)
		env.Own(func(context.Context) error {
			s.cancel()
			s.wg.Wait()
			return nil
		})
	}}
}

type sessionFacet struct {
	recs    *records
	queue   *promptQueue
	source  func(context.Context) (Patch, error)
	reviews *services.Instances[Review]
	prompts *services.MutableState[[]Prompt]
	hooks   *Hooks
	log     *slog.Logger

	ctx    context.Context // the session's work: ends with the worker
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	exposed map[string]*exposed
}

// exposed is an open review's instance in this worker.
type exposed struct {
	activity *services.MutableState[Activity]
	close    func()
	pmu      sync.Mutex // publish: one at a time, revisions only grow
}

// publish shows next unless the review's activity is at a later revision already
// (commits and their publications of concurrent callers may finish out of order).
func (e *exposed) publish(ctx context.Context, next Activity) {
	e.pmu.Lock()
	defer e.pmu.Unlock()
	if cur, _ := e.activity.Value(); next.Revision > cur.Revision {
		_ = e.activity.Set(ctx, next)
	}
}

func (s *sessionFacet) create(ctx context.Context, _ struct{}) (Created, error) {
	patch, err := s.source(ctx)
	if err != nil {
		return Created{}, fmt.Errorf("review: snapshot the working tree: %w", err)
	}
	rec, err := s.recs.create(ctx, patch)
	if err != nil {
		return Created{}, err
	}
	if err := s.expose(rec); err != nil {
		return Created{}, err
	}
	return Created{ReviewID: rec.ID}, nil
}

// recover rebuilds the session's reviews from their records: an open one is exposed
// again (a new generation of its key), a frozen one has its submission finished.
func (s *sessionFacet) recover(ctx context.Context) error {
	prompts, err := s.queue.list(ctx)
	if err != nil {
		return err
	}
	if err := s.prompts.Set(ctx, prompts); err != nil {
		return err
	}
	pending, err := s.recs.listPending(ctx)
	if err != nil {
		return err
	}
	for _, rec := range pending {
		if rec.Submission == nil {
			if err := s.expose(rec); err != nil {
				return err
			}
			continue
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if err := s.finish(s.ctx, rec.ID, *rec.Submission); err != nil && s.ctx.Err() == nil {
				s.log.Error("review: a submission did not finish", "review", rec.ID, "err", err)
			}
		}()
	}
	return nil
}

func (s *sessionFacet) expose(rec *reviewRecord) error {
	id := rec.ID
	e := &exposed{activity: services.NewState(rec.activity())}
	closeIt, err := s.reviews.Add(id, &Review{
		Document: services.NewState(Document{ReviewID: id, Patch: rec.Patch}),
		Activity: e.activity,
		AddComment: services.Task(func(ctx context.Context, in CommentInput) (Revision, error) {
			c, _ := services.ClientOf(ctx)
			author := Author{UserID: c.ID, DisplayName: c.ID}
			rec, err := s.recs.addComment(ctx, id, author, in) // commits, then publishes
			if err != nil {
				return Revision{}, err
			}
			e.publish(ctx, rec.activity())
			return Revision{Revision: rec.Revision}, nil
		}),
		Submit: services.Task(func(ctx context.Context, _ struct{}) (Submitted, error) {
			rec, err := s.recs.freeze(ctx, id)
			if err != nil {
				return Submitted{}, err
			}
			e.publish(ctx, rec.activity())
			// The rest is the session's, not the caller's: a submitter that goes
			// does not leave a frozen review behind in this worker.
			done := make(chan error, 1)
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				done <- s.finish(s.ctx, id, *rec.Submission)
			}()
			select {
			case err := <-done:
				if err != nil && s.ctx.Err() != nil {
					// The worker is going: the next one finishes the submission.
					return Submitted{}, services.Errorf(services.CodeSessionUnavailable, "the session's worker stopped while submitting %s: its next worker finishes it", id)
				}
				if err != nil {
					return Submitted{}, err
				}
			case <-ctx.Done():
				return Submitted{}, ctx.Err()
			}
			return Submitted{SubmissionID: rec.Submission.ID}, nil
		}),
	})
	if err != nil {
		return fmt.Errorf("review: expose %s: %w", id, err)
	}
	e.close = closeIt
	s.mu.Lock()
	s.exposed[id] = e
	s.mu.Unlock()
	return nil
}

// finish hands a frozen review's prompt to the session once, completes its record,
// and closes its instance: every step idempotent, so a submit that runs it again (a
// concurrent submitter, a recovery) changes nothing that was done.
func (s *sessionFacet) finish(ctx context.Context, id string, sub Submission) error {
	if s.hooks != nil && s.hooks.AfterFreeze != nil {
		s.hooks.AfterFreeze(ctx, id)
	}
	prompts, err := s.queue.enqueueOnce(ctx, Prompt{SubmissionID: sub.ID, ReviewID: id, Text: sub.Prompt})
	if err != nil {
		return err
	}
	_ = s.prompts.Set(ctx, prompts)
	if s.hooks != nil && s.hooks.AfterEnqueue != nil {
		s.hooks.AfterEnqueue(ctx, id)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.recs.complete(ctx, id, sub.ID); err != nil {
		return err
	}
	s.mu.Lock()
	e := s.exposed[id]
	delete(s.exposed, id)
	s.mu.Unlock()
	if e != nil {
		e.close()
	}
	return nil
}

// reviewClosed is the typed error of a review frozen for submission (or gone).
func reviewClosed(id string) error {
	return services.Errorf(CodeReviewClosed, "review %s is submitted", id)
}
