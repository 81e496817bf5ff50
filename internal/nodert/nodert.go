// Package nodert hands a mesh node's protoactor runtime to the meshnode packages that
// build on the node (Actor hosting, the test kit) without exposing it: no exported
// identifier of meshnode's public packages has a protoactor type, so protoactor can be
// upgraded or replaced without breaking users. Package mesh sets the hooks in its init;
// the node is passed as `any` because this package cannot import mesh (mesh imports it).
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
