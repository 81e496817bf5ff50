package grpcbuf_test

import (
	"bytes"
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshnode/meshnode/internal/grpcbuf"
)

var _ mem.BufferPool = (*grpcbuf.Pool)(nil)

// Get returns a buffer of the length asked for, from the smallest tier that holds it,
// and a buffer put back is handed out again for a size of its tier.
func TestPool_GetLengthsAndTiers(t *testing.T) {
	var p grpcbuf.Pool
	for _, c := range []struct{ n, wantCap int }{
		{0, 256}, {1, 256}, {256, 256}, {257, 512}, {4096, 4096}, {65_536 + 9, 131_072},
		{4 << 20, 4 << 20}, {4<<20 + 1, 4<<20 + 1},
	} {
		b := p.Get(c.n)
		if len(*b) != c.n || cap(*b) != c.wantCap {
			t.Errorf("Get(%d): len %d cap %d, want len %d cap %d", c.n, len(*b), cap(*b), c.n, c.wantCap)
		}
	}
}

func TestPool_ReusesWithoutClearing(t *testing.T) {
	var p grpcbuf.Pool
	// sync.Pool may drop what it holds at any GC, so try a few times; one reuse shows
	// the pool works.
	for range 100 {
		b := p.Get(70_000)
		(*b)[0] = 0xAB
		p.Put(b)
		c := p.Get(100_000) // the same 128 KiB tier
		if cap(*c) != 131_072 || len(*c) != 100_000 {
			t.Fatalf("Get(100000): len %d cap %d", len(*c), cap(*c))
		}
		if c == b {
			if (*c)[0] != 0xAB {
				t.Fatal("a reused buffer was cleared")
			}
			return
		}
	}
	t.Fatal("a buffer put back was never handed out again")
}

// A buffer smaller than the least tier, or larger than the largest, is not kept.
func TestPool_PutIgnoresOddSizes(t *testing.T) {
	var p grpcbuf.Pool
	small := make([]byte, 10)
	p.Put(&small)
	huge := make([]byte, 8<<20)
	p.Put(&huge)
	if b := p.Get(10); cap(*b) != 256 {
		t.Errorf("Get(10) after putting a 10-byte buffer: cap %d, want 256", cap(*b))
	}
}

func BenchmarkPool_GetPut64KiB(b *testing.B) {
	var p grpcbuf.Pool
	for b.Loop() {
		p.Put(p.Get(65_600))
	}
}

// The codec round-trips a message of either protobuf API through pooled buffers, and
// refuses what is not a protobuf message.
func TestCodec_RoundTripBothAPIsAndRefusals(t *testing.T) {
	c := grpcbuf.Codec{Pool: &grpcbuf.Pool{}}
	for _, size := range []int{10, 5000} { // below and above gRPC's pooling threshold
		in := wrapperspb.Bytes(bytes.Repeat([]byte{7}, size))
		data, err := c.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		out := new(wrapperspb.BytesValue)
		if err := c.Unmarshal(data, out); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out.Value, in.Value) {
			t.Fatalf("size %d: round trip changed the message", size)
		}
		data.Free()
	}
	v1 := protoadapt.MessageV1Of(wrapperspb.String("v1"))
	data, err := c.Marshal(v1)
	if err != nil {
		t.Fatalf("a v1 message: %v", err)
	}
	var back wrapperspb.StringValue
	if err := c.Unmarshal(data, &back); err != nil || back.Value != "v1" {
		t.Fatalf("a v1 message round trip: %q, %v", back.Value, err)
	}
	if _, err := c.Marshal("not a message"); err == nil {
		t.Error("a string was marshaled")
	}
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer([]byte{1})}, new(int)); err == nil {
		t.Error("unmarshaled into an int")
	}
	if c.Name() != "proto" {
		t.Errorf("Name() = %q, want proto", c.Name())
	}
}
