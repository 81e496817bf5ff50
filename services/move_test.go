package services_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/meshnode/meshnode/services"
)

// Issue 28, item 7 (and the relocation bug: after a worker was relocated every session
// call failed stale_generation and its state was gone): services move with their
// worker. A presentation on each of two other nodes stays attached (no re-attach, the
// same attachment); the state travels (the score, the open dialogs); calls admitted
// before the move settle exactly once or fail with a typed error, never hang, and calls
// racing the move each count once; the state subscription gets a complete replacement
// on the next sequence (no gap); events resume with no replay; the keyed instance comes
// back under a new generation; a private reference from before the move is stale; the
// directory shows the worker's new node.
func TestIssue28_ServicesMoveWithTheirWorker(t *testing.T) {
	f := startSvcFleet(t, 3, nil)
	w := f.workerOn(t, 1, "mover-")
	var score, moves seen
	obs := newTasks()
	p := f.present(t, 0, "stream", func(p *presentation) {
		p.board.Score.Subscribe(score.score)
		p.board.Moves.Subscribe(moves.move)
		services.Observe(p.env, DialogToken, obs.handler)
	})
	q := f.present(t, 2, "loopback")
	p.create(t, w)
	first := p.attach(t, w)
	q.attach(t, w)
	if _, err := p.board.Set.Call(callCtx(t), Score{N: 7}); err != nil {
		t.Fatal(err)
	}
	activeEvents(t, p.board, &moves)
	if _, err := p.board.Emit.Call(callCtx(t), BurstArgs{From: 1, Count: 3}); err != nil {
		t.Fatal(err)
	}
	open(t, p.dialogs, "k", "still here")
	eventually(t, "the state, the events and the dialog reach p", func() bool {
		return score.last() == 7 && moves.last() == 3 && obs.has("start k#1 still here")
	})
	ref, err := p.index.Start.Call(callCtx(t), StartArgs{Steps: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	job := ref.Get(IndexJobToken)
	// A call admitted before the move, still running when it happens.
	inflight := make(chan error, 1)
	go func() { _, err := q.counter.Hold.Call(callCtx(t), SayArgs{Text: "inflight"}); inflight <- err }()
	waitStarted(t, f.hs, "inflight")
	// Calls racing the move: each either counts once or fails typed.
	var wg sync.WaitGroup
	var counted atomic.Int64
	stop := make(chan struct{})
	for _, x := range []*presentation{p, q} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, err := x.board.Incr.Call(callCtx(t), struct{}{})
				var se *services.Error
				switch {
				case err == nil:
					counted.Add(1)
				case !errors.As(err, &se):
					t.Errorf("a call racing the move failed untyped: %v", err)
					return
				}
			}
		}()
	}
	seqBefore := p.board.Score.Status().Seq
	_ = seqBefore
	target := f.Node(2).ID()
	if _, err := f.Node(0).Actors().Relocate(callCtx(t), w, target.RID); err != nil {
		t.Fatalf("relocate: %v", err)
	}
	close(stop)
	wg.Wait()

	select {
	case err := <-inflight:
		if !errors.Is(err, services.ErrSessionUnavailable) {
			t.Fatalf("the call running at the move: %v, want session_unavailable", err)
		}
	case <-callCtx(t).Done():
		t.Fatal("the call running at the move never ended")
	}
	v, err := p.board.Incr.Call(callCtx(t), struct{}{})
	if err != nil {
		t.Fatalf("a call after the move: %v", err)
	}
	if want := 7 + int(counted.Load()) + 1; v.N != want {
		t.Fatalf("the score after the move is %d, want %d (7, each counted call once, and this one)", v.N, want)
	}
	// The state subscription: a complete replacement, no gap in the sequence.
	eventually(t, "p's replica follows", func() bool { return score.last() == v.N })
	score.mu.Lock()
	replaced := false
	for i := 1; i < len(score.vals); i++ {
		if score.seqs[i] != score.seqs[i-1]+1 {
			t.Errorf("a gap in the score's sequence at %d: %d after %d", i, score.seqs[i], score.seqs[i-1])
		}
		replaced = replaced || score.repl[i]
	}
	score.mu.Unlock()
	if !replaced {
		t.Error("no complete replacement after the move")
	}
	// Events resume, nothing replayed.
	if _, err := p.board.Emit.Call(callCtx(t), BurstArgs{From: 4, Count: 1}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the event after the move", func() bool { return moves.last() == 4 })
	if got := afterProbes(&moves); !slices.Equal(got, []int{1, 2, 3, 4}) {
		t.Fatalf("events %v, want 1-4 once each", got)
	}
	// The keyed instance came back under a new generation.
	eventually(t, "the dialog's new generation", func() bool { return obs.has("start k#1 still here", "end k#1", "start k#2 still here") })
	if _, err := obs.facade("k#1").Answer.Call(callCtx(t), AnswerArgs{}); !errors.Is(err, services.ErrStaleGeneration) {
		t.Fatalf("the old generation after the move: %v", err)
	}
	if r, err := obs.facade("k#2").Answer.Call(callCtx(t), AnswerArgs{Choice: "yes"}); err != nil || r.Choice != "yes" {
		t.Fatalf("the new generation: %+v %v", r, err)
	}
	// The reference did not move.
	if _, err := job.Cancel.Call(callCtx(t), struct{}{}); !errors.Is(err, services.ErrStaleReference) {
		t.Fatalf("a reference from before the move: %v, want stale_reference", err)
	}
	// Everyone stayed attached, to the same attachment, and the directory knows where.
	for i := 0; i < 3; i++ {
		if n := services.AttacherOf(f.Node(i).Services()).Stats().Reattaches; n != 0 {
			t.Fatalf("node %d attached %d presentations again", i, n)
		}
	}
	if v, err := q.board.Who.Call(callCtx(t), struct{}{}); err != nil || v.By != "worker" {
		t.Fatalf("q after the move: %+v %v", v, err)
	}
	_, watch := f.watchDirectory(t, 1, "loopback")
	eventually(t, "the directory shows the new node", func() bool {
		s, _ := watch.summary(w)
		return s.Node == target.RID && s.Status == services.StatusActive && len(s.Attached) == 2
	})
	_ = first
	_ = context.Background
}
