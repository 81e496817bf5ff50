package testkit

import (
	"testing"
	"time"
)

// Eventually polls cond every few milliseconds until it holds, and fails the test
// (naming what it waited for) when timeout passes first.
func Eventually(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	if !Within(timeout, cond) {
		tb.Fatalf("timed out after %v waiting for %s", timeout, what)
	}
}

// Within polls cond every few milliseconds until it holds (true) or timeout passes
// (false), for callers that report the failure themselves.
func Within(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		<-tick.C
	}
	return true
}

// Await waits until done is closed (or delivers), and fails the test when timeout
// passes first: a benchmark or test whose last message was lost fails instead of
// hanging.
func Await[T any](tb testing.TB, done <-chan T, timeout time.Duration, what string) T {
	tb.Helper()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case v := <-done:
		return v
	case <-t.C:
		tb.Fatalf("timed out after %v waiting for %s", timeout, what)
		var zero T
		return zero
	}
}
