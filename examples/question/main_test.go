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
// worker runs on node-b, P1 on node-a. Each R test checks what its row requires of
// the run.

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

// seen returns a presentation's record of key as "what#task" strings, in order.
func seen(rep *Report, p, key string) []string {
	var out []string
	for _, s := range rep.Seen[p] {
		if s.Key == key {
			out = append(out, s.What+"#"+string(rune('0'+s.Task)))
		}
	}
	return out
}

// R37: three concurrent invocations are three instances keyed by invocation id and
// three tasks per presentation; the web presentation shows all three at once, the TUI
// one at a time; settling one closes only its own task.
func TestR37_QuestionConcurrentInstances(t *testing.T) {
	transports(t, func(t *testing.T, rep *Report, _ string) {
		for _, k := range []string{"q1", "q2", "q3"} {
			if got := seen(rep, "P1", k); len(got) < 2 || got[0] != "task#1" || got[1] != "shown#1" {
				t.Errorf("P1's record of %s: %v, want a task shown at once", k, got)
			}
		}
		if got := maxShown(rep, "P1"); got != 3 {
			t.Errorf("P1 (web) showed at most %d dialogs at once, want 3", got)
		}
		if got := maxShown(rep, "P2"); got != 1 {
			t.Errorf("P2 (TUI) showed at most %d dialogs at once, want 1 (the modal queue)", got)
		}
		slices.Sort(rep.OpenAfterFirst)
		if !slices.Equal(rep.OpenAfterFirst, []string{"q2", "q3"}) {
			t.Errorf("P1's dialogs open once q1 settled: %v, want [q2 q3] (closing one aborts only its own task)", rep.OpenAfterFirst)
		}
		if got := seen(rep, "P1", "q1"); !slices.Equal(got, []string{"task#1", "shown#1", "answered#1"}) {
			t.Errorf("P1's record of q1: %v", got)
		}
	})
}

// R38: a presentation that attaches late discovers the pending instances through the
// initial directory (and the settled results through the hydrated state), and none
// that already closed.
func TestR38_QuestionLatePresentationAttachment(t *testing.T) {
	transports(t, func(t *testing.T, rep *Report, _ string) {
		if got := seen(rep, "P2", "q1"); len(got) != 0 {
			t.Errorf("P2 saw the settled q1: %v", got)
		}
		for _, k := range []string{"q2", "q3"} {
			if got := seen(rep, "P2", k); len(got) == 0 || got[0] != "task#1" {
				t.Errorf("P2's record of %s: %v, want a task from the initial directory", k, got)
			}
		}
		if got := seen(rep, "P1'", rep.LastKey); len(got) < 2 || got[0] != "task#1" || got[1] != "shown#1" {
			t.Errorf("P1' (back late) record of %s: %v", rep.LastKey, got)
		}
		if got := seen(rep, "P1'", rep.HeldKey); len(got) != 0 {
			t.Errorf("P1' saw the settled %s: %v", rep.HeldKey, got)
		}
	})
}

// R39: a presentation that disconnects loses its tasks, and the session's work goes
// on: the invocations it did not answer stay pending, the same instances (generation
// 1) that a later presentation then shows.
func TestR39_QuestionDisconnectDoesNotCancelSessionWork(t *testing.T) {
	transports(t, func(t *testing.T, rep *Report, _ string) {
		for _, k := range []string{"q2", "q3"} {
			if got := seen(rep, "P1", k); !slices.Equal(got, []string{"task#1", "shown#1", "dismissed#1"}) {
				t.Errorf("P1's record of %s: %v, want its task dismissed by the disconnect", k, got)
			}
		}
		// What P2 showed first was still generation 1: answering through it after
		// the replacement names it.
		if rep.StaleErr == nil || !strings.Contains(rep.StaleErr.Error(), "generation 1 ") {
			t.Errorf("P2's first instance of %s was not generation 1 (the invocation ran again?): %v", rep.ReplacedFirst, rep.StaleErr)
		}
		if r := rep.Results[rep.ReplacedFirst]; r.Text == "" {
			t.Errorf("the invocation %s P1 left pending never settled", rep.ReplacedFirst)
		}
	})
}

// R40: worker replacement. Before any answer committed, the dialogs vanish (a shown one
// dismissed, a queued one withdrawn before it was shown) and come back under the same
// keys with new generations; an answer through an old generation fails
// stale_generation. After an answer committed, the replay stages the result from the
// memo and adds no dialog.
func TestR40_QuestionWorkerReplacement(t *testing.T) {
	transports(t, func(t *testing.T, rep *Report, _ string) {
		other := "q2"
		if rep.ReplacedFirst == "q2" {
			other = "q3"
		}
		if got := seen(rep, "P2", rep.ReplacedFirst); len(got) < 4 || !slices.Equal(got[:4], []string{"task#1", "shown#1", "dismissed#1", "task#2"}) {
			t.Errorf("P2's record of %s (shown at the replacement): %v", rep.ReplacedFirst, got)
		}
		// The queued one is withdrawn unseen, or, when the shown one's removal reached
		// P2 before its own, shown in its place and then dismissed: the removals of a
		// replacement arrive one by one. Either way generation 1 ends before 2 comes.
		if got := seen(rep, "P2", other); !(len(got) >= 3 && slices.Equal(got[:3], []string{"task#1", "withdrawn#1", "task#2"})) &&
			!(len(got) >= 4 && slices.Equal(got[:4], []string{"task#1", "shown#1", "dismissed#1", "task#2"})) {
			t.Errorf("P2's record of %s (queued at the replacement): %v", other, got)
		}
		var se *services.Error
		if !errors.As(rep.StaleErr, &se) || se.Code != services.CodeStaleGeneration {
			t.Errorf("an answer through the old generation: %v, want %s", rep.StaleErr, services.CodeStaleGeneration)
		}
		if rep.HeldTasksAfter != 2 {
			t.Errorf("P2 had %d tasks of %s, committed before the second replacement; want 2 (the replay adds no dialog)", rep.HeldTasksAfter, rep.HeldKey)
		}
		if got, want := rep.Results[rep.HeldKey].Text, resultOf(requestOf(rep.HeldKey), Response{Kind: Selected, Index: 1}).Text; got != want {
			t.Errorf("the result of %s staged from its memo: %q, want %q", rep.HeldKey, got, want)
		}
		if got := seen(rep, "P2", rep.LastKey); !slices.Contains(got, "task#3") {
			t.Errorf("P2's record of %s (pending at the second replacement): %v, want a third task", rep.LastKey, got)
		}
	})
}

// R41: durable settlement: two presentations answering at once settle the invocation
// once (one wins, both are told the durable winner), the result is staged with its memo
// deleted in the same write, and a new worker publishes the results from the store.
func TestR41_QuestionDurableSettlement(t *testing.T) {
	transports(t, func(t *testing.T, rep *Report, out string) {
		a, b := rep.Concurrent["P1'"], rep.Concurrent["P2"]
		if a.Winner != b.Winner || a.Won == b.Won {
			t.Errorf("concurrent answers: P1' %+v, P2 %+v; want one winner both agree on", a, b)
		}
		want := resultOf(requestOf(rep.LastKey), a.Winner)
		if got := rep.Results[rep.LastKey]; got.Text != want.Text {
			t.Errorf("result of %s: %q, want the winner's %q", rep.LastKey, got.Text, want.Text)
		}
		if len(rep.Record.Invocations) != 3 {
			t.Fatalf("durable record: %d invocations, want 3", len(rep.Record.Invocations))
		}
		for id, inv := range rep.Record.Invocations {
			if inv.Outcome == nil || inv.Answer != nil {
				t.Errorf("durable record of %s: outcome %v, memo %v; want the outcome staged and the memo gone", id, inv.Outcome, inv.Answer)
			}
		}
		if len(rep.Reloaded) != 3 {
			t.Fatalf("results from a new worker: %v", rep.Reloaded)
		}
		for id, r := range rep.Results {
			if rep.Reloaded[id].Text != r.Text {
				t.Errorf("result of %s from the store %q, was %q", id, rep.Reloaded[id].Text, r.Text)
			}
			if !strings.Contains(out, "result of "+id+": "+r.Text) {
				t.Errorf("the example does not print the result of %s", id)
			}
		}
	})
}

func maxShown(rep *Report, p string) int {
	shown, most := map[string]bool{}, 0
	for _, s := range rep.Seen[p] {
		switch s.What {
		case "shown":
			shown[s.Key] = true
		case "answered", "dismissed", "failed":
			delete(shown, s.Key)
		}
		most = max(most, len(shown))
	}
	return most
}

func requestOf(key string) Request {
	for _, q := range questions {
		if q.ID == key {
			return q.Request
		}
	}
	return Request{}
}
