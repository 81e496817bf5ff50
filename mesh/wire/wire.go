package wire

import "strconv"

// Head prefix and protocol constants.
const (
	Magic0   = 'Z'
	Magic1   = 'M'
	Major    = 1 // wire major; anything else is ClassInvalidMajor
	HeadSize = 5 // magic (2), major, command, flags
)

// Head flags. A command accepts only the flags it allows; see Record for how they are set.
const (
	FlagMetadata     = 0x01 // a metadata frame follows frame 0
	FlagBoundSession = 0x02 // command 24: bound-session tail after the body
	FlagSourceSpotID = 0x04 // command 24: set together with FlagBoundSession (all-or-none)
	FlagExtension    = 0x08 // body extension; no command of this package allows it
)

// Bounds from the schema.
const (
	MaxNonzero       = 1<<63 - 1  // nonzero-u64 is 1..2^63-1
	MaxHopCount      = 8          // messageFollowHopCount
	MaxMetadataFrame = 1024       // whole metadata frame, bytes
	MaxMetadataValue = 1024       // one metadata value, bytes
	MaxStoreVersion  = 4096       // authority-store-version, bytes
	MaxPayloadData   = 4294966774 // applicationPayloadAbsoluteBytes
)

// Command is the command id in byte 3 of the head.
type Command uint8

// The zlink commands of this package (magic "ZM"). Every other id (reserved or
// belonging to another part of the service wire) decodes as ClassUnknownCommand: only
// these, and meshnode's own commands under magic "MN" (meshnode.go), cross a node
// boundary here.
const (
	CmdReply                   Command = 20
	CmdActorSend               Command = 24
	CmdBoundSessionSend        Command = 36
	CmdBoundSessionBind        Command = 38
	CmdSessionRelocationSeal   Command = 42
	CmdSessionRelocationSealed Command = 43
	CmdSessionRelocationRoute  Command = 44
	CmdBoundSessionReplaced    Command = 51
)

// String returns the schema name of the command ("actorSend"), or "command(N)".
func (c Command) String() string {
	switch c {
	case CmdReply:
		return "reply"
	case CmdActorSend:
		return "actorSend"
	case CmdBoundSessionSend:
		return "boundSessionSend"
	case CmdBoundSessionBind:
		return "boundSessionBind"
	case CmdSessionRelocationSeal:
		return "sessionRelocationSeal"
	case CmdSessionRelocationSealed:
		return "sessionRelocationSealed"
	case CmdSessionRelocationRoute:
		return "sessionRelocationRoute"
	case CmdBoundSessionReplaced:
		return "boundSessionReplaced"
	case CmdTopicPublish:
		return "meshnode.topicPublish"
	case CmdTopicInterest:
		return "meshnode.topicInterest"
	case CmdTopicInterestAck:
		return "meshnode.topicInterestAck"
	}
	return "command(" + strconv.Itoa(int(c)) + ")"
}

type payloadRule uint8

const (
	payloadForbidden payloadRule = iota
	payloadRequired
	payloadOptional
)

// spec is what the head and the frame count are checked against.
type spec struct {
	allowed byte // flags the command accepts
	payload payloadRule
}

func specOf(c Command) (spec, bool) {
	switch c {
	case CmdReply:
		return spec{payload: payloadOptional}, true
	case CmdActorSend:
		return spec{allowed: FlagMetadata | FlagBoundSession | FlagSourceSpotID, payload: payloadRequired}, true
	case CmdBoundSessionSend:
		return spec{payload: payloadRequired}, true
	case CmdBoundSessionBind, CmdSessionRelocationSeal, CmdSessionRelocationSealed,
		CmdSessionRelocationRoute, CmdBoundSessionReplaced:
		return spec{payload: payloadForbidden}, true
	case CmdTopicPublish:
		return spec{allowed: FlagMetadata, payload: payloadRequired}, true
	case CmdTopicInterest, CmdTopicInterestAck:
		return spec{payload: payloadForbidden}, true
	}
	return spec{}, false
}

// Record is one decoded (or to-be-encoded) record.
type Record struct {
	// Body is one of *Reply, *ActorSend, *BoundSessionSend, *BoundSessionBind,
	// *SessionRelocationSeal, *SessionRelocationSealed, *SessionRelocationRoute,
	// *BoundSessionReplaced, or one of meshnode's own (*TopicPublish, *TopicInterest,
	// *TopicInterestAck, meshnode.go). It decides the command id.
	Body Body
	// Metadata is the metadata frame; nil means no frame (flag 0x01 clear). A non-nil
	// empty Metadata is a frame with zero entries, which the schema allows.
	Metadata Metadata
	// Payload is the application payload envelope frame; nil means no frame.
	Payload *Payload
}

// Command returns the command of the body, or 0 when Body is nil.
func (r *Record) Command() Command {
	if r == nil || r.Body == nil {
		return 0
	}
	return r.Body.Command()
}

// Body is a command body. The set of implementations is closed: the interface has
// unexported methods, so only the body types of this package satisfy it.
type Body interface {
	Command() Command
	// flags returns the head flags the body itself implies (the bound-session tail).
	flags() byte
	appendBody(w *writer)
}

// Payload is application-payload-envelope-v1. PacketName and ContentType are 1..255 bytes
// of UTF-8 without NUL; Data is opaque. A decoded Data aliases the input frame; an empty
// Data decodes as nil.
type Payload struct {
	PacketName  string
	ContentType string
	Data        []byte
}

// MetadataEntry is one metadata key/value. Key is text8 (1..255 bytes), Value is 0..1,024
// bytes; both UTF-8 without NUL.
type MetadataEntry struct {
	Key   string
	Value string
}

// Metadata is the metadata frame's entries in wire order (order is kept so that a decoded
// record re-encodes to the same bytes). Keys are unique.
type Metadata []MetadataEntry

// Get returns the value of key.
func (m Metadata) Get(key string) (string, bool) {
	for i := range m {
		if m[i].Key == key {
			return m[i].Value, true
		}
	}
	return "", false
}

// ActorRef is actor-ref: actorId text8 and objectGeneration nonzero-u64.
type ActorRef struct {
	ID         string
	Generation uint64
}

// ActorRouteFence is actor-route-fence: an Actor and the owner it is expected at.
type ActorRouteFence struct {
	Actor                            ActorRef
	TargetNodeRID                    string // rid: opaque bytes, 1..255
	TargetNodeGeneration             uint64
	ExpectedAuthorityOwnerGeneration uint64
	ExpectedOwnerLeaseGeneration     uint64
}

// BoundSessionTail is optional-bound-session-tail, carried by 24 when flags 0x02|0x04 are set.
type BoundSessionTail struct {
	SourceSessionRID        string
	SourceBindingGeneration uint64
	SourceSessionSequence   uint64
}

// SessionFence is the six bound-session fields shared by 42, 43, 44 (inline in the body)
// and 51 (retired-bound-session-route-fence, where BindingGeneration is the
// retiredBindingGeneration): sessionOwnerNodeRid rid, sessionOwnerNodeGeneration,
// sessionOwnerId text8, sessionOwnerLeaseGeneration, sessionRid rid, binding generation.
type SessionFence struct {
	OwnerNodeRID         string
	OwnerNodeGeneration  uint64
	OwnerID              string
	OwnerLeaseGeneration uint64
	SessionRID           string
	BindingGeneration    uint64
}

// CoordinatorFence is relocation-coordinator-fence.
type CoordinatorFence struct {
	OwnerID                       string // text8
	LeaseGeneration               uint64
	NodeRID                       string // rid
	NodeGeneration                uint64
	ExpectedAuthorityStoreVersion string // u16 length, 1..4,096 bytes of UTF-8 without NUL
}

// RelocationID is relocation-id: two u64, not both zero.
type RelocationID struct{ High, Low uint64 }

// OperationID is operation-id: two u64. Command 24 is one-way, so zero is allowed there.
type OperationID struct{ High, Low uint64 }

// Reply is command 20 (infrastructure; payload optional, presence = frame count).
//
// The schema's tail depends on the original operation kind, which the decoder cannot
// know. This codec carries the only tail the session path uses: an ok reply to streamBind
// (command 38) with bindingGeneration and authorityOwnerGeneration. Decode sets BindOK when
// Result is ResultOK and exactly 16 bytes follow failureCode; any other tail is a
// trailing-byte error. The caller, which knows what it asked, decides whether BindOK must be
// present (an ok reply to a 38 without it is a protocol error at that layer).
//
// Result and Failure must be values of their schema enums, and their pairing must follow
// terminal-failure-integrity: ok carries FailureNone; timedOut, terminated, busy,
// notConnected, invalidArgument, invalidState, notSupported and backpressured carry
// FailureNone; notFound, protocolError, internalError, rejected and conflict carry the
// failure code whose exact result they are. Only an ok reply may carry a payload.
type Reply struct {
	Correlation uint64 // nonzero-u64
	Result      TerminalResult
	Failure     FailureCode
	BindOK      *BindOK
}

// BindOK is the ok tail of a reply to streamBind.
type BindOK struct {
	BindingGeneration        uint64
	AuthorityOwnerGeneration uint64
}

// ActorSend is command 24 (application; payload required; flags metadata and the
// bound-session pair allowed).
type ActorSend struct {
	Operation OperationID // may be zero: 24 is one-way
	HopCount  uint8       // messageFollowHopCount, 0..8
	// SourceActor is optional-actor-ref: the zero value (empty ID) is "absent" and then
	// Generation must be 0 too.
	SourceActor ActorRef
	TargetActor ActorRouteFence
	// BoundSession is the bound-session tail; non-nil sets flags 0x02|0x04.
	BoundSession *BoundSessionTail
}

// BoundSessionSend is command 36 (application; payload required; no flags). Actor is the
// source Actor and its owner fence; there is no session RID on the wire.
type BoundSessionSend struct {
	Actor                     ActorRouteFence
	ExpectedBindingGeneration uint64
}

// BoundSessionBind is command 38 (infrastructure; no payload; answered by a 20).
type BoundSessionBind struct {
	Correlation uint64
	Actor       ActorRouteFence
	SessionRID  string
	Binding     BindingTransition
}

// BindingTransition is bound-session-binding-transition. Generation is bindingGeneration
// for BindingActive and retiredBindingGeneration for BindingTombstone.
type BindingTransition struct {
	State      BindingState
	Generation uint64
}

// SessionRelocationSeal is command 42. SenderRole must be RoleSource.
type SessionRelocationSeal struct {
	Relocation  RelocationID
	Coordinator CoordinatorFence
	SenderRole  RelocationRole
	Actor       ActorRouteFence
	Session     SessionFence
}

// SessionRelocationSealed is command 43: 42 without senderRole.
type SessionRelocationSealed struct {
	Relocation  RelocationID
	Coordinator CoordinatorFence
	Actor       ActorRouteFence
	Session     SessionFence
}

// SessionRelocationRoute is command 44. A commit must come from RoleTarget, an abort from
// RoleSource. Actor is an actor-ref only (no fence).
type SessionRelocationRoute struct {
	Relocation  RelocationID
	Coordinator CoordinatorFence
	SenderRole  RelocationRole
	Actor       ActorRef
	Session     SessionFence
	Route       RouteUpdate
}

// RouteUpdate is session-relocation-route-update: exactly one of Commit and Abort is set.
type RouteUpdate struct {
	Commit *RouteCommit
	Abort  *RouteAbort
}

// RouteCommit is the commit case (action 1). This codec targets the golden version whose
// commit ends with targetOwnerLeaseGeneration (case length 39 for a 6-byte RID); the
// 4-field commit of older schemas is rejected by its length. TargetAuthorityOwnerGeneration
// must be greater than PreviousAuthorityOwnerGeneration.
type RouteCommit struct {
	PreviousAuthorityOwnerGeneration uint64
	TargetAuthorityOwnerGeneration   uint64
	TargetNodeRID                    string
	TargetNodeGeneration             uint64
	TargetOwnerLeaseGeneration       uint64
}

// RouteAbort is the abort case (action 2).
type RouteAbort struct {
	CurrentAuthorityOwnerGeneration uint64
}

// BoundSessionReplaced is command 51 (infrastructure; one-way; no flags, no payload).
// RetiredSession.BindingGeneration is the retiredBindingGeneration.
type BoundSessionReplaced struct {
	ActorAuthority ActorRouteFence
	RetiredSession SessionFence
}

// Command implements Body.
func (*Reply) Command() Command { return CmdReply }

// Command implements Body.
func (*ActorSend) Command() Command { return CmdActorSend }

// Command implements Body.
func (*BoundSessionSend) Command() Command { return CmdBoundSessionSend }

// Command implements Body.
func (*BoundSessionBind) Command() Command { return CmdBoundSessionBind }

// Command implements Body.
func (*SessionRelocationSeal) Command() Command { return CmdSessionRelocationSeal }

// Command implements Body.
func (*SessionRelocationSealed) Command() Command { return CmdSessionRelocationSealed }

// Command implements Body.
func (*SessionRelocationRoute) Command() Command { return CmdSessionRelocationRoute }

// Command implements Body.
func (*BoundSessionReplaced) Command() Command { return CmdBoundSessionReplaced }

const tailFlags = FlagBoundSession | FlagSourceSpotID

func (b *ActorSend) flags() byte {
	if b != nil && b.BoundSession != nil {
		return tailFlags
	}
	return 0
}

func (*Reply) flags() byte                   { return 0 }
func (*BoundSessionSend) flags() byte        { return 0 }
func (*BoundSessionBind) flags() byte        { return 0 }
func (*SessionRelocationSeal) flags() byte   { return 0 }
func (*SessionRelocationSealed) flags() byte { return 0 }
func (*SessionRelocationRoute) flags() byte  { return 0 }
func (*BoundSessionReplaced) flags() byte    { return 0 }
