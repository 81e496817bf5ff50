package topic_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/meshnode/meshnode/internal/testkit"
	"github.com/meshnode/meshnode/session/connector"
	"github.com/meshnode/meshnode/session/wire"
	"github.com/meshnode/meshnode/test/fleet"
	"github.com/meshnode/meshnode/topic"
)

const wait = fleet.Wait

// received is one topic.message a client got, with the metadata the hub adds.
type received struct {
	Topic     string          `json:"topic"`
	Payload   json.RawMessage `json:"payload"`
	Seq       uint64          `json:"seq"`
	MetaSeq   uint64
	Publisher string
}

// listen collects the topic.message Sends c receives (room.said too, as name "room.said").
func listen(c *connector.Connector, names ...string) chan received {
	ch := make(chan received, 4096)
	if len(names) == 0 {
		names = []string{"topic.message"}
	}
	for _, name := range names {
		c.Handle(name, func(m connector.Message) {
			var r received
			_ = json.Unmarshal(m.Payload, &r)
			if r.Payload == nil {
				r.Payload = append(json.RawMessage(nil), m.Payload...)
			}
			if v, ok := m.Metadata.Get(topic.MetaSequence); ok {
				r.MetaSeq, _ = strconv.ParseUint(v, 10, 64)
			}
			r.Publisher, _ = m.Metadata.Get(topic.MetaPublisher)
			if r.Topic == "" {
				r.Topic, _ = m.Metadata.Get(topic.MetaTopic)
			}
			ch <- r
		})
	}
	return ch
}

func request(t *testing.T, c *connector.Connector, name string, v any) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	var out map[string]any
	return c.Request(ctx, name, v, &out)
}

func mustRequest(t *testing.T, c *connector.Connector, name string, v any) {
	t.Helper()
	if err := request(t, c, name, v); err != nil {
		t.Fatalf("%s %v: %v", name, v, err)
	}
}

// answersEmpty sends the sample's Request name with v in JSON and checks that it
// succeeds with the reply the sample documents for its topic Requests (subscribe,
// unsubscribe, publish, room.follow, room.unfollow): exactly {} in JSON.
func answersEmpty(t *testing.T, c *connector.Connector, name string, v any) {
	t.Helper()
	payload, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	r, err := c.RequestRaw(ctx, name, wire.CodecJSON, payload)
	if err != nil {
		t.Fatalf("%s %s: %v", name, payload, err)
	}
	if r.Codec != wire.CodecJSON || string(r.Payload) != "{}" {
		t.Fatalf("%s %s answered codec %d %q, want codec %d (JSON) {}", name, payload, r.Codec, r.Payload, wire.CodecJSON)
	}
}

func subscribe(t *testing.T, c *connector.Connector, topic string) {
	t.Helper()
	answersEmpty(t, c, "subscribe", map[string]string{"topic": topic})
}

func publish(t *testing.T, c *connector.Connector, topic string, payload any) {
	t.Helper()
	answersEmpty(t, c, "publish", map[string]any{"topic": topic, "payload": payload})
}

// next returns the next message on ch, failing the test after wait.
func next(t *testing.T, ch chan received, what string) received {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(wait):
		t.Fatalf("%s: nothing arrived within %v", what, wait)
	}
	return received{}
}

func remoteCode(err error) string {
	var re *connector.RemoteError
	if errors.As(err, &re) {
		return re.Code
	}
	return ""
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testkit.Eventually(t, wait, what, cond)
}

func itoa(n int) string { return strconv.Itoa(n) }
