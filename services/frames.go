package services

import (
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/meshnode/meshnode/session/wire"
)

// The STREAM frames of replicated state, events and keyed instances (docs/services.md).
// A subscription is addressed by its control fields only: the service, the instance
// (key and generation, for a keyed service), the member; the server routes on them
// and never decodes a value.
const (
	// NameSubscribe: Request; metadata MetaService, MetaMember (MemberInstances for a
	// keyed service's directory), MetaKey and MetaGeneration for an instance's member,
	// MetaScope, MetaSubscription → Response JSON {"seq":S,"value":V} for a state or a
	// directory, {"seq":S} for events: the subscription is active from S (a state's
	// value is at S). Refused cancelled when a subscribe of the same member with a
	// greater MetaSubscription was served first (the two were reordered on the way).
	NameSubscribe = "$svc.subscribe"
	// NameUnsubscribe: Send; the same metadata: the subscription ends; with a
	// MetaSubscription, only the subscription of that id or an older one (never a later
	// subscribe's of the same member).
	NameUnsubscribe = "$svc.unsubscribe"
	// NameUpdate: Send from the server; metadata the subscription's fields, MetaSeq,
	// MetaReplace "1" for a complete replacement, MetaIncarnation for a session's, and
	// the W3C trace context of the write; payload the new value.
	NameUpdate = "$svc.update"
	// NameEvent: Send from the server; as NameUpdate, payload the event.
	NameEvent = "$svc.event"
	// NameClosed: Send from the server; the subscription's fields; payload JSON
	// {"code","message"}: the subscription ended (flow_control, stale_generation for a
	// closed instance, ...).
	NameClosed = "$svc.closed"

	MetaKey         = "key"
	MetaGeneration  = "gen"
	MetaSeq         = "seq"
	MetaReplace     = "replace"
	MetaIncarnation = "inc"
	// MetaSubscription is the id a client gives a subscription (a decimal number, not
	// 0; a client's ids of one member grow), which its unsubscribe names. Optional: a
	// subscribe without it replaces whatever the member's subscription is, an
	// unsubscribe without it ends it.
	MetaSubscription = "sid"

	// MemberInstances is the member name of a keyed service's instance directory.
	MemberInstances = "$instances"
)

// subAddr addresses a published member: a service's, one keyed instance's (key and
// generation), or a keyed service's directory (member MemberInstances).
type subAddr struct {
	svc    string
	key    string
	gen    uint64
	ref    string // a private reference's member
	member string
}

func (a subAddr) String() string {
	if a.key == "" {
		return a.svc + "." + a.member
	}
	return fmt.Sprintf("%s[%s#%d].%s", a.svc, a.key, a.gen, a.member)
}

// metadata returns a's control fields.
func (a subAddr) metadata(md wire.Metadata) wire.Metadata {
	md = append(md, wire.MetadataEntry{Key: MetaService, Value: a.svc}, wire.MetadataEntry{Key: MetaMember, Value: a.member})
	if a.key != "" {
		md = append(md, wire.MetadataEntry{Key: MetaKey, Value: a.key}, wire.MetadataEntry{Key: MetaGeneration, Value: strconv.FormatUint(a.gen, 10)})
	}
	if a.ref != "" {
		md = append(md, wire.MetadataEntry{Key: MetaRef, Value: a.ref})
	}
	return md
}

// subAddrFrom reads a subscription's control fields.
func subAddrFrom(get func(string) (string, bool)) (subAddr, error) {
	var a subAddr
	a.svc, _ = get(MetaService)
	a.member, _ = get(MetaMember)
	a.key, _ = get(MetaKey)
	a.ref, _ = get(MetaRef)
	if a.svc == "" || a.member == "" {
		return a, &Error{Code: CodeInvalidArguments, Message: "a subscription needs the svc and member metadata"}
	}
	if g, ok := get(MetaGeneration); ok {
		n, err := strconv.ParseUint(g, 10, 64)
		if err != nil {
			return a, &Error{Code: CodeInvalidArguments, Message: fmt.Sprintf("generation %q is not a number", g)}
		}
		a.gen = n
	}
	if (a.key == "") != (a.gen == 0) {
		return a, &Error{Code: CodeInvalidArguments, Message: "an instance is named by its key and its generation, both"}
	}
	return a, nil
}

// subIDFrom reads a subscription's id (0 when there is none).
func subIDFrom(get func(string) (string, bool)) (uint64, error) {
	v, ok := get(MetaSubscription)
	if !ok {
		return 0, nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil || n == 0 {
		return 0, &Error{Code: CodeInvalidArguments, Message: fmt.Sprintf("subscription id %q is not a number over 0", v)}
	}
	return n, nil
}

// closedNotice is NameClosed's payload.
type closedNotice struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// toFrame returns d as the frame a subscriber of addr gets (scope and inc set for a
// session's subscription).
func (d *delivery) toFrame(addr subAddr, scope string, inc uint64) frame {
	md := addr.metadata(make(wire.Metadata, 0, 9))
	if scope != "" {
		md = append(md, wire.MetadataEntry{Key: MetaScope, Value: scope}, wire.MetadataEntry{Key: MetaIncarnation, Value: strconv.FormatUint(inc, 10)})
	}
	md = append(md, wire.MetadataEntry{Key: MetaSeq, Value: strconv.FormatUint(d.seq, 10)})
	if d.sid != 0 {
		md = append(md, wire.MetadataEntry{Key: MetaSubscription, Value: strconv.FormatUint(d.sid, 10)})
	}
	for _, k := range []string{"traceparent", "tracestate"} {
		if v, ok := d.trace[k]; ok && v != "" {
			md = append(md, wire.MetadataEntry{Key: k, Value: v})
		}
	}
	switch d.op {
	case opEvent:
		return frame{name: NameEvent, md: md, payload: d.raw}
	case opClosed:
		b, _ := json.Marshal(closedNotice{Code: d.err.Code, Message: d.err.Message})
		return frame{name: NameClosed, md: md, payload: b}
	case opReplace:
		md = append(md, wire.MetadataEntry{Key: MetaReplace, Value: "1"})
	}
	return frame{name: NameUpdate, md: md, payload: d.raw}
}

// inbound is a frame as a client reads it.
type inbound struct {
	addr    subAddr
	session bool
	inc     uint64
	op      deliveryOp
	seq     uint64
	sid     uint64 // a flow-control notice's subscription (0: none named)
	raw     json.RawMessage
	trace   map[string]string
	err     *Error
}

// inboundFrom reads a pushed frame's control fields.
func inboundFrom(name string, get func(string) (string, bool), payload []byte) (inbound, error) {
	var in inbound
	var err error
	if in.addr, err = subAddrFrom(get); err != nil {
		return in, err
	}
	scope, _ := get(MetaScope)
	in.session = scope == ScopeSession
	if v, ok := get(MetaIncarnation); ok {
		in.inc, _ = strconv.ParseUint(v, 10, 64)
	}
	s, _ := get(MetaSeq)
	// A subscription's own flow-control notice (a server's or a session's, dropping
	// one subscriber) is not one of the member's publications: it has no sequence.
	if in.seq, err = strconv.ParseUint(s, 10, 64); err != nil || in.seq == 0 && name != NameClosed {
		return in, fmt.Errorf("services: %s without a sequence", name)
	}
	if in.sid, err = subIDFrom(get); err != nil {
		return in, err
	}
	for _, k := range []string{"traceparent", "tracestate"} {
		if v, ok := get(k); ok {
			if in.trace == nil {
				in.trace = map[string]string{}
			}
			in.trace[k] = v
		}
	}
	switch name {
	case NameUpdate:
		in.op, in.raw = opUpdate, payload
		if r, _ := get(MetaReplace); r == "1" {
			in.op = opReplace
		}
	case NameEvent:
		in.op, in.raw = opEvent, payload
	case NameClosed:
		in.op = opClosed
		var n closedNotice
		_ = json.Unmarshal(payload, &n)
		if n.Code == "" {
			n.Code = CodeUnavailable
		}
		in.err = &Error{Code: n.Code, Message: n.Message}
	default:
		return in, fmt.Errorf("services: not a subscription frame: %s", name)
	}
	return in, nil
}
