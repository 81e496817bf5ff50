package binding

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/meshnode/meshnode/actor"
	"github.com/meshnode/meshnode/internal/traceprop"
	"github.com/meshnode/meshnode/mesh/wire"
	"github.com/meshnode/meshnode/session"
	"github.com/meshnode/meshnode/session/codec"
	swire "github.com/meshnode/meshnode/session/wire"
)

// Reserved packet names inside the application payload envelope of record 36. They
// use the STREAM control prefix, which no application packet may carry, so they can
// never collide with a push. docs/binding.md describes the encoding.
const (
	replyPacketName   = "$zlink.reply"
	closePacketName   = "$zlink.close"
	unboundPacketName = "$zlink.unbound"
)

// Metadata key on record 24 that marks a relayed Request (its absence: a Send).
const kindKey = "zlink.kind"

func bindRecord(corr uint64, fence actor.RouteFence, sessionRid string, gen uint64, tombstone bool) *wire.Record {
	t := wire.BindingTransition{State: wire.BindingActive, Generation: gen}
	if tombstone {
		t.State = wire.BindingTombstone
	}
	return &wire.Record{Body: &wire.BoundSessionBind{
		Correlation: corr,
		Actor:       actor.FenceToWire(fence),
		SessionRID:  sessionRid,
		Binding:     t,
	}}
}

// relayScratch holds the record 24 of one relay while the mesh encodes it: the
// transport copies the record into its frames before SendRecord returns, so the
// structs go back to a pool at once instead of being four allocations per relay.
type relayScratch struct {
	rec     wire.Record
	body    wire.ActorSend
	tail    wire.BoundSessionTail
	payload wire.Payload
	md      [4]wire.MetadataEntry
}

var relayScratchPool = sync.Pool{New: func() any { return new(relayScratch) }}

// relayRecord builds the record 24 that relays pkt, in pooled scratch; release returns
// the scratch once the record was sent (encoded).
func relayRecord(fence actor.RouteFence, sessionRid string, gen, seq uint64, pkt *session.Packet, codecs *codec.Registry) (rec *wire.Record, release func()) {
	sc := relayScratchPool.Get().(*relayScratch)
	sc.tail = wire.BoundSessionTail{SourceSessionRID: sessionRid, SourceBindingGeneration: gen, SourceSessionSequence: seq}
	sc.body = wire.ActorSend{TargetActor: actor.FenceToWire(fence), BoundSession: &sc.tail}
	sc.payload = wire.Payload{PacketName: pkt.Name, ContentType: contentType(codecs, pkt.Codec), Data: pkt.Payload}
	sc.rec = wire.Record{Body: &sc.body, Payload: &sc.payload}
	md := sc.md[:0] // a nil Metadata means no metadata frame: set only when not empty
	for _, e := range pkt.Metadata {
		if !strings.HasPrefix(e.Key, reservedMetaPrefix) { // a client cannot set the relay's own keys
			md = append(md, wire.MetadataEntry{Key: e.Key, Value: e.Value})
		}
	}
	if pkt.IsRequest() {
		md = append(md, wire.MetadataEntry{Key: kindKey, Value: "request"})
	}
	if len(md) > 0 {
		sc.rec.Metadata = md
	}
	if pkt.Span() != nil { // tracing is on at this session owner
		injectRelay(&sc.rec, pkt)
	}
	return &sc.rec, func() {
		*sc = relayScratch{}
		relayScratchPool.Put(sc)
	}
}

// reservedMetaPrefix is the namespace of the relay's own metadata keys on record 24.
const reservedMetaPrefix = "zlink."

// packetMetadata returns the client's metadata of a relayed record.
func packetMetadata(m wire.Metadata) swire.Metadata {
	var out swire.Metadata
	for _, e := range m {
		if !strings.HasPrefix(e.Key, reservedMetaPrefix) {
			out = append(out, swire.MetadataEntry{Key: e.Key, Value: e.Value})
		}
	}
	return out
}

// contentType returns the content type of a STREAM codec number (raw when unknown).
func contentType(codecs *codec.Registry, id swire.Codec) string { return codecs.ContentTypeOf(id) }

// codecOf returns the STREAM codec number of a content type (raw when unknown).
func codecOf(codecs *codec.Registry, ct string) swire.Codec { return codecs.CodecOf(ct) }

// Reply data of record 36 ($zlink.reply): u64 session sequence, u8 STREAM kind
// (3 Response, 4 Error), then the reply payload (for an Error, the JSON error payload).
func encodeReply(seq uint64, kind swire.Kind, payload []byte) []byte {
	b := make([]byte, 9+len(payload))
	binary.BigEndian.PutUint64(b, seq)
	b[8] = byte(kind)
	copy(b[9:], payload)
	return b
}

var errBadReply = errors.New("binding: malformed reply envelope")

// With the trace flag (0x80) in the kind byte, the Actor turn's trace context sits
// between the kind byte and the payload (encodeTracedReply); it is sent only to a
// session owner whose record 24 carried one.
func decodeReply(b []byte) (seq uint64, kind swire.Kind, payload []byte, tc traceprop.Fields, err error) {
	if len(b) < 9 {
		return 0, 0, nil, tc, errBadReply
	}
	seq, kind = binary.BigEndian.Uint64(b), swire.Kind(b[8])
	b = b[9:]
	if kind&replyTraceFlag != 0 {
		kind &^= replyTraceFlag
		if len(b) < 1 || len(b) < 1+int(b[0])+2 {
			return 0, 0, nil, tc, errBadReply
		}
		tc.Parent, b = string(b[1:1+int(b[0])]), b[1+int(b[0]):]
		n := int(binary.BigEndian.Uint16(b))
		if len(b) < 2+n {
			return 0, 0, nil, tc, errBadReply
		}
		tc.State, b = string(b[2:2+n]), b[2+n:]
	}
	if seq == 0 || (kind != swire.KindResponse && kind != swire.KindError) {
		return 0, 0, nil, tc, errBadReply
	}
	return seq, kind, b, tc, nil
}

// Close data of record 36 ($zlink.close): u8 close reason, then the UTF-8 diagnostic.
func encodeClose(reason swire.CloseReason, diag string) []byte {
	return append([]byte{byte(reason)}, diag...)
}

func decodeClose(b []byte) (swire.CloseReason, string, error) {
	if len(b) < 1 || !swire.CloseReason(b[0]).Valid() {
		return 0, "", fmt.Errorf("binding: malformed close envelope")
	}
	return swire.CloseReason(b[0]), string(b[1:]), nil
}
