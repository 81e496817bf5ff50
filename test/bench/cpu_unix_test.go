//go:build unix

package bench

import (
	"syscall"
	"testing"
	"time"
)

// cpuPerOp starts measuring the process's CPU time (every node, server and client of a
// benchmark runs in this process); the function it returns reports it per operation
// as user-us/op and sys-us/op, with the threads' context switches as ctxsw/op.
// Latency on these machines is mostly system calls and threads woken from sleep: these
// show whether a path makes more of them than its baseline and floor do.
func cpuPerOp(b *testing.B) (stop func()) {
	start, ok := rusage()
	return func() {
		end, ok2 := rusage()
		if !ok || !ok2 || b.N == 0 {
			return
		}
		n := float64(b.N)
		b.ReportMetric(float64(end.user-start.user)/float64(time.Microsecond)/n, "user-us/op")
		b.ReportMetric(float64(end.sys-start.sys)/float64(time.Microsecond)/n, "sys-us/op")
		b.ReportMetric(float64(end.switches-start.switches)/n, "ctxsw/op")
	}
}

type cpuTimes struct {
	user, sys time.Duration
	switches  int64 // voluntary and involuntary context switches
}

func rusage() (cpuTimes, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return cpuTimes{}, false
	}
	return cpuTimes{
		user:     time.Duration(ru.Utime.Nano()),
		sys:      time.Duration(ru.Stime.Nano()),
		switches: int64(ru.Nvcsw) + int64(ru.Nivcsw),
	}, true
}
