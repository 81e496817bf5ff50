package actor_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/meshnode"
	"github.com/meshnode/meshnode/actor"
	"github.com/meshnode/meshnode/fault"
	"github.com/meshnode/meshnode/mesh"
)

// BadReply asks the badreplier kind to answer in a way that cannot be delivered.
type BadReply struct{ How string }

// Blob is a registered message type of any size.
type Blob struct{ Data []byte }

// notRegistered is a reply type nobody registered.
type notRegistered struct{ X int }

// badReplier answers BadReply as asked and reports what Reply (or ReplyError) returned.
type badReplier struct{ replied chan error }

func (b *badReplier) Receive(ctx *actor.Context) {
	m, ok := ctx.Message().(*BadReply)
	if !ok {
		return
	}
	var err error
	switch m.How {
	case "unregistered":
		err = ctx.Reply(notRegistered{X: 1})
	case "huge":
		err = ctx.Reply(&Blob{Data: make([]byte, mesh.MaxRecordPayload+1)})
	case "huge-error":
		err = ctx.ReplyError(fault.Errorf(fault.Rejected, "%s", strings.Repeat("x", mesh.MaxRecordPayload+1)))
	}
	b.replied <- err
}

// replyBound is how long a reply that cannot be delivered may take to fail at its
// requester: it is answered at once (a cross-node request takes milliseconds here),
// never left to the requester's deadline (wait, 10 s).
const replyBound = time.Second

// Issue 25, item 2: a reply that cannot be encoded or delivered fails at once, the same
// way on one node and across nodes: Reply returns a typed error and the requester gets
// a typed error, never a timeout. A reply of a type nobody registered is NotConfigured
// wherever the requester is; one over the limit between nodes is CapacityExceeded.
func TestSurface_ReplyThatCannotBeDeliveredFailsAtOnceWherever(t *testing.T) {
	replied := make(chan error, 1)
	c := startSurface(t, 2, func(cfg *meshnode.Config) {
		cfg.Messages = append(cfg.Messages, actor.MessageOf[BadReply]("test.badreply"), actor.MessageOf[Blob]("test.blob"))
		cfg.Kinds = append(cfg.Kinds, actor.Kind{Name: "badreplier", New: func() actor.Actor { return &badReplier{replied: replied} }})
	})
	cases := []struct {
		how   string
		nodes []int // where the replier lives (the requester is on node 0)
		want  fault.Kind
	}{
		{"unregistered", []int{0, 1}, fault.NotConfigured},
		{"huge", []int{1}, fault.CapacityExceeded},
		{"huge-error", []int{1}, fault.CapacityExceeded},
	}
	for _, tc := range cases {
		for _, where := range tc.nodes {
			to := actor.Address{Kind: "badreplier", ID: c.idOn(t, "badreplier", where)}
			start := time.Now()
			_, err := c.host(0).Request(reqCtx(t), to, BadReply{How: tc.how})
			took := time.Since(start)
			if !errors.Is(err, tc.want) {
				t.Errorf("%s reply from node %d: requester got %v, want %v", tc.how, where, err, tc.want)
			} else if strings.Contains(err.Error(), strings.Repeat("x", 100)) {
				t.Errorf("%s reply from node %d: the requester's error carries the undeliverable text", tc.how, where)
			}
			if took > replyBound {
				t.Errorf("%s reply from node %d: the requester waited %v", tc.how, where, took)
			}
			if rerr := <-replied; !errors.Is(rerr, tc.want) {
				t.Errorf("%s reply from node %d: Reply returned %v, want %v", tc.how, where, rerr, tc.want)
			}
		}
	}
}
