package meshpb

import "github.com/meshnode/meshnode/internal/protoactor/remote"

// An Envelope is its own in-process and on-the-wire form for protoactor remote. The
// mesh hands protoactor a placeholder for the records queued toward a peer, which
// protoactor turns into an Envelope (remote.RootSerializable) only when its endpoint
// writer is about to send: records queued until that moment travel together
// (mesh/coalesce.go). These methods let the Envelope be that serialized form.

// Serialize returns e.
func (e *Envelope) Serialize() (remote.RootSerialized, error) { return e, nil }

// Deserialize returns e.
func (e *Envelope) Deserialize() (remote.RootSerializable, error) { return e, nil }
