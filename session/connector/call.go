package connector

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

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
// never resent. ctx bounds the wait for the reply and the wait for room in a full write
// queue (see Send), not a transport write in progress: a write blocked by a peer that
// stops reading ends only with a drop or Close.
func (c *Connector) Request(ctx context.Context, name string, req, resp any, opts ...CallOption) error {
	payload, err := c.marshal(name, req)
	if err != nil {
		return err
	}
	var span trace.Span
	if c.tracer != nil {
		ctx, span, opts = c.startSpan(ctx, "request", name, opts)
	}
	cl := getCall()
	cl.typed, cl.resp = true, resp
	err = c.roundTrip(ctx, name, c.opts.Codec, payload, cl, opts)
	putCall(cl)
	if span != nil {
		endSpan(span, err)
	}
	return err
}

// RequestRaw is Request with a ready payload: id is written as the frame's codec and the
// reply comes back undecoded.
func (c *Connector) RequestRaw(ctx context.Context, name string, id wire.Codec, payload []byte, opts ...CallOption) (Reply, error) {
	var span trace.Span
	if c.tracer != nil {
		ctx, span, opts = c.startSpan(ctx, "request", name, opts)
	}
	cl := getCall()
	err := c.roundTrip(ctx, name, id, payload, cl, opts)
	r := cl.reply
	putCall(cl)
	if span != nil {
		endSpan(span, err)
	}
	return r, err
}

// Send sends a one-way Send named name whose payload is v marshalled with the
// connector's codec. It returns once the frame is queued for the connection's write
// goroutine, which writes frames in call order, coalescing those queued meanwhile into
// one write. It is not queued while the connector is not connected (ErrDisconnected).
// A Send is at most once: a frame still queued when the connection drops is lost
// without an error (Close first writes what was queued, see Close). While more than
// 256 KiB are queued (the peer reads slower than we send), Send waits for room, bounded
// by ctx; ctx is also checked before anything else, and the write itself is not
// interrupted by it.
func (c *Connector) Send(ctx context.Context, name string, v any, opts ...CallOption) error {
	payload, err := c.marshal(name, v)
	if err != nil {
		return err
	}
	return c.SendRaw(ctx, name, c.opts.Codec, payload, opts...)
}

// SendRaw is Send with a ready payload written with codec id.
func (c *Connector) SendRaw(ctx context.Context, name string, id wire.Codec, payload []byte, opts ...CallOption) error {
	if c.tracer != nil {
		var span trace.Span
		ctx, span, opts = c.startSpan(ctx, "send", name, opts)
		err := c.sendRaw(ctx, name, id, payload, opts)
		endSpan(span, err)
		return err
	}
	return c.sendRaw(ctx, name, id, payload, opts)
}

func (c *Connector) sendRaw(ctx context.Context, name string, id wire.Codec, payload []byte, opts []CallOption) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("connector: send %q: %w", name, err)
	}
	cn, err := c.liveConn()
	if err != nil {
		return err
	}
	h := wire.Header{Kind: wire.KindSend, Codec: id, Name: name}
	var now time.Time
	if !c.opts.DiagnosticsOff {
		now = c.clock.now() // for the flow id
	}
	// Queued for the write goroutine: a sender in a loop never waits for a syscall, and
	// its frames leave in large batches.
	if len(opts) > 0 {
		// Metadata or compression: built (and compressed) in a buffer of its own, not
		// under the queue's lock, then copied in.
		bp, err := c.encode(&h, payload, opts, 0, now)
		if err != nil {
			return err
		}
		err = cn.enqueue(ctx, *bp, true, false)
		putBuf(bp)
		return sendQueueError(name, err)
	}
	// A plain Send is encoded straight into the queue (no scratch buffer to fill, copy
	// and give back), after the checks its encode makes, so that an invalid one fails
	// at once rather than after waiting for room.
	if len(payload) > c.opts.MaxSendPayload {
		return payloadTooLarge(name, len(payload), c.opts.MaxSendPayload)
	}
	if err := wire.ValidateHeader(&h); err != nil {
		return validationError(err)
	}
	if err := cn.lockRoom(ctx, false); err != nil {
		return sendQueueError(name, err)
	}
	b, err := c.appendFrame(cn.wbuf, &h, payload, nil, 0, now)
	if err != nil {
		cn.wmu.Unlock() // wbuf keeps its length: nothing of the frame is queued
		return err
	}
	cn.wbuf = b
	return cn.queued(true)
}

// sendQueueError words a Send's failure to queue: waiting for room ended (ctx), or the
// connection dropped (ErrDisconnected, as it is).
func sendQueueError(name string, err error) error {
	if err != nil && !errors.Is(err, ErrDisconnected) {
		return fmt.Errorf("connector: send %q: waiting for write room: %w", name, err)
	}
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
// the reply, the deadline or a drop: by reading the transport itself when the reader
// token is free (lead), else on cl.done (follow).
func (c *Connector) roundTrip(ctx context.Context, name string, id wire.Codec, payload []byte, cl *call, opts []CallOption) error {
	if err := ctx.Err(); err != nil {
		return requestContextError(ctx, name)
	}
	cn, err := c.liveConn()
	if err != nil {
		return err
	}
	seq := c.seq.Add(1)
	// The correlation id is a hex counter string like the TypeScript connector's; unique
	// among pending requests because the seq is. encode writes it.
	h := wire.Header{Kind: wire.KindRequest, Codec: id, RequestSeq: seq, Name: name}
	now := c.clock.now() // for the flow id and the expiry of a lead
	bp, err := c.encode(&h, payload, opts, seq, now)
	if err != nil {
		return err
	}
	// Registered before the write: the reply may arrive before the write returns.
	if !cn.register(seq, cl) {
		putBuf(bp)
		return cn.ce
	}
	err = cn.enqueue(ctx, *bp, false, false)
	putBuf(bp)
	if err != nil {
		if ctx.Err() != nil && cn.abandon(seq, cl) {
			// Not written: ctx ended while waiting for room in the write queue.
			return requestContextError(ctx, name)
		}
		// The connection dropped, and the drop finished cl.
		<-cl.done
		return cl.err
	}
	if gen, ok := cn.tryLead(); ok {
		return c.lead(ctx, cn, gen, name, seq, cl, now)
	}
	return c.follow(ctx, cn, name, seq, cl)
}

// follow waits for the reader to finish cl, for the deadline or for the context.
func (c *Connector) follow(ctx context.Context, cn *conn, name string, seq uint64, cl *call) error {
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
			return c.requestTimeoutError(name)
		}
	}
	// A reply or a drop took cl first and is finishing it: that outcome wins.
	<-cl.done
	return cl.err
}

// lead reads frames as the token holder until cl is finished: by its reply (handled by
// the ordinary frame code, which finishes cl like any other call), by a drop, or by
// the deadline or the context, which cut the read short with a read deadline:
//
//   - Without a ctx deadline, RequestTimeout applies through the read deadline. It is
//     set only when the one in place is missing or later than this request's expiry;
//     an earlier one (another request's, still in the future) fires early, and the
//     read then simply resumes with ours. Back-to-back requests thus change the
//     deadline about once per RequestTimeout, not once per request.
//   - A ctx that can end (cancel or deadline) gets an AfterFunc that sets a past read
//     deadline while this request still leads.
//
// A deadline may also fire for a reason that is not this request's (one left behind by
// an earlier holder or a late AfterFunc): every holder treats a timeout as "check
// whether my wait is over, else resume", and the frame reader keeps partial frames.
func (c *Connector) lead(ctx context.Context, cn *conn, gen uint64, name string, seq uint64, cl *call, start time.Time) error {
	var expire time.Time
	if _, ok := ctx.Deadline(); !ok {
		expire = start.Add(c.opts.RequestTimeout)
		if cn.rdl.IsZero() || cn.rdl.After(expire) {
			cn.setLeadDeadline(expire)
		}
	}
	if ctx.Done() != nil {
		stop := context.AfterFunc(ctx, func() { cn.interruptLead(gen) })
		defer stop()
	}
	defer cn.releaseLead()
	for {
		select {
		case <-cl.done:
			return cl.err
		default:
		}
		h, payload, err := cn.readFrame()
		if err == nil {
			cn.frames.Add(1)
			if !cn.handle(&h, payload) {
				<-cl.done // the connection ended, and the drop finished cl
				return cl.err
			}
			continue
		}
		if !isTimeout(err) || cn.closed.Load() {
			cn.readFailed(err)
			<-cl.done
			return cl.err
		}
		if ctx.Err() == nil && (expire.IsZero() || time.Now().Before(expire)) {
			// Not our deadline: resume with ours. Then look at ctx again, in case its
			// AfterFunc ran before the reset and was overridden by it.
			cn.setLeadDeadline(expire)
			if ctx.Err() == nil {
				continue
			}
		}
		if cn.abandon(seq, cl) {
			if ctx.Err() != nil {
				return requestContextError(ctx, name)
			}
			return c.requestTimeoutError(name)
		}
		// Only a drop can have taken cl (this request is the reader): it finishes cl.
		<-cl.done
		return cl.err
	}
}

func (c *Connector) requestTimeoutError(name string) error {
	return fmt.Errorf("%w: %q got no reply within %v: %w", ErrRequestTimeout, name, c.opts.RequestTimeout, context.DeadlineExceeded)
}

func requestContextError(ctx context.Context, name string) error {
	err := ctx.Err()
	if err == context.DeadlineExceeded {
		return fmt.Errorf("%w: %q: %w", ErrRequestTimeout, name, err)
	}
	return fmt.Errorf("connector: request %q: %w", name, err)
}

// encode builds the frame for h and payload into a pooled buffer, applying the call
// options, the ids (the correlation id of request seq when seq > 0, and unless
// diagnostics are off a flow of time now) and the send bound; nothing is written on
// failure.
func (c *Connector) encode(h *wire.Header, payload []byte, opts []CallOption, seq uint64, now time.Time) (*[]byte, error) {
	bp := getBuf()
	b, err := c.appendFrame((*bp)[:0], h, payload, opts, seq, now)
	if err != nil {
		putBuf(bp)
		return nil, err
	}
	*bp = b
	return bp, nil
}

// appendFrame appends the frame of h and payload to dst: compressed when an option asks
// for it, with the correlation id of seq (when > 0) and, unless diagnostics are off, a
// flow id of time now. On an error dst's bytes up to its length are unchanged.
func (c *Connector) appendFrame(dst []byte, h *wire.Header, payload []byte, opts []CallOption, seq uint64, now time.Time) ([]byte, error) {
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
		return nil, payloadTooLarge(h.Name, len(payload), c.opts.MaxSendPayload)
	}
	if seq > 0 {
		h.CorrelationID = corrPlaceholder[:corrLen(seq)] // see finishHeader
	}
	start := len(dst)
	b := wire.AppendPrefix(dst, 0, len(payload)) // header_len: finishHeader
	b, err := wire.AppendHeader(b, h)
	if err != nil {
		return nil, validationError(err)
	}
	b = finishHeader(b, start, seq, !c.opts.DiagnosticsOff, now)
	return append(b, payload...), nil
}

func payloadTooLarge(name string, n, limit int) error {
	return fmt.Errorf("%w: %q payload of %d bytes, limit %d", ErrValidation, name, n, limit)
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
