// Package mesh joins meshnode processes into one mesh: node identity (RID and lifecycle
// generation), membership by gossip (hashicorp/memberlist), and the transport of
// numbered service-wire records (mesh/wire) between nodes over protoactor-go remote,
// validated before anything dispatches them.
//
// Start starts a node from a Config (Join lists the mesh addresses of nodes to join);
// Node.Membership is its view of the mesh, Node.Records its record transport, and
// Node.Leave leaves the mesh and stops it. meshnode.Start starts one for a full node.
package mesh
