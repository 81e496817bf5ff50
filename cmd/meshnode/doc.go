// Command meshnode runs one meshnode process: a node of the mesh (gossip membership,
// records between nodes) that serves the sample application (package
// examples/sampleapp: its session on the STREAM listeners, its room Actors), and an
// admin HTTP address with /metrics, /healthz, /readyz, /v1/members and /v1/actors.
//
// Usage:
//
//	meshnode [serve] [flags]      serve until SIGINT or SIGTERM, then drain (see -h)
//	meshnode members [-admin A]   print the mesh members seen by the node at admin address A
//	meshnode version              print the version
//
// Without flags it serves on loopback only: STREAM tcp://127.0.0.1:7400 and
// ws://127.0.0.1:7401/, gossip 127.0.0.1:7946, records 127.0.0.1:8090, admin
// 127.0.0.1:9464. The main flags are -stream (repeatable), -join host:port
// (repeatable), -mesh, -remote, -advertise-host, -node-id, -admin, -tls-cert and
// -tls-key, -drain-timeout and -log-level.
package main
