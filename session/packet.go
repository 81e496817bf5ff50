package session

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"github.com/meshnode/meshnode/session/codec"
	"github.com/meshnode/meshnode/session/compress"
	"github.com/meshnode/meshnode/session/wire"
)

// Packet is one Send or Request delivered to Session.OnPacket: the dispatch context
// (kind, name, metadata, request sequence, correlation and flow ids, codec, routing ID
// through Peer) and the payload, already decompressed. Metadata and Payload belong to
// the packet; treat them as read-only.
type Packet struct {
	// The one-byte fields and replied share the first word: every padding byte is a
	// byte more per packet allocated (and zeroed, and swept) at the ingress rate.
	Kind       wire.Kind
	Codec      wire.Codec
	FlowOrigin wire.FlowOrigin
	reusable   bool // the runtime takes the packet back after its callback (reuse.go)
	replied    atomic.Bool

	Name          string
	Metadata      wire.Metadata
	RequestSeq    uint64
	CorrelationID string
	FlowID        string
	Payload       []byte
	// Peer is the connection the packet came from.
	Peer *Peer

	// The server span (trace.go); nil when tracing is off, and then never read past
	// that nil check. One pointer, so that the untraced Packet stays in its allocation
	// size class.
	span *packetSpan
	// next links the packets that one mailbox message hands to the session owner
	// (readloop.go, pullBuffered); cleared before the packet's callback runs.
	next *Packet
}

// RoutingID returns the peer identity of the connection (digest §11).
func (p *Packet) RoutingID() RoutingID { return p.Peer.c.rid }

// Retain keeps a reused Send packet for the application: after Retain, the packet and
// all it holds stay as they are when OnPacket returns, as every packet of a session
// type without reuse does (SessionType.ReuseSendPackets). Call it during OnPacket, on
// its goroutine; on any other packet it does nothing.
func (p *Packet) Retain() { p.reusable = false }

// IsRequest reports whether the packet expects a reply.
func (p *Packet) IsRequest() bool { return p.Kind == wire.KindRequest }

// Decode converts the payload into v with the server root's codec for p.Codec: the one
// decode surface whatever the codec.
func (p *Packet) Decode(v any) error {
	return p.Peer.c.host.codecs.Unmarshal(p.Codec, p.Payload, v)
}

// Reply sends the Response to this Request: same request_seq, no name (seed §5). It may
// be called from any goroutine, once; later calls return ErrAlreadyReplied.
func (p *Packet) Reply(c wire.Codec, payload []byte, opts ...SendOption) error {
	if err := p.consumeReply(); err != nil {
		return err
	}
	if p.span != nil {
		p.endSpan("")
	}
	h := wire.Header{Kind: wire.KindResponse, Codec: c, RequestSeq: p.RequestSeq, CorrelationID: p.CorrelationID, FlowID: p.FlowID, FlowOrigin: p.FlowOrigin}
	return p.Peer.c.send(p.Peer.c.ctx, &h, payload, opts, writeReply)
}

// ReplyError sends an Error reply {"code","message"} (JSON, digest §2.11).
func (p *Packet) ReplyError(code, message string, opts ...SendOption) error {
	if err := p.consumeReply(); err != nil {
		return err
	}
	if p.span != nil {
		p.endSpan(code)
	}
	h := wire.Header{Kind: wire.KindError, Codec: wire.CodecJSON, RequestSeq: p.RequestSeq, CorrelationID: p.CorrelationID, FlowID: p.FlowID, FlowOrigin: p.FlowOrigin}
	return p.Peer.c.send(p.Peer.c.ctx, &h, p.Peer.c.host.errorPayload(code, message), opts, writeReply)
}

// ReplyValue marshals v with the request's codec and replies with it.
func (p *Packet) ReplyValue(v any, opts ...SendOption) error {
	b, err := p.Peer.c.host.codecs.Marshal(p.Codec, v)
	if err != nil {
		return err
	}
	return p.Reply(p.Codec, b, opts...)
}

// consumeReply takes the one-shot reply token before the transport is touched.
func (p *Packet) consumeReply() error {
	if p.Kind != wire.KindRequest {
		return ErrNotRequest
	}
	if !p.replied.CompareAndSwap(false, true) {
		return ErrAlreadyReplied
	}
	return nil
}

// SendOption adjusts one outbound frame.
type SendOption func(*sendOptions)

type sendOptions struct {
	metadata    wire.Metadata
	compress    bool
	nonBlocking bool
}

// NonBlocking queues the frame for the connection's writer and never waits: not for
// the socket, not for queue space. It may use the room between the outbound queue's
// soft limit (MaxPendingWrite) and its hard limit (twice that); a client whose queue
// reached the hard limit is a slow consumer: its session is closed (a transport error,
// ErrSlowConsumer) rather than frames being dropped silently. For callers that must
// not stall, such as a node's record receiver serving every session.
func NonBlocking() SendOption { return func(o *sendOptions) { o.nonBlocking = true } }

// WithMetadata attaches a metadata block to the frame.
func WithMetadata(md wire.Metadata) SendOption {
	return func(o *sendOptions) { o.metadata = md }
}

// Compressed sends the payload in the LZ4 container (flag 0x04).
func Compressed() SendOption { return func(o *sendOptions) { o.compress = true } }

func (c *conn) send(ctx context.Context, h *wire.Header, payload []byte, opts []SendOption, mode writeMode) error {
	if len(opts) > 0 {
		var o sendOptions
		for _, fn := range opts {
			fn(&o)
		}
		h.Metadata = o.metadata
		if o.compress && len(payload) > 0 {
			payload = compress.AppendLZ4(nil, payload)
			h.Compressed = true
		}
		if o.nonBlocking {
			mode = writeNoWait
		}
	}
	return c.enqueue(ctx, h, payload, mode)
}

// Peer is the server's handle on one connection. Its methods are safe from any
// goroutine.
type Peer struct{ c *conn }

// RoutingID returns the connection's peer identity.
func (p *Peer) RoutingID() RoutingID { return p.c.rid }

// Node returns the name of the stream node that accepted the connection.
func (p *Peer) Node() string { return p.c.node.cfg.name }

// Transport returns tcp, tls, ws or wss.
func (p *Peer) Transport() string { return p.c.transport }

// RemoteAddr returns the client's address.
func (p *Peer) RemoteAddr() net.Addr { return p.c.nc.RemoteAddr() }

// Codecs returns the server root's codec registry.
func (p *Peer) Codecs() *codec.Registry { return p.c.host.codecs }

// Done is closed when the connection starts closing.
func (p *Peer) Done() <-chan struct{} { return p.c.closing }

// Context returns a context that ends when the connection starts closing: for work
// done on the session's behalf that must not outlive it (a relay waiting for room
// toward a busy node). It allocates nothing.
func (p *Peer) Context() context.Context { return closingContext{p.c} }

// closingContext is done when its connection starts closing.
type closingContext struct{ c *conn }

func (closingContext) Deadline() (time.Time, bool) { return time.Time{}, false }
func (x closingContext) Done() <-chan struct{}     { return x.c.closing }
func (x closingContext) Err() error {
	if x.c.isClosing() {
		return context.Canceled
	}
	return nil
}
func (closingContext) Value(any) any { return nil }

// Send pushes a Send frame to the client. It returns ErrSessionClosed once the
// connection is closing, and waits (bounded by ctx) while the connection's outbound
// queue is at its soft limit (MaxPendingWrite).
func (p *Peer) Send(ctx context.Context, name string, c wire.Codec, payload []byte, opts ...SendOption) error {
	h := wire.Header{Kind: wire.KindSend, Codec: c, Name: name}
	return p.c.send(ctx, &h, payload, opts, writePush)
}

// Frame is a STREAM frame encoded once, to be written to many sessions as it is (a
// topic's fan-out): see EncodeSend and Peer.SendFrame.
type Frame struct{ b []byte }

// Len returns the frame's size on the wire.
func (f Frame) Len() int { return len(f.b) }

// EncodeSend encodes a Send frame named name, with payload in codec c and the metadata
// block md (nil: none), checked as Peer.Send checks it.
func EncodeSend(name string, c wire.Codec, payload []byte, md wire.Metadata) (Frame, error) {
	h := wire.Header{Kind: wire.KindSend, Codec: c, Name: name, Metadata: md}
	b, err := wire.AppendFrame(nil, &h, payload)
	if err != nil {
		return Frame{}, err
	}
	return Frame{b: b}, nil
}

// SendFrame queues f for the client and never waits: not for the socket, not for queue
// space. A session whose outbound queue is at its soft limit (MaxPendingWrite) does not
// take it: SendFrame returns ErrBehind and the session stays open. It returns
// ErrSessionClosed once the connection is closing.
func (p *Peer) SendFrame(f Frame) error {
	if len(f.b) == 0 {
		return fmt.Errorf("stream session: SendFrame of an empty frame")
	}
	return p.c.enqueue(p.c.ctx, nil, f.b, writeSoft)
}

// SendValue marshals v with codec c and pushes it as a Send frame.
func (p *Peer) SendValue(ctx context.Context, name string, c wire.Codec, v any, opts ...SendOption) error {
	b, err := p.c.host.codecs.Marshal(c, v)
	if err != nil {
		return err
	}
	return p.Send(ctx, name, c, b, opts...)
}

// Close closes the session: the client gets session-closing with reason and
// diagnostic (truncated to 512 bytes), then the connection closes. It returns
// ErrSessionClosed when the session was already closing.
func (p *Peer) Close(reason wire.CloseReason, diagnostic string) error {
	if !reason.Valid() {
		return fmt.Errorf("stream session close: invalid reason %d", reason)
	}
	if !p.c.close(closeCause{reason: reason, notify: true, diag: diagnostic}) {
		return ErrSessionClosed
	}
	return nil
}

// Submit runs fn as a turn of this session: serially with its callbacks, never
// concurrently with one. It returns ErrSessionClosed once the session is closing; a
// turn submitted while the session closes may not run.
func (p *Peer) Submit(fn func(ctx context.Context)) error {
	if p.c.isClosing() {
		return ErrSessionClosed
	}
	p.c.host.system.Root.Send(p.c.pid, &submitted{fn: fn})
	return nil
}

// RejectInbound stops application dispatch of inbound packets while the connection
// stays open for outbound frames (a session that is being replaced): a Request gets an
// Error reply with code shutting_down, a Send is dropped.
func (p *Peer) RejectInbound() { p.c.rejectInbound.Store(true) }

// SetIngressGate installs a bound that a layer above the session keeps (bindings: relays
// awaiting replies, a full peer node). Before the session pulls each Send or Request,
// gate is called: nil lets it pull; a channel makes the session stop pulling (no permit
// is held, the client stalls in TCP) until the channel is closed, and then gate is
// asked again. gate runs on the read loop: it must be quick and must not block. nil
// removes the gate.
func (p *Peer) SetIngressGate(gate func() <-chan struct{}) {
	if gate == nil {
		p.c.gate.Store(nil)
		return
	}
	p.c.gate.Store(&gate)
}

// AfterDisconnect registers fn to run in the session's last turn, after the disconnect
// callback. Components layered on sessions (bindings) clean up here.
func (p *Peer) AfterDisconnect(fn func(ctx context.Context, reason wire.CloseReason)) {
	p.c.hookMu.Lock()
	p.c.afterDisconnect = append(p.c.afterDisconnect, fn)
	p.c.hookMu.Unlock()
}
