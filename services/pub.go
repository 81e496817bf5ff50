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
	pubNotice  = "n" // about the worker itself: Notice says what
	pubUpdate  = "u" // a state's next value
	pubReplace = "r" // a state's complete replacement
	pubEvent   = "e" // an event
	pubClosed  = "c" // a member closed (its instance closed): Code, Message
	pubResync  = "s" // a value too large for the topic: its subscribers take a snapshot
)

// Notices a worker publishes about itself.
const (
	noticeStopped = "stopped" // the activation stopped (not by a move): re-attach
	noticeRemoved = "removed" // the session was removed: its presentations are detached
	noticeMoved   = "moved"   // the worker moved to another node (Message names it)
)

// pubHeader is the control part of a publication.
type pubHeader struct {
	Kind        string `json:"k"`
	Incarnation uint64 `json:"i"`
	Notice      string `json:"n,omitempty"`
	Svc         string `json:"s,omitempty"`
	Key         string `json:"y,omitempty"`
	Gen         uint64 `json:"g,omitempty"`
	Ref         string `json:"f,omitempty"`
	Member      string `json:"m,omitempty"`
	Seq         uint64 `json:"q,omitempty"`
	TP          string `json:"tp,omitempty"`
	TS          string `json:"ts,omitempty"`
	Code        string `json:"c,omitempty"`
	Message     string `json:"x,omitempty"`
}

// pubOf returns the header of a member's delivery published by worker incarnation inc.
func pubOf(a subAddr, d *delivery, inc uint64) pubHeader {
	h := pubHeader{Incarnation: inc, Svc: a.svc, Key: a.key, Gen: a.gen, Ref: a.ref, Member: a.member, Seq: d.seq,
		TP: d.trace["traceparent"], TS: d.trace["tracestate"]}
	switch d.op {
	case opUpdate:
		h.Kind = pubUpdate
	case opReplace:
		h.Kind = pubReplace
	case opEvent:
		h.Kind = pubEvent
	case opClosed:
		h.Kind = pubClosed
		if d.err != nil {
			h.Code, h.Message = d.err.Code, d.err.Message
		}
	}
	return h
}

// delivery returns what a publication delivers to a subscriber of its member.
func (h pubHeader) delivery(value []byte) (subAddr, *delivery) {
	a := subAddr{svc: h.Svc, key: h.Key, gen: h.Gen, ref: h.Ref, member: h.Member}
	d := &delivery{seq: h.Seq, raw: value}
	if h.TP != "" {
		d.trace = map[string]string{"traceparent": h.TP}
		if h.TS != "" {
			d.trace["tracestate"] = h.TS
		}
	}
	switch h.Kind {
	case pubUpdate:
		d.op = opUpdate
	case pubReplace:
		d.op = opReplace
	case pubEvent:
		d.op = opEvent
	case pubClosed:
		d.op, d.err = opClosed, &Error{Code: h.Code, Message: h.Message}
	case pubResync:
		d.op, d.err = opClosed, &Error{Code: CodeFlowControl, Message: "a value over the fan-out limit: subscribe again for it"}
	}
	return a, d
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
