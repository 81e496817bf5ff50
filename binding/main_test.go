package binding

import (
	"testing"

	"go.uber.org/goleak"
)

// Every goroutine the binding starts (flushers, seal timers, the fleets of the
// black-box tests) must be gone when the tests end.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
