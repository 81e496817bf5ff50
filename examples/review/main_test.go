package main

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/meshnode/meshnode/examples/internal/demo"
	"github.com/meshnode/meshnode/services"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The tests drive the example's own scenario (Run, what main runs), once per
// transport: its presentations reach their nodes over STREAM, or in process; the
// worker runs on node-b, P1 and P1' on node-a. Each R test checks what its row
// requires of the run.

var runs = demo.Runs[*Report]{Run: Run}

func runOf(t *testing.T, transport string) (*Report, string) {
	t.Helper()
	rep, out, err := runs.Get(transport)
	if err != nil {
		t.Fatalf("the %s run failed: %v\n%s", transport, err, out)
	}
	return rep, out
}

func transports(t *testing.T, f func(t *testing.T, rep *Report, out string)) {
	for _, tr := range []string{demo.Stream, demo.Loopback} {
		t.Run(tr, func(t *testing.T) {
			rep, out := runOf(t, tr)
			f(t, rep, out)
		})
	}
}

// panels returns what presentation p saw of review id's panels, in order, as
// "open#1", "1:open#1" (an activity: revision, status), "close#1".
func panels(rep *Report, p, id string) []string {
	var out []string
	for _, s := range rep.Seen[p] {
		if s.Review != id {
			continue
		}
		n := "#" + string(rune('0'+s.Task))
		if s.What == "activity" {
			out = append(out, string(rune('0'+s.Revision))+":"+s.Status+n)
		} else {
			out = append(out, s.What+n)
		}
	}
	return out
}

func code(err error) string {
	var se *services.Error
	if errors.As(err, &se) {
		return se.Code
	}
	return ""
}

// R37: concurrent instances: two reviews opened at once are two instances, each with
// its own panel in the presentation and its own activity.
func TestR37_ReviewConcurrentInstances(t *testing.T) {
	transports(t, func(t *testing.T, rep *Report, _ string) {
		if len(rep.Opened) != 2 || rep.Opened[0] == rep.Opened[1] {
			t.Fatalf("reviews opened: %v", rep.Opened)
		}
		for _, id := range rep.Opened {
			if got := panels(rep, "P1", id); !slices.Equal(got, []string{"open#1", "0:open#1", "1:open#1", "close#1"}) {
				t.Errorf("P1's panel of %s: %v, want it opened, its own comment rendered, closed at the disconnect", id, got)
			}
		}
		// Both were open at once.
		open, most := 0, 0
		for _, s := range rep.Seen["P1"] {
			switch s.What {
			case "open":
				open++
			case "close":
				open--
			}
			most = max(most, open)
		}
		if most != 2 {
			t.Errorf("P1 had at most %d panels open at once, want 2", most)
		}
	})
}

// R38: a presentation that attaches late finds the open reviews in the initial
// directory, each panel with the comments already made (its activity hydrated before
// the task started), and none that was submitted.
func TestR38_ReviewLatePresentationAttachment(t *testing.T) {
	transports(t, func(t *testing.T, rep *Report, _ string) {
		for _, id := range rep.Opened {
			if got := panels(rep, "P2", id); len(got) < 2 || !slices.Equal(got[:2], []string{"open#1", "1:open#1"}) {
				t.Errorf("P2's panel of %s: %v, want it opened at revision 1", id, got)
			}
		}
		if got := panels(rep, "P1'", rep.Interrupted); len(got) != 0 {
			t.Errorf("P1' (late) saw the submitted %s: %v", rep.Interrupted, got)
		}
		if got := panels(rep, "P1'", rep.Shared); len(got) < 2 || !slices.Equal(got[:2], []string{"open#1", "1:open#1"}) {
			t.Errorf("P1' panel of %s: %v", rep.Shared, got)
		}
	})
}

// R39: a presentation's disconnect closes its panels and cancels nothing of the
// session's: the reviews it opened stay open (generation 1 is what P2 found), and a
// submission whose caller went is finished by the session.
func TestR39_ReviewDisconnectDoesNotCancelSessionWork(t *testing.T) {
	transports(t, func(t *testing.T, rep *Report, _ string) {
		if rep.StaleErr == nil || !strings.Contains(rep.StaleErr.Error(), "generation 1 ") {
			t.Errorf("the review P2 found first was not generation 1: %v", rep.StaleErr)
		}
		if len(rep.Prompts) != 2 {
			t.Errorf("prompts: %d, want 2: the submission whose caller lost its worker was finished", len(rep.Prompts))
		}
	})
}

// R40: worker replacement: the reviews come back from their records under new
// generations (their panels reopen with the same activity, a comment through an old
// generation fails stale_generation); a submission interrupted after its prompt was
// accepted is finished by the new worker, without a second prompt and without the
// review coming back, and its caller gets a typed error.
func TestR40_ReviewWorkerReplacement(t *testing.T) {
	transports(t, func(t *testing.T, rep *Report, _ string) {
		want := []string{"open#1", "1:open#1", "close#1", "open#2", "1:open#2"}
		for _, id := range rep.Opened {
			if got := panels(rep, "P2", id); len(got) < len(want) || !slices.Equal(got[:len(want)], want) {
				t.Errorf("P2's panel of %s: %v, want %v first", id, got, want)
			}
		}
		if code(rep.StaleErr) != services.CodeStaleGeneration {
			t.Errorf("a comment through an old generation: %v, want %s", rep.StaleErr, services.CodeStaleGeneration)
		}
		if code(rep.InterruptedErr) != services.CodeSessionUnavailable {
			t.Errorf("the interrupted submit: %v, want %s", rep.InterruptedErr, services.CodeSessionUnavailable)
		}
		got := panels(rep, "P2", rep.Interrupted)
		if slices.Contains(got, "open#3") || !slices.Contains(got, "2:submitting#2") {
			t.Errorf("P2's panel of the interrupted %s: %v, want it submitting at #2 and never reopened", rep.Interrupted, got)
		}
		var n int
		for _, p := range rep.Prompts {
			if p.ReviewID == rep.Interrupted {
				n++
			}
		}
		if n != 1 {
			t.Errorf("prompts of %s: %d, want exactly 1", rep.Interrupted, n)
		}
	})
}

// R41: durable settlement: two comments at once both commit (distinct revisions); two
// submits at once freeze once (one submission id for both, one prompt with exactly
// the comments committed before the freeze); a comment after the freeze is refused
// review_closed; the accepted prompts come back from the store, and no record is left.
func TestR41_ReviewDurableSettlement(t *testing.T) {
	transports(t, func(t *testing.T, rep *Report, out string) {
		revs := []int{rep.Revisions["P1'"], rep.Revisions["P2"]}
		slices.Sort(revs)
		if !slices.Equal(revs, []int{2, 3}) {
			t.Errorf("revisions of the concurrent comments: %v, want [2 3]", revs)
		}
		a, b := rep.Submissions["P1'"], rep.Submissions["P2"]
		if a == "" || a != b {
			t.Errorf("concurrent submits got %q and %q, want one submission", a, b)
		}
		if code(rep.LateErr) != CodeReviewClosed {
			t.Errorf("a comment after the freeze: %v, want %s", rep.LateErr, CodeReviewClosed)
		}
		var shared []Prompt
		for _, p := range rep.Prompts {
			if p.ReviewID == rep.Shared {
				shared = append(shared, p)
			}
		}
		if len(shared) != 1 || shared[0].SubmissionID != a {
			t.Fatalf("prompts of %s: %+v, want one of submission %s", rep.Shared, shared, a)
		}
		text := shared[0].Text
		for _, want := range []string{"Comments (3):", "say hello to whom?", "P1' was here", "P2 was here"} {
			if !strings.Contains(text, want) {
				t.Errorf("the prompt of %s lacks %q:\n%s", rep.Shared, want, text)
			}
		}
		// The author is the call's authenticated identity, never the client's say
		// (in process, a presentation's identity is its name).
		if rep.Transport == demo.Loopback && (!strings.Contains(text, "(P2): P2 was here") || !strings.Contains(text, "(P1'): P1' was here")) {
			t.Errorf("the prompt of %s does not name the authors by identity:\n%s", rep.Shared, text)
		}
		if strings.Contains(text, "one more thing") {
			t.Errorf("the prompt of %s has the comment refused after the freeze", rep.Shared)
		}
		if !slices.Equal(rep.Reloaded, rep.Prompts) {
			t.Errorf("prompts from the store %+v, were %+v", rep.Reloaded, rep.Prompts)
		}
		if len(rep.Pending) != 0 {
			t.Errorf("records left: %v", rep.Pending)
		}
		if !strings.Contains(out, "prompt of "+rep.Shared+" ("+a+")") {
			t.Errorf("the example does not print the prompt of %s", rep.Shared)
		}
	})
}
