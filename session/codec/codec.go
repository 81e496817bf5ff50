package codec

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/vmihailenco/msgpack/v5"
	"google.golang.org/protobuf/proto"

	"github.com/meshnode/meshnode/session/wire"
)

// Sentinel errors; see the package comment for who is at fault for each.
var (
	ErrUnknownCodec     = errors.New("codec: unknown codec")
	ErrUnsupportedValue = errors.New("codec: unsupported value")
	ErrDecode           = errors.New("codec: decode failed")
	ErrEncode           = errors.New("codec: encode failed")
	ErrBadContentType   = errors.New("codec: malformed content type")
)

// Content types of the standard codecs, in canonical form (digest §2.5).
const (
	ContentTypeRaw      = "application/octet-stream"
	ContentTypeJSON     = "application/json"
	ContentTypeMsgPack  = "application/x-msgpack"
	ContentTypeProtobuf = "application/x-protobuf"
)

// Codec converts values to and from payload bytes for one codec number.
type Codec interface {
	ID() wire.Codec
	ContentType() string
	Marshal(v any) ([]byte, error)
	Unmarshal(data []byte, v any) error
}

// Registry maps codec numbers and content types to codecs.
//
// Lookups (Lookup, ByContentType, Marshal, Unmarshal) are lock-free and allocation-free
// on success and may run concurrently with each other and with Register: Register builds
// a new immutable table and publishes it atomically (copy-on-write), so a reader sees
// either the table before or after a registration, never half of one. Registrations are
// expected at setup time; each one copies the table (about 10 KiB).
//
// The zero value is an empty registry; NewRegistry returns one holding the standard
// codecs. A Registry must not be copied after first use.
type Registry struct {
	mu  sync.Mutex // serialises Register; readers never take it
	cur atomic.Pointer[table]
}

// table is one immutable registry snapshot.
type table struct {
	byID [256]Codec
	ct   [256]string // canonical content type captured at registration
	seq  [256]uint64 // registration order, so "later registration wins" survives rebuilds
	next uint64
	byCT map[string]wire.Codec
}

// NewRegistry returns a registry holding the four standard codecs.
func NewRegistry() *Registry {
	r := &Registry{}
	for _, c := range []Codec{RawCodec{}, JSONCodec{}, MsgPackCodec{}, ProtobufCodec{}} {
		if err := r.Register(c); err != nil {
			panic("codec: standard codec rejected: " + err.Error()) // our own constants; cannot happen
		}
	}
	return r
}

// Register adds c under c.ID(), replacing whatever codec had that number (later
// registration wins). c's content type is canonicalised (CanonicalContentType); an
// invalid one is a configuration error and leaves the registry unchanged. When two
// numbers declare the same canonical content type, ByContentType returns the one
// registered last.
func (r *Registry) Register(c Codec) error {
	if c == nil {
		return fmt.Errorf("%w: Register(nil)", ErrUnsupportedValue)
	}
	ct, err := CanonicalContentType(c.ContentType())
	if err != nil {
		return fmt.Errorf("register codec %d: %w", c.ID(), err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	nt := new(table)
	if old := r.cur.Load(); old != nil {
		*nt = *old
	}
	id := c.ID()
	nt.next++
	nt.byID[id], nt.ct[id], nt.seq[id] = c, ct, nt.next

	// Rebuild the content-type index from scratch in registration order: replacing a
	// number must also drop its old content type, and if another number still declares
	// that type it must take the name back.
	ids := make([]int, 0, 8)
	for i, cc := range nt.byID {
		if cc != nil {
			ids = append(ids, i)
		}
	}
	slices.SortFunc(ids, func(a, b int) int { return cmp.Compare(nt.seq[a], nt.seq[b]) })
	nt.byCT = make(map[string]wire.Codec, len(ids))
	for _, i := range ids {
		nt.byCT[nt.ct[i]] = wire.Codec(i)
	}
	r.cur.Store(nt)
	return nil
}

// Lookup returns the codec registered for id, or an error wrapping ErrUnknownCodec.
func (r *Registry) Lookup(id wire.Codec) (Codec, error) {
	if t := r.cur.Load(); t != nil {
		if c := t.byID[id]; c != nil {
			return c, nil
		}
	}
	return nil, fmt.Errorf("%w: no codec registered for number %d", ErrUnknownCodec, id)
}

// ContentTypeOf returns the content type of the codec registered for id, or
// ContentTypeRaw when none is: what a record between nodes carries for a STREAM codec
// number (relays, pushes, topic messages).
func (r *Registry) ContentTypeOf(id wire.Codec) string {
	if c, err := r.Lookup(id); err == nil {
		return c.ContentType()
	}
	return ContentTypeRaw
}

// CodecOf returns the number of the codec registered for the content type ct, or
// wire.CodecRaw when none is: the inverse of ContentTypeOf, for a record's payload.
func (r *Registry) CodecOf(ct string) wire.Codec {
	if c, err := r.ByContentType(ct); err == nil {
		return c.ID()
	}
	return wire.CodecRaw
}

// ByContentType returns the codec whose canonical content type equals the canonical
// form of ct (digest §12.4: surrounding SP/TAB trimmed, ASCII letters lowercased).
// Parameters, inner whitespace, non-ASCII bytes and empty tokens are rejected with
// ErrBadContentType; a well-formed type nobody registered gives ErrUnknownCodec.
//
// This is the lookup for declared (configuration, call-site) types. A receiver that
// must compare a wire content type byte-exactly should first check
// CanonicalContentType(ct) == ct.
func (r *Registry) ByContentType(ct string) (Codec, error) {
	// The usual content type is a registered one, exactly: every key was checked when
	// it was registered, so an exact hit needs no check (a relayed record names its
	// content type, and checking it was a tenth of the record's delivery).
	if t := r.cur.Load(); t != nil {
		if id, ok := t.byCT[ct]; ok {
			return t.byID[id], nil
		}
	}
	trimmed, upper, err := checkContentType(ct)
	if err != nil {
		return nil, err
	}
	t := r.cur.Load()
	if t == nil {
		return nil, fmt.Errorf("%w: no codec registered for content type %q", ErrUnknownCodec, trimmed)
	}
	var id wire.Codec
	var ok bool
	if !upper {
		id, ok = t.byCT[trimmed]
	} else {
		// Lowercase into a stack buffer; m[string(b)] does not allocate.
		var buf [128]byte
		b := append(buf[:0], trimmed...)
		lowerASCII(b)
		id, ok = t.byCT[string(b)]
	}
	if !ok {
		return nil, fmt.Errorf("%w: no codec registered for content type %q", ErrUnknownCodec, trimmed)
	}
	return t.byID[id], nil
}

// Marshal encodes v with the codec registered for id.
func (r *Registry) Marshal(id wire.Codec, v any) ([]byte, error) {
	c, err := r.Lookup(id)
	if err != nil {
		return nil, err
	}
	b, err := c.Marshal(v)
	if err != nil && !errors.Is(err, ErrEncode) && !errors.Is(err, ErrUnsupportedValue) {
		// A registered extension returned an untyped error: type it so callers get the
		// same surface whatever the codec.
		err = fmt.Errorf("%w (%s): %w", ErrEncode, c.ContentType(), err)
	}
	return b, err
}

// Unmarshal decodes data into v (a non-nil pointer, or a proto.Message for Protobuf)
// with the codec registered for id. This is the one decode surface whatever the codec:
// a payload the peer got wrong always wraps ErrDecode.
func (r *Registry) Unmarshal(id wire.Codec, data []byte, v any) error {
	c, err := r.Lookup(id)
	if err != nil {
		return err
	}
	err = c.Unmarshal(data, v)
	if err != nil && !errors.Is(err, ErrDecode) && !errors.Is(err, ErrUnsupportedValue) {
		err = fmt.Errorf("%w (%s): %w", ErrDecode, c.ContentType(), err)
	}
	return err
}

// CanonicalContentType returns the canonical form of ct per digest §12.4, or an error
// wrapping ErrBadContentType that says what is wrong.
func CanonicalContentType(ct string) (string, error) {
	trimmed, upper, err := checkContentType(ct)
	if err != nil || !upper {
		return trimmed, err
	}
	b := []byte(trimmed)
	lowerASCII(b)
	return string(b), nil
}

// checkContentType trims SP/TAB and validates the rest as token "/" token (RFC 9110
// tchar, ASCII only). It reports whether any uppercase letter needs folding, so the
// common already-canonical case costs no copy.
func checkContentType(ct string) (trimmed string, upper bool, err error) {
	trimmed = strings.Trim(ct, " \t")
	bad := func(format string, args ...any) (string, bool, error) {
		return "", false, fmt.Errorf("%w: %q: "+format, append([]any{ErrBadContentType, ct}, args...)...)
	}
	if trimmed == "" {
		return bad("empty")
	}
	// Parameters are checked first: "application/json; charset=utf-8" is best reported
	// as carrying a parameter, not as containing a space.
	if strings.IndexByte(trimmed, ';') >= 0 {
		return bad("parameters are not allowed")
	}
	slash := -1
	for i := 0; i < len(trimmed); i++ {
		c := trimmed[i]
		switch {
		case c >= 0x80:
			return bad("non-ASCII byte 0x%02x at %d", c, i)
		case c == ' ' || c == '\t' || c == '\r' || c == '\n':
			return bad("whitespace inside")
		case c == '/':
			if slash >= 0 {
				return bad("more than one '/'")
			}
			slash = i
		case 'A' <= c && c <= 'Z':
			upper = true
		case !isTokenChar(c):
			return bad("invalid character %q", c)
		}
	}
	switch {
	case slash < 0:
		return bad("want type/subtype")
	case slash == 0:
		return bad("empty type")
	case slash == len(trimmed)-1:
		return bad("empty subtype")
	}
	return trimmed, upper, nil
}

// isTokenChar reports whether c is an RFC 9110 tchar (letters, digits and
// !#$%&'*+-.^_`|~); the media type grammar is token "/" token.
func isTokenChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

func lowerASCII(b []byte) {
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + ('a' - 'A')
		}
	}
}

// codecErr formats "<sentinel> (<codec>): <detail>: <cause>", keeping both the
// sentinel and the library's cause reachable through errors.Is / errors.As.
func codecErr(name string, sentinel error, cause error, detail string) error {
	switch {
	case cause == nil:
		return fmt.Errorf("%w (%s): %s", sentinel, name, detail)
	case detail == "":
		return fmt.Errorf("%w (%s): %w", sentinel, name, cause)
	default:
		return fmt.Errorf("%w (%s): %s: %w", sentinel, name, detail, cause)
	}
}

// checkTarget rejects decode targets no codec could fill: nil and non-pointers. Catching
// it here gives ErrUnsupportedValue for every codec instead of each library's own
// wording (and keeps it from being mistaken for the peer's ErrDecode).
func checkTarget(name string, v any) error {
	if v == nil {
		return codecErr(name, ErrUnsupportedValue, nil, "nil decode target")
	}
	if rv := reflect.ValueOf(v); rv.Kind() != reflect.Pointer || rv.IsNil() {
		return codecErr(name, ErrUnsupportedValue, nil, fmt.Sprintf("decode target %T is not a non-nil pointer", v))
	}
	return nil
}

// RawCodec is codec 0: the payload bytes themselves. It accepts only []byte and *[]byte
// so that a typed value handed to the wrong codec fails loudly instead of being sent as
// some accidental byte rendering.
type RawCodec struct{}

func (RawCodec) ID() wire.Codec      { return wire.CodecRaw }
func (RawCodec) ContentType() string { return ContentTypeRaw }

// Marshal returns a copy of v ([]byte or non-nil *[]byte). It copies because a send
// completes when the frame is queued, after which the caller may reuse its buffer.
func (RawCodec) Marshal(v any) ([]byte, error) {
	switch b := v.(type) {
	case []byte:
		return bytes.Clone(b), nil
	case *[]byte:
		if b != nil {
			return bytes.Clone(*b), nil
		}
	}
	return nil, codecErr("raw", ErrUnsupportedValue, nil, fmt.Sprintf("%T (want []byte or *[]byte)", v))
}

// Unmarshal stores a copy of data in *v (v must be a non-nil *[]byte): the frame buffer
// data comes from is reused for the next frame.
func (RawCodec) Unmarshal(data []byte, v any) error {
	p, ok := v.(*[]byte)
	if !ok || p == nil {
		return codecErr("raw", ErrUnsupportedValue, nil, fmt.Sprintf("decode target %T (want non-nil *[]byte)", v))
	}
	*p = bytes.Clone(data)
	return nil
}

// JSONCodec is codec 1 (the default), using encoding/json as it is: it does not apply
// the stricter framework-json-v1 profile (duplicate names rejected, case-sensitive
// names, 64-bit integers as strings); types that need those use their own
// Marshal/Unmarshal methods or a registered replacement codec.
type JSONCodec struct{}

func (JSONCodec) ID() wire.Codec      { return wire.CodecJSON }
func (JSONCodec) ContentType() string { return ContentTypeJSON }

func (JSONCodec) Marshal(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		var ute *json.UnsupportedTypeError
		var uve *json.UnsupportedValueError
		if errors.As(err, &ute) || errors.As(err, &uve) {
			return nil, codecErr("json", ErrUnsupportedValue, err, "")
		}
		return nil, codecErr("json", ErrEncode, err, "")
	}
	return b, nil
}

func (JSONCodec) Unmarshal(data []byte, v any) error {
	if err := checkTarget("json", v); err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return codecErr("json", ErrDecode, err, "")
	}
	return nil
}

// MsgPackCodec is codec 2, using github.com/vmihailenco/msgpack/v5.
type MsgPackCodec struct{}

func (MsgPackCodec) ID() wire.Codec      { return wire.CodecMsgPack }
func (MsgPackCodec) ContentType() string { return ContentTypeMsgPack }

// Marshal encodes integers in their smallest form, as other MessagePack implementations
// do (the library's default writes every int64 field as 9 bytes).
func (MsgPackCodec) Marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := msgpack.GetEncoder()
	enc.Reset(&buf)
	enc.UseCompactInts(true)
	err := enc.Encode(v)
	msgpack.PutEncoder(enc)
	if err != nil {
		return nil, codecErr("msgpack", ErrEncode, err, "")
	}
	return buf.Bytes(), nil
}

// Unmarshal decodes exactly one value. The input is first walked structurally: every
// declared length must be backed by bytes and nesting stops at 10000 levels, because the
// library sizes allocations from declared lengths (a 5-byte payload could otherwise
// kill the process) and recurses without limit. It does not use msgpack.Unmarshal
// because that ignores trailing bytes and turns on value preallocation (a per-type
// goroutine cache); a fresh Reset keeps the decoder at its defaults.
func (MsgPackCodec) Unmarshal(data []byte, v any) error {
	if err := checkTarget("msgpack", v); err != nil {
		return err
	}
	if err := checkMsgPack(data); err != nil {
		return codecErr("msgpack", ErrDecode, nil, err.Error())
	}
	r := bytes.NewReader(data)
	dec := msgpack.GetDecoder()
	dec.Reset(r) // *bytes.Reader is an io.ByteScanner: read directly, no bufio read-ahead
	err := dec.Decode(v)
	msgpack.PutDecoder(dec)
	if err != nil {
		return codecErr("msgpack", ErrDecode, err, "")
	}
	if n := r.Len(); n != 0 {
		return codecErr("msgpack", ErrDecode, nil, fmt.Sprintf("%d trailing bytes after the value", n))
	}
	return nil
}

// ProtobufCodec is codec 3, using google.golang.org/protobuf/proto. Values must be
// proto.Message.
type ProtobufCodec struct{}

func (ProtobufCodec) ID() wire.Codec      { return wire.CodecProtobuf }
func (ProtobufCodec) ContentType() string { return ContentTypeProtobuf }

func (ProtobufCodec) Marshal(v any) ([]byte, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, codecErr("protobuf", ErrUnsupportedValue, nil, fmt.Sprintf("%T is not a proto.Message", v))
	}
	b, err := proto.Marshal(m)
	if err != nil {
		return nil, codecErr("protobuf", ErrEncode, err, "")
	}
	return b, nil
}

func (ProtobufCodec) Unmarshal(data []byte, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return codecErr("protobuf", ErrUnsupportedValue, nil, fmt.Sprintf("decode target %T is not a proto.Message", v))
	}
	// A typed nil message reflects as invalid; proto.Unmarshal would fail on it with a
	// generic error that looks like bad input.
	if !m.ProtoReflect().IsValid() {
		return codecErr("protobuf", ErrUnsupportedValue, nil, fmt.Sprintf("decode target %T is nil", v))
	}
	if err := proto.Unmarshal(data, m); err != nil {
		return codecErr("protobuf", ErrDecode, err, "")
	}
	return nil
}
