package stream_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"sync"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/meshnode/meshnode/internal/testkit"
	"github.com/meshnode/meshnode/session"
	"github.com/meshnode/meshnode/session/compress"
	"github.com/meshnode/meshnode/session/wire"
)

// Send packet reuse (SessionType.ReuseSendPackets): a session type that keeps no Send
// packet past its callback gets later Sends read into the packets it returned. These
// tests run with reuse on, and again with it off (MESHNODE_TEST_FAST_PATHS=off sets
// HostOptions.NoPacketReuse): the session must see the same packets either way.

// reuseLog is what a reuseSession saw, copied out during each callback (except what
// the test keeps on purpose: names as they were, retained packets, Requests).
type reuseLog struct {
	mu       sync.Mutex
	seen     map[*session.Packet]int // keeps every packet alive: only the runtime can reuse one
	sends    []sendCopy
	kept     []keptPacket
	requests []*session.Packet
	notify   chan struct{}
}

type sendCopy struct {
	name    string // p.Name itself, not a copy: it must stay valid
	payload []byte
	flow    string
	md      string
}

type keptPacket struct {
	p       *session.Packet
	payload []byte
	flow    string
}

type reuseSession struct{ log *reuseLog }

func (s reuseSession) OnPacket(ctx context.Context, p *session.Packet) error {
	l := s.log
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seen[p]++
	if p.IsRequest() {
		l.requests = append(l.requests, p) // never reused: answered after later Sends
	} else {
		l.sends = append(l.sends, sendCopy{name: p.Name, payload: bytes.Clone(p.Payload), flow: strings.Clone(p.FlowID), md: fmt.Sprint(p.Metadata)})
		if p.Name == "keep" {
			p.Retain()
			l.kept = append(l.kept, keptPacket{p: p, payload: bytes.Clone(p.Payload), flow: strings.Clone(p.FlowID)})
		}
	}
	select {
	case l.notify <- struct{}{}:
	default:
	}
	return nil
}

func (l *reuseLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.sends) + len(l.requests)
}

// startReuseHost starts a host whose session type reuses its Send packets.
func startReuseHost(t *testing.T) (*reuseLog, *testkit.RawConn) {
	return startReuseHostWith(t, session.HostOptions{})
}

func startReuseHostWith(t *testing.T, opts session.HostOptions) (*reuseLog, *testkit.RawConn) {
	t.Helper()
	log := &reuseLog{seen: map[*session.Packet]int{}, notify: make(chan struct{}, 1)}
	opts.Logger = quietLogger()
	h := newHost(opts)
	st := session.NewSessionType(func() reuseSession { return reuseSession{log: log} }).ReuseSendPackets()
	if !st.ReusesSendPackets() {
		t.Fatal("ReuseSendPackets returned a type that does not reuse")
	}
	h.AddStreamNode("gw").Bind("tcp://127.0.0.1:0").Session(st)
	if err := h.Start(context.Background()); err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() { _ = h.Close() })
	c, err := testkit.Dial(h.Node("gw").BindAddrs()[0])
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return log, c
}

// reuseFrame is Send i of the mixed stream: three names, sizes on both sides of the
// reused size (120 bytes of header and payload), some with a flow id and metadata, some
// compressed.
func reuseFrame(i int) (wire.Header, []byte, []byte) {
	names := []string{"a", "bb", "keep"}
	h := wire.Header{Kind: wire.KindSend, Codec: wire.CodecJSON, Name: names[i%3]}
	payload := fmt.Appendf(nil, `{"i":%d,"pad":"%s"}`, i, strings.Repeat("x", i%150))
	if i%4 == 0 {
		h.FlowID, h.FlowOrigin = fmt.Sprintf("01890a5d-ac96-774b-bcce-%012x", i), wire.FlowApplication
	}
	if i%5 == 0 {
		h.Metadata = wire.Metadata{{Key: "k", Value: fmt.Sprint(i)}}
	}
	wirePayload := payload
	if i%7 == 0 {
		h.Compressed = true
		wirePayload = compress.AppendLZ4(nil, payload)
	}
	return h, payload, testkit.Encode(h, wirePayload)
}

func TestReuseSendPackets_PipelinedSendsArriveIntactAndNamesStayValid(t *testing.T) {
	log, c := startReuseHost(t)
	const n = 3000
	var stream []byte
	for i := range n {
		_, _, f := reuseFrame(i)
		stream = append(stream, f...)
	}
	if err := c.WriteAll(stream, waitLong); err != nil {
		t.Fatalf("write: %v", err)
	}
	if !eventually(waitLong, func() bool { return log.count() == n }) {
		t.Fatalf("the session saw %d of %d Sends", log.count(), n)
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	for i, got := range log.sends {
		h, payload, _ := reuseFrame(i)
		if got.name != h.Name || !bytes.Equal(got.payload, payload) || got.flow != h.FlowID || got.md != fmt.Sprint(h.Metadata) {
			t.Fatalf("Send %d: got name %q payload %q flow %q metadata %s; want %q %q %q %s",
				i, got.name, got.payload, got.flow, got.md, h.Name, payload, h.FlowID, fmt.Sprint(h.Metadata))
		}
	}
	for i, k := range log.kept {
		if !bytes.Equal(k.p.Payload, k.payload) || k.p.FlowID != k.flow || k.p.Name != "keep" {
			t.Fatalf("retained packet %d changed after its callback: payload %q flow %q name %q, want %q %q keep",
				i, k.p.Payload, k.p.FlowID, k.p.Name, k.payload, k.flow)
		}
	}
	reused := 0
	for _, times := range log.seen {
		if times > 1 {
			reused++
		}
	}
	switch {
	case slowPaths() && reused > 0:
		t.Fatalf("reuse is off (HostOptions.NoPacketReuse), yet %d packets came back to the session", reused)
	case !slowPaths() && reused == 0:
		t.Fatalf("reuse is on, yet none of %d small Sends was read into a returned packet", n)
	}
}

// A Request of a session type that reuses Sends is its own: answered after many Sends
// went through the session, it still carries its sequence, name and payload.
func TestReuseSendPackets_RequestsAreNeverReused(t *testing.T) {
	log, c := startReuseHost(t)
	const requests = 20
	var stream []byte
	for r := 1; r <= requests; r++ {
		stream = append(stream, request(uint64(r), "req", fmt.Sprintf(`{"r":%d}`, r))...)
		for i := range 50 {
			_, _, f := reuseFrame(i)
			stream = append(stream, f...)
		}
	}
	if err := c.WriteAll(stream, waitLong); err != nil {
		t.Fatalf("write: %v", err)
	}
	if !eventually(waitLong, func() bool { return log.count() == requests*51 }) {
		t.Fatalf("the session saw %d of %d packets", log.count(), requests*51)
	}
	log.mu.Lock()
	pending := log.requests
	log.mu.Unlock()
	for _, p := range pending {
		if err := p.Reply(p.Codec, p.Payload); err != nil {
			t.Fatalf("reply: %v", err)
		}
	}
	for r := 1; r <= requests; r++ {
		f := readFrame(t, c)
		want := fmt.Sprintf(`{"r":%d}`, r)
		if f.Header.Kind != wire.KindResponse || f.Header.RequestSeq != uint64(r) || string(f.Payload) != want {
			t.Fatalf("reply %d: kind %d seq %d payload %q, want seq %d payload %s", r, f.Header.Kind, f.Header.RequestSeq, f.Payload, r, want)
		}
	}
	for _, p := range pending {
		if p.Name != "req" {
			t.Fatalf("a kept Request's name changed to %q", p.Name)
		}
	}
}

// A reused Send's server span keeps the client's trace state as it came: the span
// outlives the packet's bytes (an exporter reads it after the callback), so nothing of
// it may point into them.
func TestReuseSendPackets_SpansKeepTheirTraceStateAfterReuse(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	log, c := startReuseHostWith(t, session.HostOptions{TracerProvider: tp})
	const n = 300
	var stream []byte
	for i := range n {
		h := wire.Header{Kind: wire.KindSend, Codec: wire.CodecJSON, Name: "t", Metadata: wire.Metadata{
			{Key: "traceparent", Value: fmt.Sprintf("00-0af7651916cd43dd8448eb211c80319c-%016x-01", i+1)},
			{Key: "tracestate", Value: fmt.Sprintf("k=%04d", i)},
		}}
		stream = append(stream, testkit.Encode(h, []byte("{}"))...)
	}
	if err := c.WriteAll(stream, waitLong); err != nil {
		t.Fatalf("write: %v", err)
	}
	if !eventually(waitLong, func() bool { return log.count() == n && len(rec.Ended()) == n }) {
		t.Fatalf("the session saw %d of %d Sends, %d spans ended", log.count(), n, len(rec.Ended()))
	}
	for _, sp := range rec.Ended() {
		parent := sp.Parent()
		want := fmt.Sprintf("%04d", spanNumber(parent.SpanID())-1)
		if got := parent.TraceState().Get("k"); got != want {
			t.Fatalf("span of the Send with parent %s has trace state k=%q, want %q", parent.SpanID(), got, want)
		}
	}
}

func spanNumber(id trace.SpanID) uint64 { return binary.BigEndian.Uint64(id[:]) }
