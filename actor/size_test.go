package actor_test

import (
	"errors"
	"sync"
	"testing"

	"github.com/meshnode/meshnode/actor"
	"github.com/meshnode/meshnode/fault"
	"github.com/meshnode/meshnode/mesh"
)

// A message over the limit between nodes is refused at its sender with a typed error
// (CapacityExceeded), and the link to the peer keeps working: a message sent right
// after it arrives. (Sent, it used to reach the peer's gRPC server over its message
// limit, which broke the stream and lost what else was on it.)
func TestSurface_MessageOverTheLimitBetweenNodesIsRefusedAndLosesNothingElse(t *testing.T) {
	c := startSurface(t, 2, nil)
	to := actor.Address{Kind: "replier", ID: c.idOn(t, "replier", 1)}
	ctx := reqCtx(t)
	big := actor.Message{Name: "big", ContentType: "application/octet-stream", Data: make([]byte, mesh.MaxRecordPayload+1)}
	err := c.host(0).Send(ctx, to, big)
	if !errors.Is(err, mesh.ErrRecordTooLarge) || !errors.Is(err, fault.CapacityExceeded) {
		t.Fatalf("send of %d bytes: %v, want mesh.ErrRecordTooLarge (CapacityExceeded)", len(big.Data), err)
	}
	if _, err := c.host(0).Request(ctx, to, big); !errors.Is(err, fault.CapacityExceeded) {
		t.Fatalf("request of %d bytes: %v, want CapacityExceeded", len(big.Data), err)
	}
	// Messages at the limit, several at once from several goroutines (the peer's
	// endpoint writer may take them in one run: it sends them as several gRPC messages),
	// and small ones behind them: every one arrives.
	const atLimit, senders = 3, 4
	var wg sync.WaitGroup
	for g := 0; g < senders; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < atLimit; i++ {
				m := actor.Message{Name: "full", ContentType: "application/octet-stream", Data: make([]byte, mesh.MaxRecordPayload)}
				if err := c.host(0).Send(ctx, to, m); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	if err := c.host(0).Send(ctx, to, actor.Message{Name: "small", ContentType: "application/octet-stream", Data: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitUntil(wait, func() bool {
		c.s.mu.Lock()
		defer c.s.mu.Unlock()
		return len(c.s.raw) == atLimit*senders+1
	}); err != nil {
		c.s.mu.Lock()
		defer c.s.mu.Unlock()
		t.Fatalf("the replier received %d messages, want %d", len(c.s.raw), atLimit*senders+1)
	}
}
