package nodert

import "github.com/meshnode/meshnode/internal/protoactor/actor"

// Hooks set by package mesh.
var (
	// SystemOf returns the actor system of a *mesh.Node.
	SystemOf func(node any) *actor.ActorSystem
	// Kill stops a *mesh.Node abruptly, without leaving (tests of failure handling).
	Kill func(node any)
	// KillNode stops a *meshnode.Node as a crash would (set by package meshnode).
	KillNode func(node any)
)
