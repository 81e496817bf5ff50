package wake

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestSignal_NotifyWakesEveryWaiter(t *testing.T) {
	var s Signal
	var woke sync.WaitGroup
	for range 3 {
		ch := s.Wait()
		woke.Add(1)
		go func() {
			defer woke.Done()
			<-ch
		}()
	}
	s.Notify()
	done := make(chan struct{})
	go func() { woke.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("a waiter was not woken")
	}
}

func TestSignal_NotifyBeforeWaitIsNotRemembered(t *testing.T) {
	var s Signal
	s.Notify()
	select {
	case <-s.Wait():
		t.Fatal("a notify with no waiter woke a later waiter")
	default:
	}
}

// The check-then-block pattern loses no wake-up: a condition set and notified between
// Wait and the re-check is seen by the re-check or wakes the block.
func TestSignal_NoLostWakeUp(t *testing.T) {
	var s Signal
	var cond atomic.Int64
	const rounds = 2000
	done := make(chan struct{})
	go func() {
		defer close(done)
		for want := int64(1); want <= rounds; want++ {
			for {
				ch := s.Wait()
				if cond.Load() >= want {
					break
				}
				<-ch
			}
		}
	}()
	for i := int64(1); i <= rounds; i++ {
		cond.Store(i)
		s.Notify()
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter missed a wake-up")
	}
}
