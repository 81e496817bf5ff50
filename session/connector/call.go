package connector

import (
	"context"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/meshnode/meshnode/session/compress"
	"github.com/meshnode/meshnode/session/wire"
)

// CallOption adjusts one Send or Request. It is a small value rather than a function so
// that passing options costs no allocation.
type CallOption struct {
	kind       optionKind
	key, value string
}

type optionKind uint8

const (
	optionMetadata optionKind = iota + 1
	optionCompression
)

// WithMetadata sets one metadata entry on the outbound frame; a later value for the same
// key wins. The whole block is validated against the wire rules (at most 1,024 bytes, no
// empty key, no NUL) when the frame is built; a violation fails the call with
// ErrValidation.
func WithMetadata(key, value string) CallOption {
	return CallOption{kind: optionMetadata, key: key, value: value}
}

// WithCompression compresses the payload with the connector's algorithm and sets flag
// 0x04. The send bound then applies to the compressed size. With CompressionNone the
// call fails with ErrCompression.
func WithCompression() CallOption { return CallOption{kind: optionCompression} }

// Request sends a Request named name whose payload is req marshalled with the
// connector's codec, and decodes the Response payload into resp (nil resp ignores it)
// with the codec the Response names. An Error reply fails it with a *RemoteError; a
// malformed Error payload with ErrFrameDecode. Without a ctx deadline the request times
// out after RequestTimeout. On timeout or cancel the request stops being pending, and a
// late reply is dropped. A drop of the connection fails it with a *CloseError; it is
// never resent. ctx bounds the wait for the reply, not the transport write: a write
// blocked by a peer that stops reading ends only with a drop or Close.
func (c *Connector) Request(ctx context.Context, name string, req, resp any, opts ...CallOption) error {
	payload, err := c.marshal(name, req)
	if err != nil {
		return err
	}
	cl := getCall()
	cl.typed, cl.resp = true, resp
	err = c.roundTrip(ctx, name, c.opts.Codec, payload, cl, opts)
	putCall(cl)
	return err
}

// RequestRaw is Request with a ready payload: id is written as the frame's codec and the
// reply comes back undecoded.
func (c *Connector) RequestRaw(ctx context.Context, name string, id wire.Codec, payload []byte, opts ...CallOption) (Reply, error) {
	cl := getCall()
	err := c.roundTrip(ctx, name, id, payload, cl, opts)
	r := cl.reply
	putCall(cl)
	return r, err
}

// Send sends a one-way Send named name whose payload is v marshalled with the
// connector's codec. It returns once the frame is written; it is not queued while the
// connector is not connected (ErrDisconnected). ctx is checked before the write; the
// write itself is not interrupted by it.
func (c *Connector) Send(ctx context.Context, name string, v any, opts ...CallOption) error {
	payload, err := c.marshal(name, v)
	if err != nil {
		return err
	}
	return c.SendRaw(ctx, name, c.opts.Codec, payload, opts...)
}

// SendRaw is Send with a ready payload written with codec id.
func (c *Connector) SendRaw(ctx context.Context, name string, id wire.Codec, payload []byte, opts ...CallOption) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("connector: send %q: %w", name, err)
	}
	cn, err := c.liveConn()
	if err != nil {
		return err
	}
	h := wire.Header{Kind: wire.KindSend, Codec: id, Name: name}
	bp, err := c.encode(&h, payload, opts)
	if err != nil {
		return err
	}
	err = cn.write(*bp)
	putBuf(bp)
	return err
}

func (c *Connector) marshal(name string, v any) ([]byte, error) {
	b, err := c.opts.Codecs.Marshal(c.opts.Codec, v)
	if err != nil {
		return nil, fmt.Errorf("%w: marshal %q payload: %w", ErrValidation, name, err)
	}
	return b, nil
}

func (c *Connector) liveConn() (*conn, error) {
	if cn := c.live.Load(); cn != nil {
		return cn, nil
	}
	s := c.State()
	if s == StateClosed {
		return nil, ErrClosed
	}
	return nil, fmt.Errorf("%w: connector is %s", ErrDisconnected, s)
}

// roundTrip registers cl under a fresh request_seq, writes the Request and waits for
// the reply, the deadline or a drop.
func (c *Connector) roundTrip(ctx context.Context, name string, id wire.Codec, payload []byte, cl *call, opts []CallOption) error {
	if err := ctx.Err(); err != nil {
		return requestContextError(ctx, name)
	}
	cn, err := c.liveConn()
	if err != nil {
		return err
	}
	seq := c.seq.Add(1)
	h := wire.Header{
		Kind:       wire.KindRequest,
		Codec:      id,
		RequestSeq: seq,
		Name:       name,
		// Hex counter strings like the TypeScript connector; unique among pending
		// requests because the seq is.
		CorrelationID: strconv.FormatUint(seq, 16),
	}
	bp, err := c.encode(&h, payload, opts)
	if err != nil {
		return err
	}
	// Registered before the write: the reply may arrive before Write returns.
	if !cn.register(seq, cl) {
		putBuf(bp)
		return cn.ce
	}
	err = cn.write(*bp)
	putBuf(bp)
	if err != nil {
		// The failed write dropped the connection, and the drop finished cl.
		<-cl.done
		return cl.err
	}

	var expire <-chan time.Time
	if _, ok := ctx.Deadline(); !ok {
		if cl.timer == nil {
			cl.timer = time.NewTimer(c.opts.RequestTimeout)
		} else {
			cl.timer.Reset(c.opts.RequestTimeout)
		}
		expire = cl.timer.C
		defer cl.timer.Stop()
	}
	select {
	case <-cl.done:
		return cl.err
	case <-ctx.Done():
		if cn.abandon(seq, cl) {
			return requestContextError(ctx, name)
		}
	case <-expire:
		if cn.abandon(seq, cl) {
			return fmt.Errorf("%w: %q got no reply within %v: %w", ErrRequestTimeout, name, c.opts.RequestTimeout, context.DeadlineExceeded)
		}
	}
	// A reply or a drop took cl first and is finishing it: that outcome wins.
	<-cl.done
	return cl.err
}

func requestContextError(ctx context.Context, name string) error {
	err := ctx.Err()
	if err == context.DeadlineExceeded {
		return fmt.Errorf("%w: %q: %w", ErrRequestTimeout, name, err)
	}
	return fmt.Errorf("connector: request %q: %w", name, err)
}

// encode builds the frame for h and payload into a pooled buffer, applying the call
// options, the flow fields and the send bound; nothing is written on failure.
func (c *Connector) encode(h *wire.Header, payload []byte, opts []CallOption) (*[]byte, error) {
	compressed := false
	for _, o := range opts {
		switch o.kind {
		case optionMetadata:
			h.Metadata = setMetadata(h.Metadata, o.key, o.value)
		case optionCompression:
			compressed = true
		}
	}
	if compressed {
		if c.opts.Compression == CompressionNone {
			return nil, fmt.Errorf("%w: %q asks for compression, but the connector's compression is None", ErrCompression, h.Name)
		}
		zp := getBuf()
		defer putBuf(zp)
		*zp = compress.AppendLZ4((*zp)[:0], payload)
		payload = *zp
		h.Compressed = true
	}
	if len(payload) > c.opts.MaxSendPayload {
		return nil, fmt.Errorf("%w: %q payload of %d bytes, limit %d", ErrValidation, h.Name, len(payload), c.opts.MaxSendPayload)
	}
	if !c.opts.DiagnosticsOff {
		h.FlowID, h.FlowOrigin = newFlowID(), wire.FlowApplication
	}
	bp := getBuf()
	b, err := wire.AppendFrame((*bp)[:0], h, payload)
	*bp = b
	if err != nil {
		putBuf(bp)
		return nil, validationError(err)
	}
	return bp, nil
}

// setMetadata sets key to value, last value wins (digest §2.7).
func setMetadata(md wire.Metadata, key, value string) wire.Metadata {
	for i := range md {
		if md[i].Key == key {
			md[i].Value = value
			return md
		}
	}
	return append(md, wire.MetadataEntry{Key: key, Value: value})
}

// newFlowID returns a lowercase hyphenated UUIDv7 (RFC 9562): 48-bit Unix milliseconds,
// version 7, 12 random bits, variant 10, 62 random bits. Flow ids need uniqueness, not
// secrecy, so the fast runtime generator is enough.
func newFlowID() string {
	var u [16]byte
	ms := uint64(time.Now().UnixMilli())
	r1, r2 := rand.Uint64(), rand.Uint64()
	for i := range 6 {
		u[i] = byte(ms >> (40 - 8*i))
	}
	u[6] = 0x70 | byte(r1>>8)&0x0f
	u[7] = byte(r1)
	u[8] = 0x80 | byte(r2>>56)&0x3f
	for i := 9; i < 16; i++ {
		u[i] = byte(r2 >> (8 * (15 - i)))
	}
	var s [36]byte
	hex.Encode(s[0:8], u[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], u[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], u[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], u[8:10])
	s[23] = '-'
	hex.Encode(s[24:36], u[10:16])
	return string(s[:])
}

// call is one pending request. Whoever removes it from the pending map (the reply, a
// drop, or the caller abandoning it) is the only one to touch it until done fires, so
// calls can be pooled.
type call struct {
	done  chan struct{} // capacity 1: finish never blocks
	typed bool
	resp  any
	reply Reply
	err   error
	timer *time.Timer // RequestTimeout timer, reused with the call
}

func (cl *call) finish(err error) {
	cl.err = err
	cl.done <- struct{}{}
}

var callPool = sync.Pool{New: func() any { return &call{done: make(chan struct{}, 1)} }}

func getCall() *call { return callPool.Get().(*call) }

func putCall(cl *call) {
	cl.typed, cl.resp, cl.reply, cl.err = false, nil, Reply{}, nil
	callPool.Put(cl)
}

// Frame buffers: large ones are not kept, so one big payload does not pin memory.
const maxPooledBuffer = 64 << 10

var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

func getBuf() *[]byte { return bufPool.Get().(*[]byte) }

func putBuf(bp *[]byte) {
	if cap(*bp) > maxPooledBuffer+4<<10 {
		return
	}
	*bp = (*bp)[:0]
	bufPool.Put(bp)
}
