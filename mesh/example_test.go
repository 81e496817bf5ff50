package mesh_test

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/meshnode/meshnode/mesh"
)

// Two nodes on loopback, every port chosen by the OS: the second joins the first by
// its mesh (gossip) address, and each soon sees the other as a live member.
func ExampleStart() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	quiet := slog.New(slog.DiscardHandler)

	first, err := mesh.Start(ctx, mesh.Config{Preset: mesh.PresetTest, Logger: quiet})
	if err != nil {
		fmt.Println("start:", err)
		return
	}
	defer first.Leave(context.Background())
	second, err := mesh.Start(ctx, mesh.Config{Preset: mesh.PresetTest, Logger: quiet, Join: []string{first.MeshAddr()}})
	if err != nil {
		fmt.Println("start:", err)
		return
	}
	defer second.Leave(context.Background())

	// Membership converges by gossip: poll, within a bound.
	seesOther := func(n *mesh.Node, other mesh.NodeID) bool { return n.Membership().IsLive(other) }
	for i := 0; i < 500 && !(seesOther(first, second.ID()) && seesOther(second, first.ID())); i++ {
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Println("first sees", len(first.Membership().Live()), "live members")
	fmt.Println("second sees", len(second.Membership().Live()), "live members")
	// Output:
	// first sees 2 live members
	// second sees 2 live members
}
