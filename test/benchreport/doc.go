// Command benchreport reads `go test -bench` output on stdin and prints each benchmark
// against its baseline from the same run, as throughput ratios. Absolute figures drift
// 2-3x on shared machines; ratios measured in one run hold. It exits 1 when a goal is
// missed (a figure the project holds itself to) and only reports a target (a figure
// an open issue is working toward).
package main
