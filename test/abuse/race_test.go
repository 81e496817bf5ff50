//go:build race

package abuse

// raceEnabled: built with -race, whose slowing of the suite's own clients the latency
// bound cannot tell from the server's (see latencyFactor).
const raceEnabled = true
