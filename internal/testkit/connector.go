package testkit

import (
	"context"
	"testing"
	"time"

	"github.com/meshnode/meshnode/session/connector"
)

// DialConnector connects a Go connector to endpoint with heartbeats and reconnects off
// (a test sees every drop), failing the test when it cannot within timeout. The caller
// closes it.
func DialConnector(tb testing.TB, endpoint string, timeout time.Duration) *connector.Connector {
	tb.Helper()
	c, err := connector.New(endpoint, connector.Options{
		Heartbeat: connector.HeartbeatOptions{Disabled: true},
		Reconnect: connector.ReconnectPolicy{Disabled: true},
	})
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := c.Connect(ctx); err != nil {
		tb.Fatalf("connect %s: %v", endpoint, err)
	}
	return c
}
