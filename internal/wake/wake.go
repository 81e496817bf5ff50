package wake

import (
	"sync"
	"sync/atomic"
)

// Signal wakes every goroutine that waits on it. The zero value is ready to use.
//
// The waiting pattern is: ch := s.Wait(); re-check the condition; if it still does not
// hold, block on ch. A Notify after Wait closes ch, so no wake-up is lost between the
// check and the block.
type Signal struct {
	armed atomic.Bool
	mu    sync.Mutex
	ch    chan struct{}
}

// Wait returns a channel that is closed by the next Notify.
func (s *Signal) Wait() <-chan struct{} {
	s.mu.Lock()
	if s.ch == nil {
		s.ch = make(chan struct{})
	}
	ch := s.ch
	s.armed.Store(true)
	s.mu.Unlock()
	return ch
}

// Notify wakes every current waiter. Without waiters it only loads one atomic.
func (s *Signal) Notify() {
	if !s.armed.Load() {
		return
	}
	s.mu.Lock()
	if s.ch != nil {
		close(s.ch)
		s.ch = nil
	}
	s.armed.Store(false)
	s.mu.Unlock()
}
