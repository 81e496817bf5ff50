package remote

import (
	"strings"
	"testing"

	"github.com/meshnode/meshnode/internal/protoactor/actor"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// capturingStream records the gRPC messages an endpoint writer sends.
type capturingStream struct {
	grpc.ClientStream
	sent []*RemoteMessage
}

func (s *capturingStream) Send(m *RemoteMessage) error { s.sent = append(s.sent, m); return nil }
func (s *capturingStream) Recv() (*RemoteMessage, error) {
	select {}
}

// meshnode patch 11: one mailbox run of the writer whose messages add up to more than
// MaxBatchBytes goes out as several gRPC messages, each within it (one message alone
// may be larger), in order and with nothing lost.
func TestEndpointWriterSplitsRunsAtMaxBatchBytes(t *testing.T) {
	stream := &capturingStream{}
	w := &endpointWriter{stream: stream}
	const n, size = 10, 1 << 20 // 10 MiB in one run
	target := actor.NewPID("peer:1", "target")
	var run []interface{}
	for i := 0; i < n; i++ {
		run = append(run, &remoteDeliver{target: target, message: actor.NewPID("x", strings.Repeat(string(rune('a'+i)), size))})
	}
	w.sendEnvelopes(run, nil)
	if len(stream.sent) < 3 {
		t.Fatalf("10 MiB went out in %d gRPC messages, want at least 3 of at most %d bytes", len(stream.sent), MaxBatchBytes)
	}
	next := 0
	for k, m := range stream.sent {
		b := m.GetMessageBatch()
		total := 0
		for _, e := range b.Envelopes {
			total += len(e.MessageData)
			var pid actor.PID
			if err := proto.Unmarshal(e.MessageData, &pid); err != nil {
				t.Fatal(err)
			}
			if want := strings.Repeat(string(rune('a'+next)), size); pid.Id != want {
				t.Fatalf("gRPC message %d holds message %q..., want the %d-th", k, pid.Id[:1], next)
			}
			if got := b.Targets[e.Target]; got.Id != "target" {
				t.Fatalf("gRPC message %d: target %v", k, got)
			}
			next++
		}
		if total > MaxBatchBytes {
			t.Fatalf("gRPC message %d carries %d bytes, over %d", k, total, MaxBatchBytes)
		}
	}
	if next != n {
		t.Fatalf("%d of %d messages went out", next, n)
	}
}
