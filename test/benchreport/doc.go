// Command benchreport reads `go test -bench` output on stdin and prints each benchmark
// against its baseline from the same run, as throughput ratios. Absolute figures drift
// 2-3x on shared machines; ratios measured in one run hold. It exits 1 when a goal is
// missed (a figure the project holds itself to) and only reports a target (a figure
// an open issue is working toward).
//
// A benchmark that has a leg its baseline has not (a STREAM round trip in front of a
// cross-node one) is also shown against its ceiling, and, when the benchmarks report
// their CPU accounting (user-us/op, sys-us/op, ctxsw/op), against the CPU time and
// context switches its baseline and that leg's floor spend together.
package main
