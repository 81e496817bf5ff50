package actor_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/meshnode"
	"github.com/meshnode/meshnode/actor"
	"github.com/meshnode/meshnode/fault"
	"github.com/meshnode/meshnode/mesh/meshtest"
)

// blocking is an Actor whose turns wait until release is closed.
type blocking struct {
	entered chan<- struct{}
	release <-chan struct{}
}

func (b *blocking) Receive(ctx *actor.Context) {
	if _, ok := ctx.Message().(*actor.Message); ok {
		select {
		case b.entered <- struct{}{}:
		default:
		}
		<-b.release
	}
}

// An Actor's mailbox holds at most MaxMailbox messages: a local send past it fails at
// once with ErrMailboxFull (capacity exceeded) instead of queueing without bound, and
// the refusal is counted.
func TestMailbox_LocalSendPastTheBoundFailsWithErrMailboxFull(t *testing.T) {
	const max = 4
	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	c := meshtest.Start(t, 1, meshtest.Options{Config: func(_ int, cfg *meshnode.Config) {
		cfg.MaxMailbox = max
		cfg.Kinds = []actor.Kind{{Name: "blocking", New: func() actor.Actor { return &blocking{entered: entered, release: release} }}}
	}})
	t.Cleanup(func() { close(release) }) // before the cluster stops: the blocked turn returns
	h := c.Node(0).Actors()
	ctx := context.Background()
	to, err := h.Lookup(ctx, "blocking", "b")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Send(ctx, to, actor.Message{Name: "first"}); err != nil {
		t.Fatal(err)
	}
	<-entered // the first message is in its turn, out of the mailbox
	for i := range max {
		if err := h.Send(ctx, to, actor.Message{Name: "queued"}); err != nil {
			t.Fatalf("send %d of %d into the mailbox: %v", i+1, max, err)
		}
	}
	if err := h.Send(ctx, to, actor.Message{Name: "over"}); !errors.Is(err, actor.ErrMailboxFull) {
		t.Fatalf("send past the bound: %v, want ErrMailboxFull", err)
	}
	if n := h.Stats().MailboxRejected; n != 1 {
		t.Errorf("MailboxRejected = %d, want 1", n)
	}
}

// A Request from another node to an Actor whose mailbox is full is answered at once
// with a typed Unavailable (the target node refuses it with workerQueueFull), not left
// to run into the caller's deadline.
func TestMailbox_CrossNodeRequestToAFullMailboxIsUnavailable(t *testing.T) {
	const max = 2
	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	c := meshtest.Start(t, 2, meshtest.Options{Config: func(_ int, cfg *meshnode.Config) {
		cfg.MaxMailbox = max
		cfg.Kinds = []actor.Kind{{Name: "blocking", New: func() actor.Actor { return &blocking{entered: entered, release: release} }}}
	}})
	t.Cleanup(func() { close(release) })
	home := c.Node(1).Actors()
	ctx := context.Background()
	to, err := home.LookupOn(ctx, "blocking", "b", c.Node(1).ID().RID)
	if err != nil {
		t.Fatal(err)
	}
	// Fill the mailbox where the Actor lives: one message in its turn, max queued.
	if err := home.Send(ctx, to, actor.Message{Name: "first"}); err != nil {
		t.Fatal(err)
	}
	<-entered
	for i := range max {
		if err := home.Send(ctx, to, actor.Message{Name: "queued"}); err != nil {
			t.Fatalf("queue %d: %v", i, err)
		}
	}
	// The caller allows 30 s; the answer must come long before.
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	start := time.Now()
	_, err = c.Node(0).Actors().Request(rctx, to, actor.Message{Name: "ask"})
	if !errors.Is(err, fault.Unavailable) {
		t.Fatalf("request to a full mailbox on another node: %v, want Unavailable", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the refusal took %v: it waited for a deadline instead of being answered", d)
	}
	if n := home.Stats().MailboxRejected; n != 1 {
		t.Errorf("MailboxRejected on the Actor's node = %d, want 1", n)
	}
}

// A node serves at most MaxDirectoryTasks directory requests of its peers at once
// (lookups that must place an Actor, activations, claims, relocations, move
// prepares): past it a request is answered unavailable at once, naming what was asked
// and the node, and counted, instead of queueing without bound. Once the node has room
// again, the same request succeeds.
func TestBounds_DirectoryRequestsServedAtOnce(t *testing.T) {
	c := meshtest.Start(t, 2, meshtest.Options{Config: func(_ int, cfg *meshnode.Config) {
		cfg.Kinds = []actor.Kind{{Name: "blocking", New: func() actor.Actor { return &blocking{} }}}
	}})
	asker, holder := c.Node(0).Actors(), c.Node(1).Actors()
	// An id whose directory entry node 1 holds, and which has no activation: node 0's
	// lookup asks node 1 to place it, which takes one of node 1's tasks.
	var id string
	for i := 0; ; i++ {
		id = fmt.Sprintf("busy-%d", i)
		if actor.DirectoryHolder(asker, id) == c.Node(1).ID() {
			break
		}
	}
	release := actor.OccupyDirectoryTasks(holder)
	before := holder.Stats().DirectoryBusy
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := asker.Lookup(ctx, "blocking", id)
	if !errors.Is(err, fault.Unavailable) || !strings.Contains(err.Error(), "lookup of "+id) ||
		!strings.Contains(err.Error(), c.Node(1).ID().RID) || !strings.Contains(err.Error(), strconv.Itoa(actor.MaxDirectoryTasks)) {
		t.Fatalf("a lookup past the bound: %v, want unavailable naming the lookup, the node and the bound", err)
	}
	if got := holder.Stats().DirectoryBusy - before; got != 1 {
		t.Fatalf("%d refusals counted, want 1", got)
	}
	release()
	if _, err := asker.Lookup(ctx, "blocking", id); err != nil {
		t.Fatalf("the same lookup with room again: %v", err)
	}
}
