package cluster

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/meshnode/meshnode/session/connector"
	"github.com/meshnode/meshnode/test/proc"
)

func dial(t *testing.T, endpoint string) *connector.Connector { return proc.Connect(t, endpoint) }

// Bind, relay, push and replacement across two meshnode processes, with the sample
// app's room Actor.
func TestTwoProcessesBindRelayPushReplace(t *testing.T) {
	procs := startFleet(t, 2, "test")
	streams := []string{procs[0].Endpoints["tcp"], procs[1].Endpoints["tcp"]}

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
	proc.Eventually(t, "replaced session closed", func() bool { return first.State() != connector.StateConnected })
	if err := second.Request(ctx, "room.echo", map[string]int{"after": 1}, &echo); err != nil || echo.Actor != room {
		t.Fatalf("new session relay: %+v %v", echo, err)
	}
}
