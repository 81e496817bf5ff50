//go:build !unix

package session

// nbWrite is unused where non-blocking writes are not made (see writenow_unix.go).
type nbWrite struct{}

// writeNow reports false: every frame produced outside a turn is written by a drain
// goroutine.
func (c *conn) writeNow() bool { return false }
