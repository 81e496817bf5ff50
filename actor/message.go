package actor

import (
	"fmt"
	"reflect"

	"google.golang.org/protobuf/proto"

	"github.com/meshnode/meshnode/fault"
	"github.com/meshnode/meshnode/session/codec"
	"github.com/meshnode/meshnode/session/wire"
)

// Actors exchange typed values. A message type binds a Go type to a name (the packet
// name of record 24 on the wire) and a codec (msgpack by default, JSON or protobuf): a
// value sent to an Actor on another node is encoded with its type's codec and decoded
// there into a new value of the same registered type. Between Actors of one node the
// value is handed over as it is, without encoding.
//
// Whatever the sender passed (T or *T), the receiving Actor gets a *T: its Receive
// switches on pointer types. Do not change a message after sending it.
//
// A message whose name has no registered type arrives as a *Message (the raw name,
// content type and bytes), so a node that does not know a type still receives it.

// MessageType is one registered message type (MessageOf).
type MessageType struct {
	name  string
	typ   reflect.Type // T, never a pointer
	codec wire.Codec
}

// MessageOf returns the message type of T under name, encoded with codec c (default
// msgpack). Register it with HostOptions.Messages (or Host.RegisterMessages) on every
// node that sends or receives it.
func MessageOf[T any](name string, c ...wire.Codec) MessageType {
	t := MessageType{name: name, typ: reflect.TypeFor[T](), codec: wire.CodecMsgPack}
	if len(c) > 0 {
		t.codec = c[0]
	}
	return t
}

// Name returns the message type's name.
func (t MessageType) Name() string { return t.name }

// messageTypes is a host's registry: by name (receiving) and by Go type (sending).
type messageTypes struct {
	byName map[string]MessageType
	byType map[reflect.Type]MessageType
}

// Reserved message names (the $zlink. prefix is the framework's).
const (
	replyErrorName = "$zlink.error" // an error reply to an Actor request: the JSON error payload
	replyNilName   = "$zlink.nil"   // a reply with no value
)

// register validates and adds types; on error nothing is added. Errors name the field
// and the type.
func (m *messageTypes) register(codecs *codec.Registry, types []MessageType) error {
	byName := make(map[string]MessageType, len(m.byName)+len(types))
	byType := make(map[reflect.Type]MessageType, len(m.byType)+len(types))
	for k, v := range m.byName {
		byName[k] = v
	}
	for k, v := range m.byType {
		byType[k] = v
	}
	for i, t := range types {
		field := fmt.Sprintf("Messages[%d]", i)
		switch {
		case t.typ == nil:
			return fault.Errorf(fault.InvalidOperation, "actor: %s: not made with MessageOf", field)
		case t.name == "" || len(t.name) > 255:
			return fault.Errorf(fault.InvalidOperation, "actor: %s (%s): name must be 1..255 bytes", field, t.typ)
		case wire.IsReservedName(t.name):
			return fault.Errorf(fault.InvalidOperation, "actor: %s (%s): name %q is reserved", field, t.typ, t.name)
		case t.typ.Kind() == reflect.Pointer || t.typ.Kind() == reflect.Interface:
			return fault.Errorf(fault.InvalidOperation, "actor: %s: register the element type, not %s", field, t.typ)
		}
		c, err := codecs.Lookup(t.codec)
		if err != nil {
			return fault.Errorf(fault.NotConfigured, "actor: %s (%s): codec %d: %w", field, t.typ, t.codec, err)
		}
		if t.codec == wire.CodecRaw && t.typ != reflect.TypeFor[[]byte]() {
			return fault.Errorf(fault.InvalidOperation, "actor: %s (%s): the raw codec carries []byte only", field, t.typ)
		}
		if c.ID() == wire.CodecProtobuf && !reflect.PointerTo(t.typ).Implements(protoMessage) {
			return fault.Errorf(fault.InvalidOperation, "actor: %s (%s): the protobuf codec needs a proto.Message", field, t.typ)
		}
		if prev, dup := byName[t.name]; dup {
			return fault.Errorf(fault.AlreadyExists, "actor: %s: name %q registered twice (%s and %s)", field, t.name, prev.typ, t.typ)
		}
		if prev, dup := byType[t.typ]; dup {
			return fault.Errorf(fault.AlreadyExists, "actor: %s: type %s registered twice (%q and %q)", field, t.typ, prev.name, t.name)
		}
		byName[t.name], byType[t.typ] = t, t
	}
	m.byName, m.byType = byName, byType
	return nil
}

// typeOf returns the registered type of v (T or *T).
func (m *messageTypes) typeOf(v any) (MessageType, bool) {
	t := reflect.TypeOf(v)
	if t == nil {
		return MessageType{}, false
	}
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	mt, ok := m.byType[t]
	return mt, ok
}

// normalize returns v as the *T a receiver gets.
func normalize(v any) any {
	rv := reflect.ValueOf(v)
	if !rv.IsValid() || rv.Kind() == reflect.Pointer {
		return v
	}
	p := reflect.New(rv.Type())
	p.Elem().Set(rv)
	return p.Interface()
}

// checkReply reports whether v could be sent to another node as a reply, without
// encoding it: nil, a *Message or Message, or a value of a registered type.
func (h *Host) checkReply(v any) error {
	switch v.(type) {
	case nil, *Message, Message:
		return nil
	}
	if _, ok := h.messages.typeOf(v); !ok {
		return h.unregistered(v)
	}
	return nil
}

func (h *Host) unregistered(v any) error {
	return fault.Errorf(fault.NotConfigured, "actor: no message type registered for %T (register it with actor.MessageOf in meshnode.Config.Messages)", v)
}

// encode returns the wire form of a message value: a *Message or Message as it is, a
// registered type encoded with its codec. nil encodes as the empty reply.
func (h *Host) encode(v any) (*Message, error) {
	switch m := v.(type) {
	case nil:
		return &Message{Name: replyNilName, ContentType: codec.ContentTypeRaw}, nil
	case *Message:
		return m, nil
	case Message:
		return &m, nil
	}
	mt, ok := h.messages.typeOf(v)
	if !ok {
		return nil, h.unregistered(v)
	}
	c, err := h.codecs.Lookup(mt.codec)
	if err != nil {
		return nil, fault.Errorf(fault.NotConfigured, "actor: %s: %w", mt.name, err)
	}
	data, err := c.Marshal(v)
	if err != nil {
		return nil, fault.Errorf(fault.InvalidOperation, "actor: encode %s: %w", mt.name, err)
	}
	return &Message{Name: mt.name, ContentType: c.ContentType(), Data: data}, nil
}

// decode returns the value of a message from another node: a new *T of its registered
// type, or the *Message itself when the name is not registered here.
func (h *Host) decode(m *Message) (any, error) {
	if m.Name == replyNilName {
		return nil, nil
	}
	mt, ok := h.messages.byName[m.Name]
	if !ok {
		return m, nil
	}
	c, err := h.codecs.ByContentType(m.ContentType)
	if err != nil {
		return nil, fault.Errorf(fault.ProtocolError, "actor: %s: content type %q: %w", m.Name, m.ContentType, err)
	}
	p := reflect.New(mt.typ)
	if err := c.Unmarshal(m.Data, p.Interface()); err != nil {
		return nil, fault.Errorf(fault.ProtocolError, "actor: decode %s: %w", m.Name, err)
	}
	return p.Interface(), nil
}

var protoMessage = reflect.TypeFor[proto.Message]()
