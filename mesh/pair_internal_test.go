package mesh

import (
	"context"
	"log/slog"
	"testing"
	"time"
)

// startPair starts two quiet nodes on the test timing, with cfg's other settings (the
// flow window, say), b joined through a, and returns them once each sees the other
// live. They leave at cleanup.
func startPair(t *testing.T, ctx context.Context, cfg Config) (a, b *Node) {
	t.Helper()
	cfg.Preset, cfg.Logger = PresetTest, slog.New(slog.DiscardHandler)
	a, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Leave(context.Background()) })
	cfg.Join = []string{a.MeshAddr()}
	b, err = Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Leave(context.Background()) })
	for !a.Membership().IsLive(b.ID()) || !b.Membership().IsLive(a.ID()) {
		select {
		case <-ctx.Done():
			t.Fatal("the nodes did not see each other")
		case <-time.After(10 * time.Millisecond):
		}
	}
	return a, b
}
