package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// row is one line of the report: a throughput ratio of two benchmarks of one run, or a
// figure a benchmark reports itself (b.ReportMetric, allocs/op). rows is the one table
// of goals and targets; docs/benchmarks.md shows it (benchreport -markdown prints it,
// and a test keeps the two equal).
type row struct {
	label string
	bench string
	// baseline, for a ratio: the benchmark whose ns/op over bench's is the ratio.
	baseline string
	// unit, for a figure: its unit. An x-...-time unit is a time ratio measured in
	// alternation (alternate in test/bench): its throughput ratio, the inverse, is what
	// goal and target bound.
	unit string
	// goal, when not 0, is the least throughput ratio (a ratio, an x- figure) or the
	// most a figure may be; a miss, or a benchmark that did not run, fails the report.
	goal float64
	// target, when not 0, is a figure an open issue works toward, bounded like goal:
	// reported, never failing.
	target float64
	// floor, when set, is the raw benchmark of a leg that the benchmark has and its
	// baseline has not (a STREAM round trip in front of a cross-node one): even with
	// that leg at its floor and the rest free of cost, the ratio cannot pass
	// baseline / (baseline + floor), which is printed as the ceiling.
	floor string
	// crossFloor, when set, is the cheapest round trip of the cross-node leg (one-way
	// sends both ways, no future): the ceiling then counts that leg at it instead of
	// at the baseline, baseline / (crossFloor + floor).
	crossFloor string
	// runs are what three runs of make bench measured on the project's 2-core machine,
	// in the terms goal bounds (docs/benchmarks.md says when and how). A goal sits
	// 15-20% short of their median (a test checks it), unless why says otherwise.
	runs []float64
	why  string
}

// ratio reports whether the row is a throughput ratio (higher is better), as opposed
// to a figure with a most it may be.
func (r row) ratio() bool { return r.baseline != "" || strings.HasPrefix(r.unit, "x-") }

// benches are the benchmarks the row needs.
func (r row) benches() []string {
	if r.baseline != "" {
		return []string{r.bench, r.baseline}
	}
	return []string{r.bench}
}

var rows = []row{
	// Goals, each judged on a figure measured in alternation with its baseline (run
	// minutes apart, a benchmark and its baseline see different machines here: a goal
	// 15-20% short of the median then missed by chance), or on a count or a time a
	// benchmark reports. runs: the three runs of docs/benchmarks.md, as throughput
	// ratios (the inverse of an x- figure) or as the figure.
	{label: "(b) connector echo, 1 conn, vs (a) raw TCP ping-pong, interleaved", bench: "ConnectorEchoInterleaved", unit: "x-raw-pingpong-time",
		goal: 0.53, runs: []float64{1 / 1.546, 1 / 1.495, 1 / 1.554}},
	{label: "(c) connector echo, 100 conns, vs raw TCP, 100 conns, interleaved", bench: "ConnectorEcho100ConnsInterleaved", unit: "x-raw-100conns-time",
		goal: 0.48, runs: []float64{1 / 1.577, 1 / 2.317, 1 / 1.722}},
	{label: "bound request/response, Actor on another node, vs raw remote request, interleaved", bench: "BoundRequestCrossNodeInterleaved", unit: "x-raw-remote-request-time",
		goal: 0.39, runs: []float64{1 / 1.923, 1 / 2.134, 1 / 2.143}},
	// The plugin-services issue's goal, >= 80% of a bound room.echo's throughput, is the
	// target: 15-20% short of what this machine measures is under it.
	{label: "session-service call, worker on another node, vs bound room.echo, interleaved", bench: "ServiceCallSessionInterleaved", unit: "x-bound-echo-time",
		goal: 0.69, target: 0.80, runs: []float64{1 / 1.182, 1 / 1.190, 1 / 1.100}},
	// The plugin-services issue's goal, >= 60% of the plain echo's throughput, is the
	// target: this machine, loaded by other tenants, measures 52-58% in alternation
	// (the code of a68bc64, where a quiet box measured 78%, too).
	{label: "server-service call over STREAM vs the plain echo Request, interleaved", bench: "ServiceCallServerInterleaved", unit: "x-echo-time",
		goal: 0.46, target: 0.60, runs: []float64{1 / 1.719, 1 / 1.795, 1 / 1.920}},
	// The fast paths stay only while they earn their keep: each must beat its switch.
	{label: "fast path: connector echo vs the same with caller reads off, interleaved", bench: "ConnectorEchoCallerReadsInterleaved", unit: "x-no-caller-reads-time",
		goal: 1.03, runs: []float64{1 / 0.7995, 1 / 0.7942, 1 / 0.8139}},
	{label: "fast path: server echo vs the same with inline turns off, interleaved", bench: "ServerEchoInlineTurnsInterleaved", unit: "x-no-inline-turns-time",
		goal: 1.00, runs: []float64{1 / 0.8371, 1 / 0.8208, 1 / 0.8378}},
	{label: "fast path: pipelined Sends into a session reusing them vs keeping them, interleaved", bench: "ServerPipelinedReusedInterleaved", unit: "x-kept-packets-time",
		goal: 1.84, runs: []float64{1 / 0.4483, 1 / 0.4217, 1 / 0.4460}},
	{label: "server allocations per echo round trip", bench: "ServerEchoRawClient", unit: "allocs/op",
		goal: 1, runs: []float64{1, 1, 1}, why: "a count: one allocation more is a regression of the hot path, whatever the machine"},
	{label: "failure detection, 3 nodes, lan timing", bench: "FailureDetectionLAN", unit: "s/detect",
		goal: 2.8, runs: []float64{2.347, 2.344, 2.347}},
	{label: "convergence of 30 nodes, lan timing", bench: "Convergence30NodesLAN", unit: "s/converge",
		goal: 0.5, runs: []float64{0.584, 0.398, 0.289}},
	{label: "RSS per idle STREAM session", bench: "IdleSessions", unit: "KiB-rss/session",
		goal: 8.2, runs: []float64{6.728, 6.961, 6.695}},
	{label: "goroutines per idle STREAM session", bench: "IdleSessions", unit: "goroutines/session",
		goal: 1.05, runs: []float64{1.022, 1.036, 1.022},
		why: "a count: an idle session holds one goroutine (its reader), and 5% is room for the server's own; 20% would let one session in five hold a second"},
	{label: "heap left after binding and unbinding 10,000 sessions", bench: "BindUnbind10kSessions", unit: "KiB-heap-delta",
		goal: 450, runs: []float64{366.6, 306.2, 414.6}},
	// The relocation issue asked for at most 50 ms in 99 moves of 100.
	{label: "relocation pause p99, 3 nodes, 1,000 requests/s", bench: "RelocationPause", unit: "pause-p99-ms",
		goal: 6.4, runs: []float64{5.275, 3.829, 5.643}},

	// Topics: one publisher to N subscribers over three nodes, each message to every
	// subscriber before the next, in alternation with the same frames written to the same
	// sockets from a plain loop. The topics issue asked for >= 50% of that baseline.
	{label: "topic fan-out to 1,000 subscribers over 3 nodes vs the same frames from a plain loop, interleaved", bench: "TopicFanOut/subscribers=1000", unit: "x-baseline-time",
		goal: 0.82, runs: []float64{1 / 0.9816, 1 / 1.077, 1 / 1.007}},
	{label: "topic fan-out to 10,000 subscribers over 3 nodes vs the same frames from a plain loop, interleaved", bench: "TopicFanOut/subscribers=10000", unit: "x-baseline-time",
		goal: 0.79, runs: []float64{1 / 1.060, 1 / 0.9795, 1 / 1.046}},
	// The topics issue asked for a p99 under 50 ms at 10,000 subscribers: the target.
	// The baseline, the same frames written to the same sockets from a plain loop,
	// measures 116-221 ms here (baseline-p99-ms): the sockets' writes on two shared cores,
	// not the topic, set it.
	{label: "topic fan-out to 10,000 subscribers, publish to delivery p99", bench: "TopicFanOut/subscribers=10000", unit: "p99-ms",
		goal: 180, target: 50, runs: []float64{130.7, 153.4, 152.7}},

	// Plugin services (docs/services.md): a session worker's replicated state fanned out
	// to 1,000 presentations over three nodes, each update to every presentation before
	// the next, in alternation with a plain Send of the same JSON to the same sessions;
	// and one subscriber that does not read, flooded with events until its bound trips.
	{label: "replicated state to 1,000 presentations over 3 nodes vs a plain Send to the same sessions, interleaved", bench: "ServiceStateFanOut", unit: "x-baseline-time",
		goal: 0.85, runs: []float64{1 / 0.9689, 1 / 0.9476, 1 / 1.002}},
	{label: "server heap per state subscription, 1,000 presentations over 3 nodes", bench: "ServiceStateFanOut", unit: "KiB-heap/subscription",
		goal: 2.25, runs: []float64{1.858, 1.864, 1.736}},
	// The benchmark fails by itself unless the queue is the bound to within one event
	// (0.13 KiB); this row keeps it from going unmeasured (/proc/net/tcp: Linux only).
	{label: "the server's queue when a subscriber that does not read trips its bound (MaxPendingWrite, 1,024 KiB)", bench: "ServiceEventsUntilBound", unit: "KiB-queued-at-trip",
		goal: 1025, runs: []float64{1024, 1024, 1024},
		why: "a bound: the session queue's soft limit, 1,024 KiB, whatever the machine; the benchmark fails by itself past one event over or under it"},

	// Actor state (docs/persistence.md): a save through the Actor API (a request whose
	// turn saves, then replies) in alternation with a plain write to the same store. The
	// persistence issue asked for >= 80% of the raw store: the target; the goal sits
	// 15-20% short of this machine's median, whose fsyncs take 0.5-3 ms.
	{label: "save through the Actor API vs a plain bbolt put, interleaved", bench: "PersistenceSaveBolt", unit: "x-rawbolt-time",
		goal: 0.70, target: 0.80, runs: []float64{1 / 1.192, 1 / 1.110, 1 / 1.233}},
	{label: "save through the Actor API vs a plain pgx upsert, interleaved", bench: "PersistenceSavePostgres", unit: "x-rawpgx-time",
		goal: 0.68, target: 0.80, runs: []float64{1 / 1.215, 1 / 1.202, 1 / 1.286}},

	// Targets of open issues, in alternation where measured so.
	{label: "(d) pipelined Sends, session reusing them, vs raw TCP pipelined, interleaved", bench: "ConnectorPipelinedSendInterleaved", unit: "x-raw-pipelined-time",
		target: 0.15, runs: []float64{1 / 9.295, 1 / 9.242, 1 / 9.724}},
	{label: "cross-node Actor send vs raw remote send, interleaved", bench: "ActorSendCrossNodeInterleaved", unit: "x-raw-remote-time",
		target: 0.70, runs: []float64{1 / 1.171, 1 / 1.394, 1 / 1.155}},
	{label: "bound one-way relay vs raw remote send, interleaved", bench: "BoundRelaySendCrossNodeInterleaved", unit: "x-raw-remote-time",
		target: 0.60, runs: []float64{1 / 1.788, 1 / 1.758, 1 / 1.796}},
	{label: "bound request/response, Actor on another node, vs raw remote request", bench: "BoundRequestCrossNode", baseline: "RawRemoteRequest",
		target: 0.85, floor: "RawTCPPingPong", crossFloor: "RawRemotePingPong", runs: []float64{0.328, 0.613, 0.437}},
	{label: "bound request/response, 100 sessions, vs raw remote request, 100 callers", bench: "BoundRequestCrossNode100Sessions", baseline: "RawRemoteRequest100Callers",
		target: 0.60, floor: "RawTCP100Conns", runs: []float64{0.193, 0.320, 0.321}},

	// What the mesh's protections cost (docs/security.md): the same work on a fleet with
	// mutual TLS and encrypted gossip and on one without, in alternation. Targets: the
	// secured fleet at >= 87% of the plain one's throughput one-way, >= 80% per round
	// trip.
	{label: "cross-node Actor send, mTLS fleet vs plain fleet, interleaved", bench: "ActorSendCrossNodeTLSInterleaved", unit: "x-plain-time",
		target: 0.87, runs: []float64{1 / 0.9951, 1 / 1.013, 1 / 1.045}},
	{label: "bound request round trip, mTLS fleet vs plain fleet, interleaved", bench: "BoundRequestCrossNodeTLSInterleaved", unit: "x-plain-time",
		target: 0.80, runs: []float64{1 / 1.164, 1 / 1.235, 1 / 1.152}},
	{label: "bound one-way relay, mTLS fleet vs plain fleet, interleaved", bench: "BoundRelaySendCrossNodeTLSInterleaved", unit: "x-plain-time",
		target: 0.87, runs: []float64{1 / 0.9937, 1 / 0.9916, 1 / 1.008}},

	// Shown without a goal: latencies and throughputs of the plugin services'
	// benchmarks, absolute figures that other tenants move 2-3x here.
	{label: "replicated state to 1,000 presentations over 3 nodes, Set to delivery p99", bench: "ServiceStateFanOut", unit: "p99-ms",
		runs: []float64{9.074, 11.56, 13.35}},
	{label: "events to one subscriber that does not read, until its bound trips", bench: "ServiceEventsUntilBound", unit: "events/s",
		runs: []float64{215739, 252176, 264996}},
	{label: "a turn that saves (bbolt) vs the same turn of a kind that does not persist, interleaved", bench: "PersistenceTurnCost", unit: "x-memory-time",
		runs: []float64{1 / 48.08, 1 / 47.43, 1 / 41.02}},

	// Shown without a goal: the same figures run apart, and where the time goes.
	{label: "(b) connector echo, 1 conn, vs (a) raw TCP ping-pong", bench: "ConnectorEcho", baseline: "RawTCPPingPong", runs: []float64{0.550, 0.789, 0.578}},
	{label: "server share: raw client echo vs (a) raw TCP ping-pong", bench: "ServerEchoRawClient", baseline: "RawTCPPingPong", runs: []float64{0.781, 0.869, 0.894}},
	{label: "(c) connector echo, 100 conns, vs raw TCP, 100 conns", bench: "ConnectorEcho100Conns", baseline: "RawTCP100Conns", runs: []float64{0.883, 1.588, 0.344}},
	{label: "server share: raw clients, 100 conns, vs raw TCP, 100 conns", bench: "ServerEcho100ConnsRawClient", baseline: "RawTCP100Conns", runs: []float64{0.741, 0.590, 1.132}},
	{label: "(d) pipelined Sends, session reusing them, vs raw TCP pipelined", bench: "ConnectorPipelinedSendReused", baseline: "RawTCPPipelined", runs: []float64{0.106, 0.063, 0.153}},
	{label: "(d) pipelined Sends, session keeping them (the default), vs raw TCP pipelined", bench: "ConnectorPipelinedSend", baseline: "RawTCPPipelined", runs: []float64{0.043, 0.040, 0.086}},
	{label: "server share: raw client pipelined Sends, reused, vs raw TCP pipelined", bench: "ServerPipelinedRawClientReused", baseline: "RawTCPPipelined", runs: []float64{0.284, 0.192, 0.239}},
	{label: "server share: raw client pipelined Sends vs raw TCP pipelined", bench: "ServerPipelinedRawClient", baseline: "RawTCPPipelined", runs: []float64{0.145, 0.107, 0.078}},
	{label: "cross-node Actor send vs raw remote send", bench: "ActorSendCrossNode", baseline: "RawRemoteSend", runs: []float64{0.537, 1.345, 1.293}},
	{label: "cross-node Actor send, the message passed by value, vs raw remote send", bench: "ActorSendCrossNodeByValue", baseline: "RawRemoteSend", runs: []float64{0.720, 0.652, 1.247}},
	{label: "cross-node Actor send vs raw remote send of a record-sized message", bench: "ActorSendCrossNode", baseline: "RawRemoteSendRecordSized", runs: []float64{1.446, 2.183, 1.420}},
	{label: "bound request/response, Actor on the same node, vs raw remote request", bench: "BoundRequestSameNode", baseline: "RawRemoteRequest", runs: []float64{1.551, 1.824, 1.328}},
	{label: "bound one-way relay vs raw remote send", bench: "BoundRelaySendCrossNode", baseline: "RawRemoteSend", runs: []float64{0.639, 0.893, 0.469}},
	{label: "server-service call over STREAM vs the plain echo Request", bench: "ServiceCallServer", baseline: "ConnectorEcho", runs: []float64{0.590, 0.400, 0.513}},
	{label: "session-service call, worker on another node, vs bound room.echo", bench: "ServiceCallSessionCrossNode", baseline: "BoundRequestCrossNode", runs: []float64{1.653, 0.682, 0.781}},
	{label: "fast path: connector echo vs the same with caller reads off", bench: "ConnectorEcho", baseline: "ConnectorEchoNoCallerReads", runs: []float64{1.112, 1.598, 1.245}},
	{label: "fast path: server echo vs the same with inline turns off", bench: "ServerEchoRawClient", baseline: "ServerEchoRawClientNoInlineTurns", runs: []float64{1.840, 1.569, 1.949}},
	{label: "fast path: pipelined Sends into a session reusing them vs keeping them", bench: "ServerPipelinedRawClientReused", baseline: "ServerPipelinedRawClient", runs: []float64{1.960, 1.795, 3.050}},
}

// result is what one benchmark line reported.
type result struct {
	nsPerOp float64
	figures map[string]float64 // every other unit: allocs/op, s/converge, user-us/op ...
}

// cpuUnits are the units of a benchmark's CPU accounting (cpuPerOp in test/bench).
var cpuUnits = []string{"user-us/op", "sys-us/op", "ctxsw/op"}

// parse reads `go test -bench` output: the last line of each benchmark (without its
// -GOMAXPROCS suffix) wins.
func parse(in io.Reader) (map[string]result, error) {
	results := map[string]result{}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		name := strings.TrimPrefix(f[0], "Benchmark")
		if i := strings.LastIndexByte(name, '-'); i > 0 {
			name = name[:i]
		}
		r := result{figures: map[string]float64{}}
		for i := 1; i+1 < len(f); i++ {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			if unit := f[i+1]; unit == "ns/op" {
				r.nsPerOp = v
			} else {
				r.figures[unit] = v
			}
		}
		if r.nsPerOp > 0 {
			results[name] = r
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read benchmark output: %w", err)
	}
	return results, nil
}

// ownMetric reports whether unit is a figure a benchmark reports of its own (a time,
// a size, a ratio), listed under "measured figures".
func ownMetric(unit string) bool {
	return strings.HasPrefix(unit, "s/") || strings.HasPrefix(unit, "KiB-") || strings.HasPrefix(unit, "goroutines/") ||
		strings.HasSuffix(unit, "-ms") || strings.HasPrefix(unit, "x-")
}

// value is the row's figure in this run, as goal and target bound it (a throughput
// ratio, or the figure itself); ok is false when a benchmark it needs did not run.
func (r row) value(results map[string]result) (v float64, ok bool) {
	b, okB := results[r.bench]
	if r.baseline != "" {
		a, okA := results[r.baseline]
		if !okA || !okB {
			return 0, false
		}
		return a.nsPerOp / b.nsPerOp, true
	}
	if !okB {
		return 0, false
	}
	v, ok = b.figures[r.unit]
	if !ok {
		return 0, false
	}
	if strings.HasPrefix(r.unit, "x-") {
		if v <= 0 {
			return 0, false
		}
		return 1 / v, true
	}
	return v, true
}

// within reports whether v is within bound (a least ratio, or a most figure).
func (r row) within(v, bound float64) bool {
	if r.ratio() {
		return v >= bound
	}
	return v <= bound
}

// bound prints a goal or a target: ">= 65%" for a ratio (with the time ratio an x-
// unit must stay under), "<= 3.5 s/detect" for a figure.
func (r row) bound(b float64) string {
	switch {
	case r.baseline != "":
		return fmt.Sprintf(">= %.0f%%", 100*b)
	case r.ratio():
		return fmt.Sprintf(">= %.0f%% (%s <= %.3g)", 100*b, r.unit, 1/b)
	}
	return fmt.Sprintf("<= %s %s", strconv.FormatFloat(b, 'g', 4, 64), r.unit)
}

// show prints the row's figure in this run.
func (r row) show(v float64, results map[string]result) string {
	switch {
	case r.baseline != "":
		return fmt.Sprintf("%5.1f%%", 100*v)
	case r.ratio():
		return fmt.Sprintf("%5.1f%% (%.3f %s)", 100*v, results[r.bench].figures[r.unit], r.unit)
	}
	return fmt.Sprintf("%s %s", figure(v, 4), r.unit)
}

// figure prints v with prec significant digits, or whole when it has more digits than
// that (1024 KiB, events/s), not in e-notation.
func figure(v float64, prec int) string {
	if v >= math.Pow10(prec) {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'g', prec, 64)
}

// report prints every row that only selects (nil: all) against results and returns
// how many goals were missed, counting a goal whose benchmark did not run as missed.
func report(w io.Writer, results map[string]result, only *regexp.Regexp) (missed int) {
	fmt.Fprintln(w)
	fmt.Fprintln(w, "goals, targets and ratios (a ratio: throughput of the benchmark / throughput of its baseline, same run):")
	for _, r := range rows {
		if only != nil && !only.MatchString(r.bench) {
			continue
		}
		v, ok := r.value(results)
		if !ok {
			verdict := "(not measured)"
			if r.goal != 0 {
				verdict = fmt.Sprintf("goal %s: NOT measured (%s did not run)", r.bound(r.goal), strings.Join(r.benches(), " or "))
				missed++
			}
			fmt.Fprintf(w, "  %-80s  %s\n", r.label, verdict)
			continue
		}
		verdict := ""
		if r.goal != 0 {
			verdict = "goal " + r.bound(r.goal) + ": met"
			if !r.within(v, r.goal) {
				verdict = "goal " + r.bound(r.goal) + ": NOT met"
				missed++
			}
		}
		if r.target != 0 {
			state := "reached"
			if !r.within(v, r.target) {
				state = "not yet"
			}
			verdict += "  target " + r.bound(r.target) + ": " + state
		}
		if f, ok := results[r.floor]; ok {
			a := results[r.baseline]
			cross, what := a.nsPerOp, ""
			if c, ok := results[r.crossFloor]; ok {
				cross, what = c.nsPerOp, " and the cross-node leg at a raw remote ping-pong"
			}
			verdict += fmt.Sprintf("  (ceiling with a STREAM leg at the raw TCP floor%s: %.0f%%)", what, 100*a.nsPerOp/(cross+f.nsPerOp))
		}
		fmt.Fprintf(w, "  %-80s  %s  %s\n", r.label, r.show(v, results), strings.TrimSpace(verdict))
		if r.baseline == "" {
			continue
		}
		b, a := results[r.bench], results[r.baseline]
		if r.floor != "" {
			if line := cpuLine(b, a, results[r.floor]); line != "" {
				fmt.Fprintf(w, "  %-80s  %s\n", "", line)
			}
		} else if line := cpuShare(b, a); line != "" {
			fmt.Fprintf(w, "  %-80s  %s\n", "", line)
		}
	}
	return missed
}

// cpuShare compares the CPU time (user and system) a benchmark and its baseline spend
// per operation, as a ratio like the throughput one. When both keep the machine's
// cores busy (one-way floods), it is the same figure without one source of a shared
// machine's noise: time stolen by other tenants stretches the wall clock, not the CPU
// time (a baseline whose batching changes from run to run still moves both). Empty
// when one of them was not measured.
func cpuShare(b, a result) string {
	cb, okB := cpuTotal(b)
	ca, okA := cpuTotal(a)
	if !okA || !okB || cb == 0 {
		return ""
	}
	return fmt.Sprintf("CPU per op: %.3g µs against the baseline's %.3g µs: %.1f%%", cb, ca, 100*ca/cb)
}

// cpuTotal is a benchmark's user and system time per op, in µs.
func cpuTotal(r result) (float64, bool) {
	u, ok1 := r.figures["user-us/op"]
	s, ok2 := r.figures["sys-us/op"]
	return u + s, ok1 && ok2
}

// cpuLine compares the CPU a benchmark spends per operation with what its baseline and
// floor spend together: when the two are about equal, the ratio is at its ceiling for
// this machine's system calls and thread wake-ups. Empty when one was not measured.
func cpuLine(b, a, f result) string {
	sum := func(r ...result) (v [3]float64, ok bool) {
		for _, x := range r {
			for i, u := range cpuUnits {
				m, found := x.figures[u]
				if !found {
					return v, false
				}
				v[i] += m
			}
		}
		return v, true
	}
	mine, ok1 := sum(b)
	theirs, ok2 := sum(a, f)
	if !ok1 || !ok2 {
		return ""
	}
	return fmt.Sprintf("per op: %.0f µs user + %.0f µs system, %.2f context switches; baseline and floor together: %.0f + %.0f µs, %.2f",
		mine[0], mine[1], mine[2], theirs[0], theirs[1], theirs[2])
}

// printMetrics lists the figures benchmarks report of their own (convergence, failure
// detection, time ratios measured in alternation).
func printMetrics(w io.Writer, results map[string]result) {
	var lines []string
	for n, r := range results {
		for unit, v := range r.figures {
			if ownMetric(unit) {
				lines = append(lines, fmt.Sprintf("  %-40s %10.3f %s", n, v, unit))
			}
		}
	}
	if len(lines) == 0 {
		return
	}
	sort.Strings(lines)
	fmt.Fprintln(w, "measured figures:")
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
}

// markdown prints the table of rows for docs/benchmarks.md.
func markdown(w io.Writer) {
	fmt.Fprintln(w, "| Figure | Benchmark | Goal | Target | Measured (median of 3, range) |")
	fmt.Fprintln(w, "|---|---|---|---|---|")
	for _, r := range rows {
		bench := "`" + r.bench + "`"
		if r.baseline != "" {
			bench += " / `" + r.baseline + "`"
		} else {
			bench += " `" + r.unit + "`"
		}
		goal, target := "—", "—"
		if r.goal != 0 {
			goal = r.bound(r.goal)
			if r.why != "" {
				goal += " (" + r.why + ")"
			}
		}
		if r.target != 0 {
			target = r.bound(r.target)
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", r.label, bench, goal, target, r.measured())
	}
}

// median is the median of the row's runs (0 without runs).
func (r row) median() float64 {
	if len(r.runs) == 0 {
		return 0
	}
	s := slices.Clone(r.runs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// measured prints the row's runs as their median and range.
func (r row) measured() string {
	if len(r.runs) == 0 {
		return "—"
	}
	f := func(v float64) string {
		if r.ratio() {
			return fmt.Sprintf("%.1f%%", 100*v)
		}
		return figure(v, 3)
	}
	unit := ""
	if !r.ratio() {
		unit = " " + r.unit
	}
	return fmt.Sprintf("%s%s (%s–%s)", f(r.median()), unit, f(slices.Min(r.runs)), f(slices.Max(r.runs)))
}

func main() { os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)) }

// run is the command: it returns the exit code, 1 when a goal was missed or not
// measured, 2 on bad usage or unreadable input.
func run(args []string, in io.Reader, out, errw io.Writer) int {
	fs := flag.NewFlagSet("benchreport", flag.ContinueOnError)
	fs.SetOutput(errw)
	md := fs.Bool("markdown", false, "print the table of goals and targets for docs/benchmarks.md and exit")
	onlyFlag := fs.String("only", "", "judge only the rows whose benchmark matches this regular expression (make idle: IdleSessions)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *md {
		markdown(out)
		return 0
	}
	var only *regexp.Regexp
	if *onlyFlag != "" {
		var err error
		if only, err = regexp.Compile(*onlyFlag); err != nil {
			fmt.Fprintln(errw, "benchreport: -only:", err)
			return 2
		}
	}
	results, err := parse(in)
	if err != nil {
		fmt.Fprintln(errw, "benchreport:", err)
		return 2
	}
	missed := report(out, results, only)
	printMetrics(out, results)
	if missed > 0 {
		fmt.Fprintf(out, "\nbenchreport: %d goal(s) missed or not measured\n", missed)
		return 1
	}
	return 0
}
