// Command meshnode runs one meshnode process: a node of the mesh (gossip membership,
// records between nodes) that serves the sample application (package
// examples/sampleapp: its session on the STREAM listeners, its room Actors, its
// services), and an admin HTTP address with /metrics, /healthz, /readyz, the /v1 API
// and the dashboard. Its other commands operate a fleet through a node's admin API or
// its STREAM listener.
//
// Usage:
//
//	meshnode [serve] [flags]   run a node until SIGINT or SIGTERM, then drain
//	meshnode members           the mesh members as a node sees them, with their versions
//	meshnode actors            the node's Actors
//	meshnode sessions          session counts, then the node's sessions and bindings
//	meshnode relocate ID RID   move an Actor, with its state, to another node
//	meshnode drain             move the node's Actors away, drain, leave
//	meshnode call M JSON       one service call over STREAM
//	meshnode watch M           one JSON line per value of a state member or per event
//	meshnode bench             load a node over STREAM and report rates and latencies
//	meshnode config            the configuration serve would run with, and its sources
//	meshnode version           the build and the wire versions this binary speaks
//	meshnode help [COMMAND]    the commands, or one command's flags
//
// The table in commands.go is the one list (meshnode --help prints it, with each
// command's arguments). Without flags serve listens on loopback only: STREAM
// tcp://127.0.0.1:7400 and ws://127.0.0.1:7401/, gossip 127.0.0.1:7946, records
// 127.0.0.1:8090, admin 127.0.0.1:9464; docs/security.md says what it takes to listen
// elsewhere.
package main
