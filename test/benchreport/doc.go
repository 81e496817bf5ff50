// Command benchreport reads `go test -bench` output on stdin and judges it against the
// project's one table of goals and targets (rows; docs/benchmarks.md shows it, printed
// by `benchreport -markdown`). A goal is a figure the project holds itself to: missed,
// or not measured because its benchmark did not run, it makes benchreport exit 1. A
// target is a figure an open issue works toward: reported only.
//
// Every goal is a ratio measured in alternation with its baseline (blocks of each
// taking turns in one benchmark: absolute figures drift 2-3x on shared machines, and
// a benchmark and its baseline run minutes apart see different machines) or a count
// or a time a benchmark reports itself. Each sits 15-20% short of the median of three
// runs on the project's machine. The same figures run apart are shown too, with the
// CPU time each side spent per operation; a benchmark that has a leg its baseline has
// not (a STREAM round trip in front of a cross-node one) is also shown against its
// ceiling.
//
// -only REGEXP judges only the rows whose benchmark matches (make idle runs one).
package main
