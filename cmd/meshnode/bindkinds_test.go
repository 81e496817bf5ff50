package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/meshnode/internal/testkit"
	"github.com/meshnode/meshnode/session/connector"
)

// A client of the sample app binds rooms, never the runtime's own Actors (the sessions
// directory) nor the services' session workers, which SessionManagement creates,
// authorises and bounds: such a bind is refused invalid_operation, naming the Actor and
// the kind, and activates nothing.
func TestBinarySampleBindRefusesSystemAndWorkerKinds(t *testing.T) {
	a, stop := startBinary(t, "--stream", "tcp://127.0.0.1:0", "--admin", "127.0.0.1:0", "--mesh", "127.0.0.1:0", "--remote", "127.0.0.1:0")
	defer func() { _ = stop() }()
	c := testkit.DialConnector(t, a["tcp"], 10*time.Second)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, tc := range []struct{ actor, kind string }{{"sneaky", "worker"}, {"directory", "meshnode.sessions"}} {
		err := c.Request(ctx, "bind", map[string]string{"actor": tc.actor, "kind": tc.kind}, nil)
		var re *connector.RemoteError
		if !errors.As(err, &re) || re.Code != "invalid_operation" || !strings.Contains(re.Message, tc.actor) || !strings.Contains(re.Message, tc.kind) {
			t.Errorf("bind %s of kind %s: %v, want invalid_operation naming both", tc.actor, tc.kind, err)
		}
	}
	if code, body := httpGet(t, "http://"+a["admin"]+"/v1/actors?system=true"); code != 200 || strings.Contains(body, "sneaky") {
		t.Errorf("/v1/actors?system=true after the refused binds: %d %s", code, body)
	}
	// A room binds as before.
	if err := c.Request(ctx, "bind", map[string]string{"actor": "lobby"}, nil); err != nil {
		t.Fatal(err)
	}
}
