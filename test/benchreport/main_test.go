package main

import (
	"bytes"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testdata/bench-run.txt is the output of go test -bench ./test/bench on the project's
// machine (the second of docs/benchmarks.md's three runs, with the lines of the
// alternated benchmarks and of Convergence30NodesLAN from runs after their change, and
// those of the plugin services' ServiceStateFanOut and ServiceEventsUntilBound from the
// second of their own three runs): every benchmark benchreport reads, each goal met. The tests below change it as a
// failing run would be.
func canned(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("testdata/bench-run.txt")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func runOn(t *testing.T, input string, args ...string) (code int, out string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code = run(args, strings.NewReader(input), &stdout, &stderr)
	if stderr.Len() > 0 {
		t.Logf("stderr: %s", stderr.String())
	}
	return code, stdout.String()
}

func goalRows() []row {
	var gs []row
	for _, r := range rows {
		if r.goal != 0 {
			gs = append(gs, r)
		}
	}
	return gs
}

func TestReport_CannedRunMeetsEveryGoal(t *testing.T) {
	code, out := runOn(t, canned(t))
	if code != 0 || strings.Contains(out, "NOT") {
		t.Fatalf("exit %d on the canned run:\n%s", code, out)
	}
	for _, r := range goalRows() {
		if !strings.Contains(out, r.label) || !strings.Contains(out, "goal "+r.bound(r.goal)+": met") {
			t.Errorf("the report does not show %q with its goal met:\n%s", r.label, out)
		}
	}
}

// withoutBenchmark drops every line of benchmark name from go test output.
func withoutBenchmark(out, name string) string {
	var kept []string
	for _, l := range strings.Split(out, "\n") {
		if !strings.HasPrefix(l, "Benchmark"+name+"-") && !strings.HasPrefix(l, "Benchmark"+name+" ") {
			kept = append(kept, l)
		}
	}
	return strings.Join(kept, "\n")
}

// A goal whose benchmark (or baseline) did not run fails the report, as a miss does:
// a benchmark renamed, removed or failing must not turn a goal into "(not measured)".
func TestReport_GoalWhoseBenchmarkDidNotRunFails(t *testing.T) {
	in := canned(t)
	tried := map[string]bool{}
	for _, r := range goalRows() {
		for _, b := range r.benches() {
			if tried[b] {
				continue
			}
			tried[b] = true
			t.Run(b, func(t *testing.T) {
				missing := withoutBenchmark(in, b)
				if missing == in {
					t.Fatalf("the canned run has no Benchmark%s line", b)
				}
				want := 0
				for _, g := range goalRows() {
					for _, gb := range g.benches() {
						if gb == b {
							want++
						}
					}
				}
				code, out := runOn(t, missing)
				if code != 1 || !strings.Contains(out, "NOT measured") ||
					!strings.Contains(out, fmt.Sprintf("benchreport: %d goal(s) missed or not measured", want)) {
					t.Fatalf("without Benchmark%s: exit %d, want 1 with %d goal(s) not measured:\n%s", b, code, want, out)
				}
			})
		}
	}
}

// setFigure rewrites the figure of unit on benchmark name's line in go test output.
func setFigure(t *testing.T, out, name, unit string, v float64) string {
	t.Helper()
	re := regexp.MustCompile(`(?m)^(Benchmark` + regexp.QuoteMeta(name) + `-\d+\s.*?\s)([0-9.e+-]+)(\s+` + regexp.QuoteMeta(unit) + `(\s|$))`)
	if !re.MatchString(out) {
		t.Fatalf("no %s on the line of Benchmark%s", unit, name)
	}
	return re.ReplaceAllString(out, "${1}"+strconv.FormatFloat(v, 'g', -1, 64)+"${3}")
}

// at rewrites the canned run so that row r's figure is v (in the terms goal bounds).
func at(t *testing.T, in string, r row, v float64) string {
	t.Helper()
	results, err := parse(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case r.baseline != "": // ratio = baseline ns/op / bench ns/op
		return setFigure(t, in, r.bench, "ns/op", results[r.baseline].nsPerOp/v)
	case strings.HasPrefix(r.unit, "x-"): // a time ratio, the inverse of the throughput ratio
		return setFigure(t, in, r.bench, r.unit, 1/v)
	}
	return setFigure(t, in, r.bench, r.unit, v)
}

// Each goal fails the report when its figure is just past it, and passes just within.
func TestReport_MissedGoalFails(t *testing.T) {
	in := canned(t)
	for _, r := range goalRows() {
		t.Run(r.bench+"/"+r.unit, func(t *testing.T) {
			past, within := r.goal*0.98, r.goal*1.02
			if !r.ratio() {
				past, within = within, past
			}
			code, out := runOn(t, at(t, in, r, past))
			if code != 1 || !strings.Contains(out, r.label) || !strings.Contains(out, "goal "+r.bound(r.goal)+": NOT met") {
				t.Fatalf("%s at %g, past its goal %s: exit %d, want 1 and NOT met:\n%s", r.label, past, r.bound(r.goal), code, out)
			}
			if code, out := runOn(t, at(t, in, r, within)); code != 0 {
				t.Fatalf("%s at %g, within its goal %s: exit %d, want 0:\n%s", r.label, within, r.bound(r.goal), code, out)
			}
		})
	}
}

// A target being worked toward is reported, never failing: missed or not measured.
func TestReport_TargetsNeverFail(t *testing.T) {
	in := canned(t)
	needed := map[string]bool{}
	for _, r := range goalRows() {
		for _, b := range r.benches() {
			needed[b] = true
		}
	}
	dropped := 0
	for _, r := range rows {
		if r.goal != 0 || r.target == 0 {
			continue
		}
		missed := at(t, in, r, r.target*0.5)
		if !r.ratio() {
			missed = at(t, in, r, r.target*2)
		}
		if code, out := runOn(t, missed); code != 0 || !strings.Contains(out, "target "+r.bound(r.target)+": not yet") {
			t.Errorf("%s missing its target: exit %d, want 0 and not yet:\n%s", r.label, code, out)
		}
		for _, b := range r.benches() {
			if !needed[b] {
				in = withoutBenchmark(in, b)
				dropped++
			}
		}
	}
	if dropped == 0 {
		t.Fatal("no target's benchmark could be dropped")
	}
	if code, out := runOn(t, in); code != 0 {
		t.Fatalf("without the targets' benchmarks: exit %d, want 0:\n%s", code, out)
	}
}

// -only judges the rows it selects and no others (make idle runs one benchmark).
func TestReport_OnlyJudgesTheRowsItSelects(t *testing.T) {
	var idle []string
	for _, l := range strings.Split(canned(t), "\n") {
		if strings.HasPrefix(l, "BenchmarkIdleSessions-") {
			idle = append(idle, l)
		}
	}
	if len(idle) != 1 {
		t.Fatalf("%d BenchmarkIdleSessions lines in the canned run", len(idle))
	}
	if code, out := runOn(t, idle[0], "-only", "^IdleSessions$"); code != 0 || !strings.Contains(out, "RSS per idle STREAM session") {
		t.Fatalf("-only IdleSessions on its own output: exit %d:\n%s", code, out)
	}
	if code, _ := runOn(t, idle[0]); code != 1 {
		t.Fatalf("IdleSessions alone without -only: exit %d, want 1 (every other goal not measured)", code)
	}
}

// Every goal sits 15-20% short of the median of the three runs it was set from (a
// figure with a most: 15-20% over it), not several times under: a goal far from what
// the machine does lets a regression of that size pass. why explains an exception.
func TestGoals_SitJustShortOfTheMeasuredMedian(t *testing.T) {
	for _, r := range goalRows() {
		if len(r.runs) != 3 {
			t.Errorf("%s: %d runs recorded, want 3", r.label, len(r.runs))
			continue
		}
		if r.why != "" {
			continue
		}
		m := r.median()
		short := 1 - r.goal/m // a ratio's goal is short of the median by this share
		if !r.ratio() {
			short = 1 - m/r.goal // a figure's goal is over the median: the median is short of it
		}
		if short < 0.14 || short > 0.21 {
			t.Errorf("%s: goal %s is %.0f%% short of the median %s, not 15-20%%", r.label, r.bound(r.goal), 100*short, r.measured())
		}
	}
	for _, r := range rows {
		if !r.within(r.median(), r.goal) && r.goal != 0 && len(r.runs) > 0 {
			t.Errorf("%s: the median %s misses the goal %s", r.label, r.measured(), r.bound(r.goal))
		}
	}
}

// docs/benchmarks.md shows the table of rows as -markdown prints it: the goals and
// targets live in one table, and the docs cannot drift from it.
func TestDocs_ShowTheReportsTable(t *testing.T) {
	b, err := os.ReadFile("../../docs/benchmarks.md")
	if err != nil {
		t.Fatal(err)
	}
	const begin, end = "<!-- the table: go run ./test/benchreport -markdown -->\n", "<!-- end of the table -->"
	doc := string(b)
	i, j := strings.Index(doc, begin), strings.Index(doc, end)
	if i < 0 || j < i {
		t.Fatalf("docs/benchmarks.md has no table between %q and %q", begin, end)
	}
	var want bytes.Buffer
	markdown(&want)
	if got := doc[i+len(begin) : j]; got != want.String() {
		t.Errorf("docs/benchmarks.md's table is not benchreport's; replace it with the output of go run ./test/benchreport -markdown:\n%s", want.String())
	}
}
