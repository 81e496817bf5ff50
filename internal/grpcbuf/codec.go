package grpcbuf

import (
	"fmt"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
)

// Codec is gRPC's protobuf codec (google.golang.org/grpc/encoding/proto) with its
// buffers from Pool instead of gRPC's process-wide default pool, which the codec uses
// whatever pool a connection was given: a marshaled 64 KiB envelope took a 1 MiB
// buffer from the default pool, cleared. Set it on both ends of a connection
// (grpc.ForceCodecV2, grpc.ForceServerCodecV2); the bytes on the wire are the same.
type Codec struct{ Pool *Pool }

// Name is the content-subtype gRPC announces: the same as the codec this replaces.
func (Codec) Name() string { return "proto" }

// Marshal encodes v into one pooled buffer (a small message into a plain slice, as
// gRPC's codec does).
func (c Codec) Marshal(v any) (mem.BufferSlice, error) {
	m := messageOf(v)
	if m == nil {
		return nil, fmt.Errorf("grpcbuf: cannot marshal %T: not a protobuf message", v)
	}
	size := proto.Size(m)
	opts := proto.MarshalOptions{UseCachedSize: true} // Size just cached it
	if mem.IsBelowBufferPoolingThreshold(size) {
		b, err := opts.Marshal(m)
		if err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	buf := c.Pool.Get(size)
	if _, err := opts.MarshalAppend((*buf)[:0], m); err != nil {
		c.Pool.Put(buf)
		return nil, err
	}
	return mem.BufferSlice{mem.NewBuffer(buf, c.Pool)}, nil
}

// Unmarshal decodes data into v. proto.Unmarshal copies what it keeps, so the
// buffers go back to their pool when it returns.
func (c Codec) Unmarshal(data mem.BufferSlice, v any) error {
	m := messageOf(v)
	if m == nil {
		return fmt.Errorf("grpcbuf: cannot unmarshal into %T: not a protobuf message", v)
	}
	buf := data.MaterializeToBuffer(c.Pool)
	defer buf.Free()
	return proto.Unmarshal(buf.ReadOnlyData(), m)
}

// messageOf accepts both protobuf APIs, as gRPC's codec does.
func messageOf(v any) proto.Message {
	switch v := v.(type) {
	case protoadapt.MessageV1:
		return protoadapt.MessageV2Of(v)
	case protoadapt.MessageV2:
		return v
	}
	return nil
}
