package actor

import (
	"github.com/vmihailenco/msgpack/v5"

	"github.com/meshnode/meshnode/mesh"
)

// SetServeHook makes fn run in the directory's serve once the directory is usable
// (see serveHook); nil removes it.
func SetServeHook(fn func(id string)) {
	if fn == nil {
		serveHook.Store(nil)
		return
	}
	serveHook.Store(&fn)
}

// DirectoryHolder returns the node that holds id's directory entry in h's view.
func DirectoryHolder(h *Host, id string) mesh.NodeID { return h.rdir.holderOf(id) }

// HasDirectoryEntry reports whether h's directory holds an entry for id.
func HasDirectoryEntry(h *Host, id string) bool {
	h.rdir.mu.Lock()
	defer h.rdir.mu.Unlock()
	_, ok := h.rdir.entries[id]
	return ok
}

// HolderAmong returns the node rendezvous hashing chooses for id among nodes.
func HolderAmong(id string, nodes ...mesh.NodeID) mesh.NodeID {
	ms := make([]mesh.Member, len(nodes))
	for i, n := range nodes {
		ms[i] = mesh.Member{ID: n, State: mesh.StateAlive}
	}
	return ownerOf(id, ms)
}

// SetMembershipHook makes fn run first in every host's handling of a membership event
// (see membershipHook); nil removes it.
func SetMembershipHook(fn func(h *Host, ev mesh.MemberEvent)) {
	if fn == nil {
		membershipHook.Store(nil)
		return
	}
	membershipHook.Store(&fn)
}

// SetDirectoryEntry makes h's directory hold an entry for f.ID naming f, as a claim
// would.
func SetDirectoryEntry(h *Host, kind string, f RouteFence) {
	h.rdir.mu.Lock()
	defer h.rdir.mu.Unlock()
	h.rdir.entries[f.ID] = dirEntry{kind: kind, fence: f}
}

// EncodeStateEnvelope and DecodeStateEnvelope are the store envelope's codec.
func EncodeStateEnvelope(encoding byte, payload []byte) []byte {
	return encodeEnvelope(encoding, payload)
}

func DecodeStateEnvelope(b []byte) (byte, []byte, error) { return decodeEnvelope(b) }

// MarshalState encodes v as Kind.State's msgpack encoding.
func MarshalState(v any) ([]byte, error) { return msgpack.Marshal(v) }

// OccupyDirectoryTasks takes every slot of h's directory requests in progress, as
// maxDirectoryTasks slow requests from peers would; release gives them back.
func OccupyDirectoryTasks(h *Host) (release func()) {
	n := 0
	for {
		select {
		case h.taskSlots <- struct{}{}:
			n++
			continue
		default:
		}
		break
	}
	return func() {
		for range n {
			<-h.taskSlots
		}
	}
}

// MaxDirectoryTasks is the bound of directory requests a node serves at once.
const MaxDirectoryTasks = maxDirectoryTasks
