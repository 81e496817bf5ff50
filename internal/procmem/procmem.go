// Package procmem reads what the process holds of the machine: its resident memory,
// the Go heap in use, its open file descriptors and their limit, for an operator's
// view of a node (the dashboard's per-node health). It reads Linux's /proc; where that
// is missing a figure is 0 (or -1 for open files).
package procmem

import (
	"os"
	"runtime/metrics"
	"strconv"
	"strings"
	"syscall"
)

// RSS returns the process's resident set size in bytes, 0 when unknown.
func RSS() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return 0
	}
	return pages * int64(os.Getpagesize())
}

// heapSample is the runtime metric of heap memory holding live or unswept objects.
const heapSample = "/memory/classes/heap/objects:bytes"

// Heap returns the bytes of Go heap in use by objects.
func Heap() int64 {
	s := []metrics.Sample{{Name: heapSample}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return int64(s[0].Value.Uint64())
}

// OpenFiles returns the process's open file descriptors (files, sockets, pipes), -1
// when unknown.
func OpenFiles() int {
	d, err := os.Open("/proc/self/fd")
	if err != nil {
		return -1
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return -1
	}
	return len(names) - 1 // less the descriptor reading the directory
}

// MaxFiles returns the process's open-files limit (the soft one), 0 when unknown.
func MaxFiles() int64 {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0
	}
	return int64(l.Cur)
}
