// Package meshnode starts a node of a meshnode fleet with one call: its place in the
// mesh (gossip membership and the record transport between nodes), the Actors it hosts,
// the binding of client sessions to Actors anywhere in the mesh, and its STREAM
// listeners (tcp, tls, ws, wss; wire compatible with the zlink Stream Connector).
//
//	cfg := meshnode.DefaultLANConfig()
//	cfg.Kinds = []actor.Kind{{Name: "room", New: func() actor.Actor { return &Room{} }}}
//	cfg.Session = func(n *meshnode.Node) session.SessionType { return myMux(n).Type() }
//	node, err := meshnode.Start(ctx, cfg)
//	...
//	defer node.Shutdown(ctx)
//
// The parts are packages of their own: session (the STREAM server, session.Mux),
// actor (Actors, typed messages, requests), binding (sessions bound to Actors), mesh
// (membership and records), fault (the error model). mesh/meshtest starts in-process
// fleets for tests.
package meshnode
