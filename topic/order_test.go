package topic

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/meshnode/meshnode/mesh"
	swire "github.com/meshnode/meshnode/session/wire"
)

// newTestOrderer is an orderer whose deliveries are recorded as "seq:payload".
func newTestOrderer(reorderWait time.Duration) (*orderer, *[]string) {
	h := &Hub{opts: Options{ReorderWait: reorderWait}}
	var got []string
	o := &h.order
	o.init(h)
	o.deliver = func(_, _ string, seq uint64, _ string, _ swire.Codec, payload []byte) {
		got = append(got, fmt.Sprintf("%d:%s", seq, payload))
	}
	return o, &got
}

var (
	nodeA = mesh.NodeID{RID: "a", Generation: 1}
	nodeB = mesh.NodeID{RID: "b", Generation: 1}
)

func admit(o *orderer, from mesh.NodeID, seq uint64, payload string) {
	o.admit(from, "a:room@1", "t", seq, "room.said", swire.CodecRaw, []byte(payload))
}

// An Actor that moved from node a to node b publishes 4 from b while 3, sent from a
// before the move, is still on its way: 4 is held until 3 arrives, then both go in
// order. A repeat of a delivered message is dropped.
func TestOrder_HeldUntilTheMessageBeforeArrives(t *testing.T) {
	o, got := newTestOrderer(time.Hour)
	admit(o, nodeA, 1, "x")
	admit(o, nodeA, 2, "y")
	admit(o, nodeB, 4, "w") // ahead, from the new node: held (its payload copied)
	if want := []string{"1:x", "2:y"}; !slices.Equal(*got, want) {
		t.Fatalf("before 3 arrived: %v, want %v", *got, want)
	}
	admit(o, nodeA, 3, "z")
	admit(o, nodeB, 2, "y") // a repeat
	if want := []string{"1:x", "2:y", "3:z", "4:w"}; !slices.Equal(*got, want) {
		t.Fatalf("delivered %v, want %v", *got, want)
	}
	if st := o.h.Stats(); st.Held != 1 || st.Duplicates != 1 || st.Gaps != 0 {
		t.Fatalf("stats %+v", st)
	}
	if o.heldBytes != 0 {
		t.Fatalf("%d held bytes left", o.heldBytes)
	}
}

// A message ahead of the stream from the node the stream last came from means some
// never arrive (the link keeps order): it is delivered at once and the gap counted. A
// stream's first message starts it (a subscriber that joined later).
func TestOrder_GapOnOneLinkIsDeliveredAtOnce(t *testing.T) {
	o, got := newTestOrderer(time.Hour)
	admit(o, nodeA, 5, "first")
	admit(o, nodeA, 8, "after a gap")
	if want := []string{"5:first", "8:after a gap"}; !slices.Equal(*got, want) {
		t.Fatalf("delivered %v, want %v", *got, want)
	}
	if st := o.h.Stats(); st.Gaps != 2 {
		t.Fatalf("gaps %d, want 2", st.Gaps)
	}
}

// What waits for a message that never comes (its node died) goes after ReorderWait,
// in order, the gap counted; so does a hold that fills up.
func TestOrder_HeldMessagesGoAfterTheWaitOrWhenTheHoldIsFull(t *testing.T) {
	o, got := newTestOrderer(50 * time.Millisecond)
	admit(o, nodeA, 1, "a")
	admit(o, nodeB, 4, "d")
	admit(o, nodeB, 3, "c")
	o.sweep(time.Now()) // not yet
	if len(*got) != 1 {
		t.Fatalf("released early: %v", *got)
	}
	o.sweep(time.Now().Add(time.Second))
	if want := []string{"1:a", "3:c", "4:d"}; !slices.Equal(*got, want) {
		t.Fatalf("after the wait: %v, want %v", *got, want)
	}
	if st := o.h.Stats(); st.Gaps != 1 {
		t.Fatalf("gaps %d, want 1", st.Gaps)
	}
	// What arrives after the stream moved past it is old: dropped, never delivered late.
	admit(o, nodeA, 4, "late")
	admit(o, nodeA, 2, "late")
	if st := o.h.Stats(); st.Duplicates != 2 {
		t.Fatalf("late messages: duplicates %d, want 2", st.Duplicates)
	}

	o, got = newTestOrderer(time.Hour)
	admit(o, nodeA, 1, "a")
	for seq := uint64(3); seq < 3+maxHeld+1; seq++ {
		admit(o, nodeB, seq, "h")
	}
	if len(*got) != 1+maxHeld+1 || (*got)[1] != "3:h" {
		t.Fatalf("a full hold delivered %d messages, want %d, starting with 3", len(*got), 1+maxHeld+1)
	}
}
