package services_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/services"
)

// R31: the instance directory hydrates: an observer that comes after instances were
// added gets a task for each (the complete initial directory), then one for each
// instance added later.
func TestR31_InstanceDirectoryHydrates(t *testing.T) {
	for _, way := range dialogWays() {
		t.Run(way.name, func(t *testing.T) {
			first := newTasks()
			rig := way.start(t, first)
			for _, k := range []string{"a", "b", "c"} {
				open(t, rig.admin, k, "q-"+k)
			}
			late := newTasks()
			admin := rig.observer(t, late)
			eventually(t, "the late observer's tasks for the initial directory", func() bool {
				return slices.Equal(late.running(), []string{"a#1", "b#1", "c#1"})
			})
			open(t, admin, "d", "q-d")
			eventually(t, "a task for the instance added later", func() bool {
				return slices.Equal(late.running(), []string{"a#1", "b#1", "c#1", "d#1"}) && late.has("start d#1 q-d")
			})
		})
	}
}

// R32: reconciliation is ordered: adds, closes and a re-add of one key (a replacement:
// the same key under a new generation) reach an observer in the order they happened,
// the replaced task ending before its replacement starts.
func TestR32_ReconciliationIsOrdered(t *testing.T) {
	for _, way := range dialogWays() {
		t.Run(way.name, func(t *testing.T) {
			ts := newTasks()
			rig := way.start(t, ts)
			open(t, rig.admin, "k", "one")
			closeDialog(t, rig.admin, "k")
			open(t, rig.admin, "k", "two")
			open(t, rig.admin, "z", "zed")
			closeDialog(t, rig.admin, "k")
			open(t, rig.admin, "k", "three")
			eventually(t, "the observer reaches the last directory", func() bool {
				k := "k#" + last(ts, "k")
				return slices.Equal(ts.running(), []string{k, "z#1"}) && ts.has("start z#1 zed") && ts.has("start "+k+" three")
			})
			// Whatever intermediate directories it saw, each task of k ended before the
			// next started, and k's texts came in order.
			lines := ts.lines()
			open := ""
			var texts []string
			for _, l := range lines {
				f := strings.Fields(l)
				if !strings.HasPrefix(f[1], "k#") {
					continue
				}
				switch f[0] {
				case "start":
					if open != "" {
						t.Fatalf("%s started while %s ran: %v", f[1], open, lines)
					}
					open = f[1]
					texts = append(texts, f[2])
				case "end":
					open = ""
				}
			}
			if texts[len(texts)-1] != "three" || !isSubsequence(texts, []string{"one", "two", "three"}) {
				t.Fatalf("k's tasks saw %v, want a subsequence of one, two, three ending at three", texts)
			}
		})
	}
}

func last(ts *tasks, key string) string {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return itoa(ts.starts[key])
}

func isSubsequence(got, of []string) bool {
	i := 0
	for _, g := range got {
		for i < len(of) && of[i] != g {
			i++
		}
		if i == len(of) {
			return false
		}
		i++
	}
	return true
}

// R33: each instance's state hydrates before its observer task starts: every task
// reads its request synchronously, and gets the instance's own.
func TestR33_StateHydratesBeforeObserverTasks(t *testing.T) {
	for _, way := range dialogWays() {
		t.Run(way.name, func(t *testing.T) {
			ts := newTasks()
			rig := way.start(t, ts)
			const n = 20
			for i := 0; i < n; i++ {
				open(t, rig.admin, "i"+itoa(i), "text-"+itoa(i))
			}
			late := newTasks()
			rig.observer(t, late)
			for _, x := range []*tasks{ts, late} {
				eventually(t, "every task started", func() bool { return len(x.running()) == n })
				x.mu.Lock()
				if len(x.cold) != 0 {
					t.Errorf("tasks started before their state hydrated: %v", x.cold)
				}
				for _, l := range x.log {
					f := strings.Fields(l)
					if f[0] == "start" && "text-"+strings.TrimPrefix(strings.Split(f[1], "#")[0], "i") != f[2] {
						t.Errorf("task %s read %q", f[1], f[2])
					}
				}
				x.mu.Unlock()
			}
		})
	}
}

// R34: stale generations are rejected: a facade of a closed instance (kept past its
// task) fails stale_generation for ever, also once the key is live again under a new
// generation, which it cannot reach; a hand-made call naming a generation the host
// never gave is stale too. The live generation works.
func TestR34_StaleGenerationsAreRejected(t *testing.T) {
	for _, way := range dialogWays() {
		t.Run(way.name, func(t *testing.T) {
			ts := newTasks()
			rig := way.start(t, ts)
			open(t, rig.admin, "q", "first")
			eventually(t, "q#1's task", func() bool { return ts.facade("q#1") != nil })
			old := ts.facade("q#1")
			if r, err := old.Answer.Call(callCtx(t), AnswerArgs{Choice: "x"}); err != nil || r.Key != "q" {
				t.Fatalf("the live instance: %+v %v", r, err)
			}
			closeDialog(t, rig.admin, "q")
			open(t, rig.admin, "q", "second")
			eventually(t, "q#2's task", func() bool { return ts.facade("q#2") != nil })
			for i := 0; i < 3; i++ {
				if _, err := old.Answer.Call(callCtx(t), AnswerArgs{Choice: "late"}); !errors.Is(err, services.ErrStaleGeneration) {
					t.Fatalf("a call through the closed generation: %v, want stale_generation", err)
				}
			}
			if r, err := ts.facade("q#2").Answer.Call(callCtx(t), AnswerArgs{Choice: "y"}); err != nil || r.Choice != "y" {
				t.Fatalf("the new generation: %+v %v", r, err)
			}
		})
	}
	for _, tr := range transports {
		t.Run("forged/"+tr.name, func(t *testing.T) {
			provider := newHost(t, "provider", nil, dialogOwner("p", nil))
			conn, _ := tr.connect(t, provider)
			var admin *DialogAdmin
			newHost(t, "admin", []services.Connection{conn}, services.Facet{ID: "ui", Setup: func(env *services.Env) { admin = services.Use(env, DialogAdminToken) }})
			open(t, admin, "q", "x")
			args, _ := json.Marshal(AnswerArgs{Choice: "z"})
			for _, gen := range []uint64{2, 99} {
				_, err := conn.Call(callCtx(t), services.Call{Service: "test.dialog", Key: "q", Generation: gen, Member: "answer", Args: args})
				if !errors.Is(err, services.ErrStaleGeneration) {
					t.Fatalf("a call naming generation %d: %v, want stale_generation", gen, err)
				}
			}
			raw, err := conn.Call(callCtx(t), services.Call{Service: "test.dialog", Key: "q", Generation: 1, Member: "answer", Args: args})
			if err != nil || !strings.Contains(string(raw), `"choice":"z"`) {
				t.Fatalf("the live generation by hand: %s %v", raw, err)
			}
			if _, err := conn.Call(callCtx(t), services.Call{Service: "test.dialog", Member: "answer", Args: args}); !errors.Is(err, services.ErrInvalidArguments) {
				t.Fatalf("a keyed call naming no instance: %v, want invalid_arguments", err)
			}
		})
	}
}

// R35: observer tasks are cleaned up: closing an instance aborts its task only (the
// others run on) and lets a call it had admitted settle, while new calls to it fail;
// a session switch aborts every task of the session it leaves before the tasks of the
// one it selects start; closing the observer ends its tasks.
func TestR35_TasksCleanedUpOnCloseAndSwitch(t *testing.T) {
	for _, way := range dialogWays() {
		t.Run(way.name, func(t *testing.T) {
			ts := newTasks()
			rig := way.start(t, ts)
			open(t, rig.admin, "a", "qa")
			open(t, rig.admin, "b", "qb")
			eventually(t, "both tasks", func() bool { return slices.Equal(ts.running(), []string{"a#1", "b#1"}) })
			a := ts.facade("a#1")
			admitted := make(chan error, 1)
			go func() { _, err := a.Slow.Call(callCtx(t), SayArgs{Text: "admitted-" + way.name}); admitted <- err }()
			waitStarted(t, rig.hs, "admitted-"+way.name)
			closeDialog(t, rig.admin, "a")
			eventually(t, "a's task ends", func() bool { return ts.has("end a#1") })
			if got := ts.running(); !slices.Equal(got, []string{"b#1"}) {
				t.Fatalf("after closing a: tasks %v, want b's only", got)
			}
			if _, err := a.Answer.Call(callCtx(t), AnswerArgs{}); !errors.Is(err, services.ErrStaleGeneration) {
				t.Fatalf("a new call to the closed instance: %v, want stale_generation", err)
			}
			if _, ended := rig.hs.endedWith("admitted-" + way.name); ended {
				t.Fatal("closing the instance cancelled a call it had admitted")
			}
			closeOnce(rig.hs.release)
			if err := <-admitted; err != nil {
				t.Fatalf("the admitted call: %v, want it to settle", err)
			}
			if rig.switchTo != nil {
				other := rig.switchTo(t)
				open(t, other, "c", "qc")
				eventually(t, "the other session's task", func() bool { return slices.Equal(ts.running(), []string{"c#1"}) })
				lines := ts.lines()
				endB, startC := slices.Index(lines, "end b#1"), slices.Index(lines, "start c#1 qc")
				if endB < 0 || startC < endB {
					t.Fatalf("the switch: %v, want b's task ended before c's started", lines)
				}
			}
			rig.closeFirst()
			eventually(t, "closing the observer ends its tasks", func() bool { return len(ts.running()) == 0 })
		})
	}
}

// R5 (generations): the owner's re-add of a closed key is observed as a new
// generation, and the handle of a retired owner generation adds nothing.
func TestR5_ObserversSeeTheNewGeneration(t *testing.T) {
	ts := newTasks()
	var inst *services.Instances[Dialog]
	owner := func(env *services.Env) { inst = services.ProvideMany(env, DialogToken) }
	h := newHost(t, "keyed", nil, services.Facet{ID: "owner", Setup: owner},
		services.Facet{ID: "watcher", Setup: func(env *services.Env) { services.Observe(env, DialogToken, ts.handler) }})
	mk := func(text string) *Dialog {
		return &Dialog{Request: services.NewState(Question{Text: text})}
	}
	closeA, err := inst.Add("a", mk("first"))
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "a#1 observed", func() bool { return ts.has("start a#1 first") })
	closeA()
	if _, err := inst.Add("a", mk("second")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the re-add observed as a new generation", func() bool { return ts.has("start a#1 first", "end a#1", "start a#2 second") })
	retired := inst
	if err := h.Reload(callCtx(t), services.Facet{ID: "owner", Setup: owner}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the reload closes the old generation's instances", func() bool { return len(ts.running()) == 0 })
	if _, err := retired.Add("z", mk("late")); err == nil {
		t.Fatal("the handle of a retired owner generation added an instance")
	}
	if _, err := inst.Add("a", mk("third")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the new owner generation's instance, under a new generation", func() bool { return ts.has("start a#3 third") })
	_ = context.Background
}

func itoa(n int) string { return strconv.Itoa(n) }
