package stream_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test closes its host (t.Cleanup) and its clients, so nothing of the server
// (accept loops, read/write loops, session-owner actors, protoactor's system) may
// outlive the package's tests.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
