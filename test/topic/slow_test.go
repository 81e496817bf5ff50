package topic_test

import (
	"strings"
	"testing"
	"time"

	"github.com/meshnode/meshnode/internal/testkit"
	"github.com/meshnode/meshnode/session/wire"
	"github.com/meshnode/meshnode/test/fleet"
	"github.com/meshnode/meshnode/topic"
)

// Issue 26, items 4 and 8: a subscriber that never reads does not slow the others or
// the publisher: once its socket and its outbound queue are full it is dropped from
// its topics (counted), and what it reads later ends with a topic.dropped Send saying
// so. The other subscribers get every message, in order.
func TestTopics_SubscriberThatNeverReadsIsDroppedWithoutSlowingOthers(t *testing.T) {
	f := fleet.Start(t, 2, fleet.Options{})
	raw, err := testkit.Dial(strings.TrimPrefix(f.Node(1).Endpoints()[0], "tcp://"))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	sub := testkit.Encode(wire.Header{Kind: wire.KindRequest, Codec: wire.CodecJSON, RequestSeq: 1, Name: "subscribe"}, []byte(`{"topic":"firehose"}`))
	if err := raw.WriteAll(sub, wait); err != nil {
		t.Fatal(err)
	}
	if fr, err := raw.ReadFrame(wait); err != nil || fr.Header.Kind != wire.KindResponse {
		t.Fatalf("subscribe of the raw client: %+v %v", fr.Header, err)
	}
	var readers []chan received
	for i := 0; i < 2; i++ {
		c := f.Connect(t, i)
		readers = append(readers, listen(c))
		subscribe(t, c, "firehose")
	}
	pub := f.Connect(t, 0)
	// 60 KB messages: the client's socket buffers and then its 1 MiB queue fill within
	// a few hundred. The publishes go on in the background; the client that does not
	// read starts reading once it was dropped (a write blocked on its full socket for
	// longer than the session's SendTimeout would close it instead).
	big := strings.Repeat("x", 60_000)
	const messages = 400
	start := time.Now()
	published := make(chan error, 1)
	go func() {
		for n := 1; n <= messages; n++ {
			if err := request(t, pub, "publish", map[string]any{"topic": "firehose", "payload": big}); err != nil {
				published <- err
				return
			}
		}
		published <- nil
	}()
	eventually(t, "the raw client was dropped", func() bool { return f.Node(1).Topics().Stats().DroppedSlow == 1 })
	// What the raw client reads: messages (fewer than were published), then the notice.
	got := 0
	for {
		fr, err := raw.ReadFrame(wait)
		if err != nil {
			t.Fatalf("after %d messages: %v", got, err)
		}
		if fr.Header.Name == topic.DroppedName {
			if want := `{"topics":["firehose"],"reason":"slow consumer"}`; string(fr.Payload) != want {
				t.Fatalf("%s payload %s, want %s", topic.DroppedName, fr.Payload, want)
			}
			break
		}
		got++
	}
	if err := <-published; err != nil {
		t.Fatal(err)
	}
	publishing := time.Since(start)
	for k, ch := range readers {
		for n := 1; n <= messages; n++ {
			if r := next(t, ch, "a reader's message"); r.Seq != uint64(n) {
				t.Fatalf("reader %d, message %d: seq %d", k, n, r.Seq)
			}
		}
	}
	if p := f.Node(1).Topics().Presence("firehose"); p.Subscribers != 2 {
		t.Fatalf("presence after the drop: %+v", p)
	}
	if got == 0 || got >= messages {
		t.Fatalf("the dropped client read %d of %d messages", got, messages)
	}
	t.Logf("%d publishes of 60 KB in %v; the client that did not read got %d before it was dropped", messages, publishing, got)
}
