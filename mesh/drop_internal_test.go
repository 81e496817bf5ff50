package mesh

import (
	"errors"
	"log/slog"
	"testing"

	"go.opentelemetry.io/otel/metric/noop"

	"github.com/meshnode/meshnode/internal/testkit"
)

// A dropped record is counted every time and logged once per (reason, sending RID) per
// interval, whatever the sender's generation, in the line operators and tests read.
func TestRecords_DropsAreCountedEachAndLoggedOncePerReasonAndRID(t *testing.T) {
	var buf testkit.LockedBuffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{ReplaceAttr: noTime}))
	n := &Node{log: log, metrics: &meshMetrics{drops: noop.Int64Counter{}}}
	for gen := range uint64(3) {
		n.drop(DropDecodeError, NodeID{RID: "node-1", Generation: gen + 1}, "malformed record", errors.New("bad frame"))
	}
	n.drop(DropStaleTarget, NodeID{RID: "node-1", Generation: 1}, "sender is not a current member", nil)
	n.drop(DropDecodeError, NodeID{RID: "node-2", Generation: 1}, "malformed record", errors.New("bad frame"))
	want := `level=WARN msg="mesh: record dropped" reason=decode_error from=node-1#1 detail="malformed record" err="bad frame"` + "\n" +
		`level=WARN msg="mesh: record dropped" reason=stale_target from=node-1#1 detail="sender is not a current member"` + "\n" +
		`level=WARN msg="mesh: record dropped" reason=decode_error from=node-2#1 detail="malformed record" err="bad frame"` + "\n"
	if buf.String() != want {
		t.Fatalf("logged:\n%s\nwant:\n%s", buf.String(), want)
	}
	v, _ := n.metrics.attrs.Load(DropDecodeError)
	if got := v.(*dropReason).n.Load(); got != 4 {
		t.Fatalf("decode_error drops counted %d, want 4", got)
	}
}

// noTime leaves the time out of a text log line, so that a test compares whole lines.
func noTime(_ []string, a slog.Attr) slog.Attr {
	if a.Key == slog.TimeKey {
		return slog.Attr{}
	}
	return a
}
