package services

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
)

// What a session worker publishes to its topic (one per worker activation, fanned out
// once per node with attached presentations by the topics layer) and what the
// Attacher of each node reads of it before passing it on: a control header the
// server may read (which worker incarnation, which service, instance and member, the
// sequence, the trace context), then the value, which only the presentation decodes.
//
//	u16   header length (big-endian)
//	...   header: JSON pubHeader
//	...   value: JSON (empty for a notice)

// pubName is the topic message name of everything a worker publishes.
const pubName = "$svc.pub"

// Kinds of publication.
const (
	pubNotice = "n" // about the worker itself: Notice says what
)

// Notices a worker publishes about itself.
const (
	noticeStopped = "stopped" // the activation stopped (not by a move): re-attach
	noticeRemoved = "removed" // the session was removed: its presentations are detached
)

// pubHeader is the control part of a publication.
type pubHeader struct {
	Kind        string `json:"k"`
	Incarnation uint64 `json:"i"`
	Notice      string `json:"n,omitempty"`
}

// maxPubHeader bounds a header: a longer one is not a worker's.
const maxPubHeader = 4 << 10

func encodePub(h pubHeader, value []byte) ([]byte, error) {
	hb, err := json.Marshal(h)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 2, 2+len(hb)+len(value))
	binary.BigEndian.PutUint16(out, uint16(len(hb)))
	out = append(out, hb...)
	return append(out, value...), nil
}

// decodePub splits a publication into its header and value (which it does not read).
func decodePub(b []byte) (pubHeader, []byte, error) {
	var h pubHeader
	if len(b) < 2 {
		return h, nil, fmt.Errorf("services: publication of %d bytes", len(b))
	}
	n := int(binary.BigEndian.Uint16(b))
	if n > maxPubHeader || 2+n > len(b) {
		return h, nil, fmt.Errorf("services: publication header of %d bytes in %d", n, len(b))
	}
	if err := json.Unmarshal(b[2:2+n], &h); err != nil {
		return h, nil, fmt.Errorf("services: publication header: %w", err)
	}
	return h, b[2+n:], nil
}
