// Package proc runs real meshnode processes for tests: it builds the binary once per
// test binary, starts processes on loopback (OS-chosen ports unless told otherwise),
// reads where they listen from their output, signals them (SIGSTOP, SIGKILL), and reads
// their admin endpoints (/v1/members, /v1/actors, /metrics) and their memory.
package proc
