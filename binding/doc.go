// Package binding will hold the session <-> Actor binding protocol, both roles: bind
// (records 38 and 20), relay (24), push (36), replacement (51), tombstones and the
// relocation barrier (42/43/44). It composes session/ and actor/ + mesh/; neither of
// those knows about it. Not built yet: see the open issue on binding.
package binding
