//go:build unix

package session

import "syscall"

// openFilesLimit returns the process's open-files limit (Go raises the soft limit to
// the hard one at start-up), or 0 when it cannot be read.
func openFilesLimit() int {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Cur > 1<<30 {
		return 0
	}
	return int(rl.Cur)
}
