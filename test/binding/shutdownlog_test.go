package binding_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/meshnode/meshnode/mesh/meshtest"
	"github.com/meshnode/meshnode/test/fleet"
)

// loudRecords keeps the log records above INFO that the nodes wrote.
type loudRecords struct {
	mu   sync.Mutex
	recs []string
}

func (l *loudRecords) Enabled(_ context.Context, lv slog.Level) bool { return lv > slog.LevelInfo }
func (l *loudRecords) Handle(_ context.Context, r slog.Record) error {
	line := r.Level.String() + " " + r.Message
	r.Attrs(func(a slog.Attr) bool { line += fmt.Sprintf(" %s=%v", a.Key, a.Value); return true })
	l.mu.Lock()
	l.recs = append(l.recs, line)
	l.mu.Unlock()
	return nil
}
func (l *loudRecords) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *loudRecords) WithGroup(string) slog.Handler      { return l }

func (l *loudRecords) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.recs
	l.recs = nil
	return out
}

// Issue 25, item 5: an orderly leave logs nothing above INFO on any node: Shutdown of
// one node of two, with sessions bound across them and records in flight, is not a
// fault.
func TestIssue25_OrderlyShutdownLogsNothingAboveInfo(t *testing.T) {
	logs := &loudRecords{}
	f := fleet.Start(t, 2, fleet.Options{Mesh: meshtest.Options{Logger: slog.New(logs)}})
	// Sessions on each node bound to Actors on the other, busy when the node goes.
	for i := 0; i < 2; i++ {
		c := f.Connect(t, i)
		mustBind(t, c, f.IDOn(t, "room", 1-i, fmt.Sprintf("room%d-", i)), "room")
		echo(t, c)
		for k := 0; k < 50; k++ {
			_ = c.Send(context.Background(), "room.say", map[string]int{"k": k})
		}
	}
	if got := logs.take(); len(got) > 0 {
		t.Fatalf("logged above INFO before the shutdown: %q", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := f.Node(1).Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, "node 0 saw node 1 leave", func() bool { return len(f.Node(0).Membership().Live()) == 1 })
	// What node 0 does next (its own traffic, its own orderly shutdown) is quiet too.
	c := f.Connect(t, 0)
	mustBind(t, c, "after-0", "room")
	echo(t, c)
	if err := f.Node(0).Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if got := logs.take(); len(got) > 0 {
		t.Fatalf("an orderly shutdown logged above INFO:\n%q", got)
	}
}

// Issue 25, item 5: a real fault still logs: a node that dies without leaving is
// reported at warning level by the survivor.
func TestIssue25_NodeDeathStillLogsAWarning(t *testing.T) {
	logs := &loudRecords{}
	f := fleet.Start(t, 2, fleet.Options{Mesh: meshtest.Options{Logger: slog.New(logs)}})
	rid := f.Node(1).ID().RID
	f.Kill(1)
	eventually(t, "the survivor warned that node 1 failed", func() bool {
		for _, r := range logs.take() {
			if strings.HasPrefix(r, "WARN mesh: member failed") && strings.Contains(r, "rid="+rid) {
				return true
			}
		}
		return false
	})
}
