// Package nodert hands a mesh node's protoactor runtime to the meshnode packages that
// build on the node (Actor hosting, the test kit) without exposing it: no exported
// identifier of meshnode's public packages has a protoactor type, so protoactor can be
// upgraded or replaced without breaking users. Package mesh sets SystemOf and Kill in
// its init, and package meshnode sets KillNode in its own; the node is passed as `any`
// because this package cannot import them (they import it).
package nodert
