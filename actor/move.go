package actor

import (
	"context"
	"encoding/binary"

	"github.com/meshnode/meshnode/fault"
	"github.com/meshnode/meshnode/mesh"
)

// Relocation: an activation moves to another node with its state, keeping its
// ActorId and ObjectGeneration (docs/relocation.md). The Actor host runs the move; the
// layers above Actors (the session binding) take part through MoveHooks.

// RelocationID names one move: non-zero, made by the source, never reused.
type RelocationID struct{ High, Low uint64 }

// IsZero reports whether id is the zero value (no relocation).
func (id RelocationID) IsZero() bool { return id.High == 0 && id.Low == 0 }

// Move describes one relocation as the layers above Actors see it.
type Move struct {
	ID RelocationID
	// Source is where the Actor was when the move began.
	Source RouteFence
	// Target is where it goes. Target.Node is set from the start; the authority owner
	// and lease generations once the target has restored the Actor (Committed).
	Target RouteFence
	// Coordinator is the source's relocation coordinator fence (record 42 and 44 carry
	// it): the source node runs the move.
	Coordinator MoveCoordinator
}

// MoveCoordinator is the relocation-coordinator fence of the service wire.
type MoveCoordinator struct {
	OwnerID         string
	LeaseGeneration uint64
	Node            mesh.NodeID
	// StoreVersion names the directory entry the move started from.
	StoreVersion string
}

// MoveHooks is what a layer above Actors does when one of its activations moves. Every
// hook runs inside a turn of the activation (source or target), so it sees and changes
// the layer's attachments as any record handler does. Unset hooks are skipped.
type MoveHooks struct {
	// Seal runs in the source's turn before its state is captured: the layer stops what
	// it routes to the activation (the binding: record 42 to the bound session's owner,
	// waiting for 43). ctx bounds the wait. An error aborts the move (Aborted runs).
	Seal func(ctx context.Context, t *Turn, m Move) error
	// Capture returns the layer's state of the activation, carried to the target with
	// the Actor's own state (nil: nothing to carry). It runs right after Seal.
	Capture func(t *Turn) ([]byte, error)
	// Restore installs the captured state on the target, before its dispatch opens. An
	// error fails the move before relay-ready (the source serves again).
	Restore func(t *Turn, data []byte) error
	// Committed runs in the target's turn once the directory points at the target and
	// its dispatch is open (the binding: record 44 commit to the session owner).
	Committed func(t *Turn, m Move)
	// Aborted runs in the source's turn when the move failed before the target's
	// relay-ready: the Actor serves at the source again (the binding: 44 abort).
	Aborted func(t *Turn, m Move)
}

// HandleMove registers the move hooks of the session binding (the layer named
// "binding"); HandleMoveLayer registers another layer's.
func (h *Host) HandleMove(hooks MoveHooks) { h.HandleMoveLayer("binding", hooks) }

// HandleMoveLayer registers the move hooks of the layer name (a second registration
// of a name replaces the first). Layers run in the order they were registered; what
// each captures travels to the target under its name, so the target restores each
// layer's own (encodeLayers).
func (h *Host) HandleMoveLayer(name string, hooks MoveHooks) {
	h.turnHandlers.mu.Lock()
	defer h.turnHandlers.mu.Unlock()
	for i := range h.moveLayers {
		if h.moveLayers[i].name == name {
			h.moveLayers[i].hooks = hooks
			return
		}
	}
	h.moveLayers = append(h.moveLayers, moveLayer{name: name, hooks: hooks})
}

// moveLayer is one layer's move hooks.
type moveLayer struct {
	name  string
	hooks MoveHooks
}

func (h *Host) layers() []moveLayer {
	h.turnHandlers.mu.RLock()
	defer h.turnHandlers.mu.RUnlock()
	return h.moveLayers
}

// layersMagic starts the encoding of the layers' captured state: u8 layersMagic, u8
// count, then for each layer u8 name length, name, u32 length (big-endian), data. A
// build that carried only the binding's state sent it alone, and a binding snapshot
// starts with its version (1): decodeLayers takes such bytes as the binding's.
const layersMagic = 0xFE

// encodeLayers encodes what the layers captured; nil when none captured anything.
func encodeLayers(names []string, data [][]byte) []byte {
	var out []byte
	count := 0
	for i := range names {
		if len(data[i]) > 0 {
			count++
		}
	}
	if count == 0 {
		return nil
	}
	out = append(out, layersMagic, byte(count))
	for i, name := range names {
		if len(data[i]) == 0 {
			continue
		}
		out = append(out, byte(len(name)))
		out = append(out, name...)
		out = binary.BigEndian.AppendUint32(out, uint32(len(data[i])))
		out = append(out, data[i]...)
	}
	return out
}

// decodeLayers returns each layer's captured state by name.
func decodeLayers(b []byte) (map[string][]byte, error) {
	if len(b) == 0 {
		return nil, nil
	}
	if b[0] != layersMagic {
		return map[string][]byte{"binding": b}, nil
	}
	if len(b) < 2 {
		return nil, fault.Errorf(fault.ProtocolError, "actor: move layers: truncated")
	}
	n, b := int(b[1]), b[2:]
	out := make(map[string][]byte, n)
	for i := 0; i < n; i++ {
		if len(b) < 1 || len(b) < 1+int(b[0])+4 {
			return nil, fault.Errorf(fault.ProtocolError, "actor: move layers: layer %d truncated", i)
		}
		name := string(b[1 : 1+int(b[0])])
		b = b[1+int(b[0]):]
		size := binary.BigEndian.Uint32(b)
		b = b[4:]
		if uint64(len(b)) < uint64(size) {
			return nil, fault.Errorf(fault.ProtocolError, "actor: move layers: layer %q truncated", name)
		}
		out[name] = b[:size]
		b = b[size:]
	}
	if len(b) != 0 {
		return nil, fault.Errorf(fault.ProtocolError, "actor: move layers: %d trailing bytes", len(b))
	}
	return out, nil
}

// MovedAway reports, in an activation's last turn (HandleStop), whether it stops
// because it moved to another node: a layer then keeps its peers' state as it is (the
// target carries it on) instead of telling them the Actor is gone.
func (t *Turn) MovedAway() bool { return t.s.movedAway }
