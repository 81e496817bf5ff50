package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/meshnode/meshnode/examples/internal/durable"
	"github.com/meshnode/meshnode/services"
	"github.com/meshnode/meshnode/store"
)

// Patch is a bounded snapshot of the working tree's diff: each changed file's old and
// new lines.
type Patch struct {
	Files []File `json:"files"`
}

// File is one file of a patch.
type File struct {
	Path string   `json:"path"`
	Old  []string `json:"old"`
	New  []string `json:"new"`
}

// MaxPatchLines bounds a patch: a larger working-tree diff is refused, not cut.
const MaxPatchLines = 10000

func (p Patch) lines() int {
	n := 0
	for _, f := range p.Files {
		n += len(f.Old) + len(f.New)
	}
	return n
}

// anchor checks that a comment's place exists in the patch.
func (p Patch) anchor(in CommentInput) error {
	for _, f := range p.Files {
		if f.Path != in.Path {
			continue
		}
		lines := f.New
		switch in.Side {
		case "new":
		case "old":
			lines = f.Old
		default:
			return services.Errorf(services.CodeInvalidArguments, "side %q: old or new", in.Side)
		}
		if in.Line < 1 || in.Line > len(lines) {
			return services.Errorf(services.CodeInvalidArguments, "%s has no %s line %d", in.Path, in.Side, in.Line)
		}
		return nil
	}
	return services.Errorf(services.CodeInvalidArguments, "the patch does not change %q", in.Path)
}

// Submission is a frozen review's handoff: its id and the prompt built from the patch
// and exactly the comments committed before the freeze.
type Submission struct {
	ID     string `json:"id"`
	Prompt string `json:"prompt"`
}

// reviewRecord is a review's durable record: open (no submission) or
// submission_pending.
type reviewRecord struct {
	ID         string      `json:"id"`
	Patch      Patch       `json:"patch"`
	Revision   int         `json:"revision"`
	Comments   []Comment   `json:"comments"`
	Submission *Submission `json:"submission,omitempty"`
}

func (r *reviewRecord) activity() Activity {
	a := Activity{Revision: r.Revision, Comments: slices.Clone(r.Comments), Status: Open}
	if a.Comments == nil {
		a.Comments = []Comment{}
	}
	if r.Submission != nil {
		a.Status = Submitting
	}
	return a
}

// index lists a session's reviews with records, and numbers new ones.
type index struct {
	Next    int      `json:"next"`
	Reviews []string `json:"reviews"`
}

// records is DiffReviewRecords: a session's reviews in the store, one record per
// review and an index, under kinds of the example's own. addComment, freeze and
// complete each run in the review's region (a FIFO, abortable mutex): each is a
// read-modify-write over several awaits, and two of them interleaved would lose a
// comment or freeze twice. The store's version check on every write would catch a
// writer outside the region (an old worker still finishing a call) as a conflict.
type records struct {
	session string
	reviews *durable.Records
	index   *durable.Records
	regions regions
}

func newRecords(st store.Store, session string) *records {
	return &records{session: session,
		reviews: durable.New(st, "example.review"),
		index:   durable.New(st, "example.review.index"),
		regions: regions{m: map[string]*region{}}}
}

func (r *records) key(id string) string { return r.session + "/" + id }

func (r *records) create(ctx context.Context, patch Patch) (*reviewRecord, error) {
	if n := patch.lines(); n > MaxPatchLines {
		return nil, services.Errorf(services.CodeInvalidArguments, "the diff has %d lines, more than %d", n, MaxPatchLines)
	}
	ix, err := durable.Update(ctx, r.index, r.session, func(ix index, _ bool) (index, bool, error) {
		ix.Next++
		ix.Reviews = append(ix.Reviews, "r"+strconv.Itoa(ix.Next))
		return ix, false, nil
	})
	if err != nil {
		return nil, fmt.Errorf("review: number a review: %w", err)
	}
	rec := &reviewRecord{ID: ix.Reviews[len(ix.Reviews)-1], Patch: patch, Comments: []Comment{}}
	if err := durable.Save(ctx, r.reviews, r.key(rec.ID), 0, rec); err != nil {
		return nil, fmt.Errorf("review: create %s: %w", rec.ID, err)
	}
	return rec, nil
}

// listPending returns the session's reviews with records (open or submission
// pending), in the order they were created.
func (r *records) listPending(ctx context.Context) ([]*reviewRecord, error) {
	var ix index
	if _, err := r.index.Get(ctx, r.session, &ix); err != nil {
		return nil, fmt.Errorf("review: list the reviews: %w", err)
	}
	var out []*reviewRecord
	for _, id := range ix.Reviews {
		rec := &reviewRecord{}
		ok, err := r.reviews.Get(ctx, r.key(id), rec)
		if err != nil {
			return nil, fmt.Errorf("review: read %s: %w", id, err)
		}
		if ok {
			out = append(out, rec)
		}
	}
	return out, nil
}

// load reads review id's record (in its region).
func (r *records) load(ctx context.Context, id string) (*reviewRecord, uint64, error) {
	rec := &reviewRecord{}
	v, ok, err := durable.Load(ctx, r.reviews, r.key(id), rec)
	if err != nil {
		return nil, 0, fmt.Errorf("review: read %s: %w", id, err)
	}
	if !ok {
		return nil, v, nil
	}
	return rec, v, nil
}

// addComment stamps in with its author, drops a duplicate commentId, commits, and
// returns the record as committed.
func (r *records) addComment(ctx context.Context, id string, author Author, in CommentInput) (*reviewRecord, error) {
	if in.CommentID == "" || in.Body == "" {
		return nil, services.Errorf(services.CodeInvalidArguments, "a comment needs a commentId and a body")
	}
	var out *reviewRecord
	err := r.regions.do(ctx, id, func() error {
		rec, v, err := r.load(ctx, id)
		switch {
		case err != nil:
			return err
		case rec == nil || rec.Submission != nil:
			return reviewClosed(id)
		}
		if err := rec.Patch.anchor(in); err != nil {
			return err
		}
		out = rec
		if slices.ContainsFunc(rec.Comments, func(c Comment) bool { return c.CommentID == in.CommentID }) {
			return nil // a retry: committed already
		}
		rec.Comments = append(rec.Comments, Comment{CommentInput: in, Author: author, CreatedAt: time.Now().UTC().Format(time.RFC3339Nano)})
		rec.Revision++
		return durable.Save(ctx, r.reviews, r.key(id), v, rec)
	})
	return out, err
}

// freeze excludes later comments: it stores a submission with the prompt built from
// the patch and the comments committed so far. Idempotent: a frozen review returns
// its submission.
func (r *records) freeze(ctx context.Context, id string) (*reviewRecord, error) {
	var out *reviewRecord
	err := r.regions.do(ctx, id, func() error {
		rec, v, err := r.load(ctx, id)
		switch {
		case err != nil:
			return err
		case rec == nil:
			return reviewClosed(id)
		case rec.Submission != nil:
			out = rec
			return nil
		}
		var b [8]byte
		_, _ = rand.Read(b[:])
		rec.Submission = &Submission{ID: "sub-" + hex.EncodeToString(b[:]), Prompt: prompt(rec)}
		rec.Revision++
		out = rec
		return durable.Save(ctx, r.reviews, r.key(id), v, rec)
	})
	return out, err
}

// complete deletes review id's record if it is frozen with submission sub (and only
// then), and drops it from the index.
func (r *records) complete(ctx context.Context, id, sub string) error {
	err := r.regions.do(ctx, id, func() error {
		rec, v, err := r.load(ctx, id)
		if err != nil || rec == nil || rec.Submission == nil || rec.Submission.ID != sub {
			return err
		}
		return durable.Delete(ctx, r.reviews, r.key(id), v)
	})
	if err != nil {
		return fmt.Errorf("review: complete %s: %w", id, err)
	}
	_, err = durable.Update(ctx, r.index, r.session, func(ix index, _ bool) (index, bool, error) {
		ix.Reviews = slices.DeleteFunc(ix.Reviews, func(x string) bool { return x == id })
		return ix, false, nil
	})
	return err
}

func prompt(rec *reviewRecord) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Review %s of the working-tree diff:\n", rec.ID)
	for _, f := range rec.Patch.Files {
		fmt.Fprintf(&b, "--- %s\n", f.Path)
		for _, l := range f.Old {
			fmt.Fprintf(&b, "-%s\n", l)
		}
		for _, l := range f.New {
			fmt.Fprintf(&b, "+%s\n", l)
		}
	}
	fmt.Fprintf(&b, "Comments (%d):\n", len(rec.Comments))
	for _, c := range rec.Comments {
		fmt.Fprintf(&b, "- %s %s:%d (%s): %s\n", c.Path, c.Side, c.Line, c.Author.DisplayName, c.Body)
	}
	return b.String()
}

// regions are the per-review critical regions: FIFO and abortable (a caller whose
// context ends while queued leaves without running), not reentrant (a region's
// function never takes a region). Idle entries are dropped.
type regions struct {
	mu sync.Mutex
	m  map[string]*region
}

type region struct {
	sem   *semaphore.Weighted
	users int
}

func (rs *regions) do(ctx context.Context, id string, fn func() error) error {
	rs.mu.Lock()
	r := rs.m[id]
	if r == nil {
		r = &region{sem: semaphore.NewWeighted(1)}
		rs.m[id] = r
	}
	r.users++
	rs.mu.Unlock()
	defer func() {
		rs.mu.Lock()
		if r.users--; r.users == 0 {
			delete(rs.m, id)
		}
		rs.mu.Unlock()
	}()
	if err := r.sem.Acquire(ctx, 1); err != nil {
		return err
	}
	defer r.sem.Release(1)
	return fn()
}

// Prompt is a prompt the session accepted.
type Prompt struct {
	SubmissionID string `json:"submissionId"`
	ReviewID     string `json:"reviewId"`
	Text         string `json:"text"`
}

// promptQueue is PromptQueue: the session's accepted prompts, durable.
type promptQueue struct {
	session string
	recs    *durable.Records
}

type queued struct {
	Prompts []Prompt `json:"prompts"`
}

func newPromptQueue(st store.Store, session string) *promptQueue {
	return &promptQueue{session: session, recs: durable.New(st, "example.review.prompts")}
}

// enqueueOnce accepts p durably, unless its submission was accepted already, and
// returns the queue.
func (q *promptQueue) enqueueOnce(ctx context.Context, p Prompt) ([]Prompt, error) {
	out, err := durable.Update(ctx, q.recs, q.session, func(cur queued, _ bool) (queued, bool, error) {
		if !slices.ContainsFunc(cur.Prompts, func(x Prompt) bool { return x.SubmissionID == p.SubmissionID }) {
			cur.Prompts = append(cur.Prompts, p)
		}
		return cur, false, nil
	})
	if err != nil {
		return nil, fmt.Errorf("review: enqueue the prompt of %s: %w", p.ReviewID, err)
	}
	return out.Prompts, nil
}

func (q *promptQueue) list(ctx context.Context) ([]Prompt, error) {
	var cur queued
	if _, err := q.recs.Get(ctx, q.session, &cur); err != nil {
		return nil, fmt.Errorf("review: read the prompts: %w", err)
	}
	if cur.Prompts == nil {
		return []Prompt{}, nil
	}
	return cur.Prompts, nil
}
