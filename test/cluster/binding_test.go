package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/meshnode/meshnode/session/connector"
)

func dial(t *testing.T, endpoint string) *connector.Connector {
	t.Helper()
	c, err := connector.New(endpoint, connector.Options{
		Heartbeat: connector.HeartbeatOptions{Disabled: true},
		Reconnect: connector.ReconnectPolicy{Disabled: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := c.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Bind, relay, push and replacement across two meshnode processes, with the sample
// app's room Actor.
func TestTwoProcessesBindRelayPushReplace(t *testing.T) {
	bin := buildBinary(t)
	procs := make([]*proc, 2)
	streams := make([]string, 2)
	for i := range procs {
		streams[i] = fmt.Sprintf("tcp://127.0.0.1:%d", freePort(t))
		p := &proc{
			id:     fmt.Sprintf("node-%d", i),
			admin:  fmt.Sprintf("127.0.0.1:%d", freePort(t)),
			mesh:   fmt.Sprintf("127.0.0.1:%d", freePort(t)),
			remote: fmt.Sprintf("127.0.0.1:%d", freePort(t)),
		}
		p.args = []string{"--node-id", p.id, "--stream", streams[i], "--admin", p.admin,
			"--mesh", p.mesh, "--remote", p.remote, "--mesh-timing", "test"}
		if i > 0 {
			p.args = append(p.args, "--join", procs[0].mesh)
		}
		procs[i] = p
	}
	t.Cleanup(func() {
		for _, p := range procs {
			p.stop()
		}
	})
	for _, p := range procs {
		p.start(t, bin)
	}
	for _, p := range procs {
		eventually(t, p.id+" sees two members", func() bool {
			alive := 0
			for _, m := range members(t, p.admin) {
				if m.State == "alive" {
					alive++
				}
			}
			return alive == 2
		})
	}

	first := dial(t, streams[0])
	replaced := make(chan string, 1)
	first.Handle("room.replaced", func(m connector.Message) { replaced <- string(m.Payload) })
	said := make(chan string, 1)
	first.Handle("room.said", func(m connector.Message) { said <- string(m.Payload) })
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()

	// A room that placement puts on the other process.
	var room string
	var bound struct {
		Actor, Node       string
		BindingGeneration uint64
	}
	for k := 0; ; k++ {
		if k == 200 {
			t.Fatal("no room placed on node-1")
		}
		room = "room-" + strconv.Itoa(k)
		if err := first.Request(ctx, "bind", map[string]string{"actor": room}, &bound); err != nil {
			t.Fatal(err)
		}
		if bound.Node == "node-1" {
			break
		}
		var empty map[string]any
		if err := first.Request(ctx, "unbind", map[string]string{"actor": room}, &empty); err != nil {
			t.Fatal(err)
		}
	}
	var echo struct {
		Actor, Node string
		Payload     json.RawMessage
	}
	if err := first.Request(ctx, "room.echo", map[string]string{"q": "x"}, &echo); err != nil {
		t.Fatal(err)
	}
	if echo.Actor != room || echo.Node != "node-1" || string(echo.Payload) != `{"q":"x"}` {
		t.Fatalf("room.echo across processes: %+v", echo)
	}
	if err := first.Send(ctx, "room.say", map[string]int{"n": 7}); err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-said:
		if p != `{"n":7}` {
			t.Fatalf("room.said %s", p)
		}
	case <-time.After(wait):
		t.Fatal("no push across processes")
	}

	second := dial(t, streams[1])
	if err := second.Request(ctx, "bind", map[string]string{"actor": room}, &bound); err != nil {
		t.Fatalf("second bind: %v", err)
	}
	select {
	case p := <-replaced:
		if p != `{"actor":"`+room+`"}` {
			t.Fatalf("room.replaced %s", p)
		}
	case <-time.After(wait):
		t.Fatal("first session not told it was replaced")
	}
	eventually(t, "replaced session closed", func() bool { return first.State() != connector.StateConnected })
	if err := second.Request(ctx, "room.echo", map[string]int{"after": 1}, &echo); err != nil || echo.Actor != room {
		t.Fatalf("new session relay: %+v %v", echo, err)
	}
}
