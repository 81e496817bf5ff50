package wire

import "strings"

// Marker is the format marker, the first header byte of every framework packet.
const Marker byte = 0xF2

// PrefixSize is the length of the frame prefix: u16 header_len + u32 payload_len.
const PrefixSize = 6

// Limits of the header fields (digest §2.3, §2.7, §2.8, §2.10).
const (
	MaxNameLen        = 255
	MaxMetadataBytes  = 1024 // whole metadata block: count byte, keys, values, lengths
	MaxCorrelationLen = 64
	FlowIDLen         = 36
	MaxDiagnosticLen  = 512
	minHeaderLen      = 5 // marker, kind, codec, flags, name_len
)

// ReservedPrefix starts every control packet name; application names may not use it.
const ReservedPrefix = "$zlink."

// Control packet names (digest §2.10).
const (
	NameHeartbeatPing  = "$zlink.heartbeat.ping"
	NameHeartbeatPong  = "$zlink.heartbeat.pong"
	NameSessionClosing = "session-closing"
)

// Kind is the message kind (digest §2.4).
type Kind uint8

const (
	KindSend     Kind = 1
	KindRequest  Kind = 2
	KindResponse Kind = 3
	KindError    Kind = 4
	KindControl  Kind = 5
)

// Codec is the payload codec number (digest §2.5).
type Codec uint8

const (
	CodecRaw      Codec = 0
	CodecJSON     Codec = 1
	CodecMsgPack  Codec = 2
	CodecProtobuf Codec = 3
)

// Flags is the header flag bit set (digest §2.6).
type Flags uint8

const (
	FlagRequestSeq    Flags = 0x01
	FlagMetadata      Flags = 0x02
	FlagCompressed    Flags = 0x04
	FlagCorrelationID Flags = 0x08
	FlagFlow          Flags = 0x10
	knownFlags              = FlagRequestSeq | FlagMetadata | FlagCompressed | FlagCorrelationID | FlagFlow
)

// FlowOrigin says what started a flow (digest §2.8); 0 means no flow.
type FlowOrigin uint8

const (
	FlowInbound     FlowOrigin = 1
	FlowTimer       FlowOrigin = 2
	FlowApplication FlowOrigin = 3
	FlowLifecycle   FlowOrigin = 4
)

// MetadataEntry is one key/value pair of the metadata block.
type MetadataEntry struct {
	Key   string
	Value string
}

// Metadata is the ordered metadata block. nil means the block is absent (flag 0x02
// clear); a non-nil empty slice is a present block with count 0.
type Metadata []MetadataEntry

// Get returns the value of key and whether it is present.
func (m Metadata) Get(key string) (string, bool) {
	for _, e := range m {
		if e.Key == key {
			return e.Value, true
		}
	}
	return "", false
}

// Header is a decoded packet header. Presence of the optional fields follows the
// values: RequestSeq 0 = absent, Metadata nil = absent, CorrelationID "" = absent,
// FlowOrigin 0 = no flow (then FlowID must be "").
type Header struct {
	Kind          Kind
	Codec         Codec
	Compressed    bool // flag 0x04: payload is in the LZ4 container (session/compress)
	RequestSeq    uint64
	Name          string
	Metadata      Metadata
	CorrelationID string
	FlowID        string
	FlowOrigin    FlowOrigin
}

// Flags returns the flag byte this header encodes to.
func (h *Header) Flags() Flags {
	var f Flags
	if h.RequestSeq != 0 {
		f |= FlagRequestSeq
	}
	if h.Metadata != nil {
		f |= FlagMetadata
	}
	if h.Compressed {
		f |= FlagCompressed
	}
	if h.CorrelationID != "" {
		f |= FlagCorrelationID
	}
	if h.FlowOrigin != 0 {
		f |= FlagFlow
	}
	return f
}

// IsReservedName reports whether name is in the control namespace.
func IsReservedName(name string) bool { return strings.HasPrefix(name, ReservedPrefix) }

// CloseReason is the closed set of session close reasons (digest §4.5); the numbers are
// the wire values of the session-closing payload.
type CloseReason uint8

const (
	CloseClientClose      CloseReason = 1
	CloseIdleTimeout      CloseReason = 2
	CloseHeartbeatTimeout CloseReason = 3
	CloseServerDrain      CloseReason = 4
	CloseProtocolError    CloseReason = 5
	CloseTransportError   CloseReason = 6
)

// DiagnosticReplaced starts the session-closing diagnostic of a session closed because
// another session bound its Actor (reason ServerDrain, which the zlink close reasons
// have for it): a client tells replacement from a server drain by it, since both are
// ServerDrain and a connector reconnects after either.
const DiagnosticReplaced = "binding replaced"

// String returns the spec name of the reason (ClientClose, ...).
func (r CloseReason) String() string {
	switch r {
	case CloseClientClose:
		return "ClientClose"
	case CloseIdleTimeout:
		return "IdleTimeout"
	case CloseHeartbeatTimeout:
		return "HeartbeatTimeout"
	case CloseServerDrain:
		return "ServerDrain"
	case CloseProtocolError:
		return "ProtocolError"
	case CloseTransportError:
		return "TransportError"
	}
	return "Unknown"
}

// MetricLabel returns the close_reason label value of digest §10 (ServerDrain is
// server_shutdown there).
func (r CloseReason) MetricLabel() string {
	switch r {
	case CloseClientClose:
		return "client_close"
	case CloseIdleTimeout:
		return "idle_timeout"
	case CloseHeartbeatTimeout:
		return "heartbeat_timeout"
	case CloseServerDrain:
		return "server_shutdown"
	case CloseProtocolError:
		return "protocol_error"
	}
	return "transport_error"
}

// Valid reports whether r is one of the six wire values.
func (r CloseReason) Valid() bool { return r >= CloseClientClose && r <= CloseTransportError }

// SessionClosing is the payload of the session-closing control packet (digest §2.10).
type SessionClosing struct {
	Reason     CloseReason
	Diagnostic string // UTF-8, at most MaxDiagnosticLen bytes
}
