package mesh

import "github.com/meshnode/meshnode/mesh/wire"

// RecordCounts are a node's record counters since it started, as plain numbers (the
// same counts its meshnode.mesh.records and zlink.mesh_node.messages.dropped metrics
// export), for operators' tools such as the admin dashboard.
type RecordCounts struct {
	// ByCommand counts the records that crossed this node's boundary, by command name
	// (wire.Command's String); commands never seen are absent.
	ByCommand map[string]DirectionCounts
	// Drops counts inbound records dropped before dispatch, by reason (DropNoHandler,
	// DropDecodeError, ...); reasons never seen are absent.
	Drops map[string]int64
}

// DirectionCounts are the records of one command, inbound and outbound.
type DirectionCounts struct {
	In  int64 `json:"in"`
	Out int64 `json:"out"`
}

// Counts reads the record counters. It only loads atomics the record path already
// increments, so it adds nothing to that path; each call allocates its two maps.
func (r *Records) Counts() RecordCounts {
	m := r.n.metrics
	out := RecordCounts{ByCommand: map[string]DirectionCounts{}, Drops: map[string]int64{}}
	for cmd := range m.byCmd {
		in, o := m.byCmd[cmd][0].Load(), m.byCmd[cmd][1].Load()
		if in != 0 || o != 0 {
			out.ByCommand[wire.Command(cmd).String()] = DirectionCounts{In: in, Out: o}
		}
	}
	m.attrs.Range(func(k, v any) bool {
		out.Drops[k.(string)] = v.(*dropReason).n.Load()
		return true
	})
	return out
}
