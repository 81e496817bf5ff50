package actor_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshnode/meshnode"
	"github.com/meshnode/meshnode/actor"
	"github.com/meshnode/meshnode/fault"
	"github.com/meshnode/meshnode/mesh/meshtest"
)

// Ask is answered by an answerer Actor with its node, or left unanswered (Silent).
type Ask struct{ Silent bool }

// Told is an answerer's answer.
type Told struct{ Node string }

type answerer struct{}

func (answerer) Receive(ctx *actor.Context) {
	if m, ok := ctx.Message().(*Ask); ok && !m.Silent {
		_ = ctx.Reply(Told{Node: ctx.Self().Node.RID})
	}
}

// RequestFunc answers like Request, once, with no goroutine waiting: from another node
// and from this one, a request nobody answers ends at its deadline, and one to an Actor
// whose node died fails at once when the node is declared failed.
func TestRequestFunc_AnswersOnceWhereverTheActorIs(t *testing.T) {
	c := meshtest.Start(t, 2, meshtest.Options{Config: func(_ int, cfg *meshnode.Config) {
		cfg.Kinds = []actor.Kind{{Name: "answerer", New: func() actor.Actor { return answerer{} }}}
		cfg.Messages = []actor.MessageType{actor.MessageOf[Ask]("test.ask"), actor.MessageOf[Told]("test.told")}
	}})
	h := c.Node(0).Actors()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	idOn := func(i int) string {
		for k := 0; ; k++ {
			id := "ask-" + string(rune('a'+k))
			f, err := h.Lookup(ctx, "answerer", id)
			if err != nil {
				t.Fatal(err)
			}
			if f.Node == c.Node(i).ID() {
				return id
			}
		}
	}
	type result struct {
		v   any
		err error
	}
	ask := func(ctx context.Context, id string, m Ask) result {
		ch := make(chan result, 2)
		var calls atomic.Int32
		h.RequestFunc(ctx, actor.Address{Kind: "answerer", ID: id}, m, func(v any, err error) {
			calls.Add(1)
			ch <- result{v, err}
		})
		r := <-ch
		select {
		case again := <-ch:
			t.Fatalf("done called twice: %+v then %+v", r, again)
		case <-time.After(50 * time.Millisecond):
		}
		return r
	}
	for i := 0; i < 2; i++ {
		id := idOn(i)
		r := ask(ctx, id, Ask{})
		if r.err != nil || r.v.(*Told).Node != c.Node(i).ID().RID {
			t.Fatalf("node %d: %+v", i, r)
		}
		short, stop := context.WithTimeout(ctx, 100*time.Millisecond)
		start := time.Now()
		r = ask(short, id, Ask{Silent: true})
		stop()
		if k, _ := fault.Of(r.err); k != fault.DeadlineExceeded || time.Since(start) > 2*time.Second {
			t.Fatalf("an unanswered request to node %d: %v after %v, want deadline_exceeded at its deadline", i, r.err, time.Since(start))
		}
	}
	far := idOn(1)
	ch := make(chan error, 1)
	h.RequestFunc(ctx, actor.Address{Kind: "answerer", ID: far}, Ask{Silent: true}, func(_ any, err error) { ch <- err })
	c.Kill(1)
	select {
	case err := <-ch:
		if k, _ := fault.Of(err); k != fault.Unavailable {
			t.Fatalf("a request to a dead node's Actor: %v, want unavailable", err)
		}
	case <-ctx.Done():
		t.Fatal(errors.New("a request to a dead node's Actor never ended"))
	}
}
