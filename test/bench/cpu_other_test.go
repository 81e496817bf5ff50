//go:build !unix

package bench

import "testing"

// cpuPerOp reports nothing where getrusage is not available.
func cpuPerOp(*testing.B) (stop func()) { return func() {} }
