package binding_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"go.uber.org/goleak"

	"github.com/meshnode/meshnode/internal/testkit"
	"github.com/meshnode/meshnode/session/connector"
	"github.com/meshnode/meshnode/test/fleet"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const wait = fleet.Wait

type bindReply struct {
	Actor             string `json:"actor"`
	Node              string `json:"node"`
	BindingGeneration uint64 `json:"bindingGeneration"`
}

func bind(t *testing.T, c *connector.Connector, id, kind string) (bindReply, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	var out bindReply
	err := c.Request(ctx, "bind", map[string]string{"actor": id, "kind": kind}, &out)
	return out, err
}

func mustBind(t *testing.T, c *connector.Connector, id, kind string) bindReply {
	t.Helper()
	r, err := bind(t, c, id, kind)
	if err != nil {
		t.Fatalf("bind %s: %v", id, err)
	}
	return r
}

func request(t *testing.T, c *connector.Connector, name string, v any, out any, opts ...connector.CallOption) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	return c.Request(ctx, name, v, out, opts...)
}

func remoteCode(err error) string {
	var re *connector.RemoteError
	if errors.As(err, &re) {
		return re.Code
	}
	return ""
}

// pushes collects the Send frames of one name a client receives.
func pushes(c *connector.Connector, name string) chan json.RawMessage {
	ch := make(chan json.RawMessage, 64)
	c.Handle(name, func(m connector.Message) { ch <- json.RawMessage(append([]byte(nil), m.Payload...)) })
	return ch
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testkit.Eventually(t, wait, what, cond)
}

func remoteMessage(err error) string {
	var re *connector.RemoteError
	if errors.As(err, &re) {
		return re.Message
	}
	return ""
}
