package cluster

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/meshnode/session/connector"
	"github.com/meshnode/meshnode/test/proc"
)

// bindRoomOn binds c to a room that placement puts on the process rid (trying room
// ids in turn) and returns its id.
func bindRoomOn(t *testing.T, ctx context.Context, c *connector.Connector, rid string) string {
	t.Helper()
	var bound struct{ Actor, Node string }
	for k := 0; k < 200; k++ {
		room := "room-" + strconv.Itoa(k)
		if err := c.Request(ctx, "bind", map[string]string{"actor": room}, &bound); err != nil {
			t.Fatal(err)
		}
		if bound.Node == rid {
			return room
		}
		var empty map[string]any
		if err := c.Request(ctx, "unbind", map[string]string{"actor": room}, &empty); err != nil {
			t.Fatal(err)
		}
	}
	t.Fatalf("no room placed on %s", rid)
	return ""
}

type served struct {
	Node   string
	Served int64
}

// Issue 30, item 1: three processes; a session on node-2 binds a room on node-0;
// node-2 is killed with SIGKILL (its sessions never send their tombstones); then
// node-0 is drained. Its membership retired the dead node's bindings, so the drain's
// move does not wait on a session owner that is gone: the room moves with its state,
// and a client of node-1 finds it there with its served count.
func TestThreeProcessesDrainAfterTheSessionOwnerWasKilled(t *testing.T) {
	procs := startFleet(t, 3, "test")
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	c := dial(t, procs[2].Endpoints["tcp"])
	room := bindRoomOn(t, ctx, c, "node-0")
	var out served
	for i := 0; i < 3; i++ {
		if err := c.Request(ctx, "room.echo", map[string]int{}, &out); err != nil {
			t.Fatal(err)
		}
	}
	procs[2].Kill()
	for _, p := range procs[:2] {
		proc.Eventually(t, p.ID+" marks node-2 failed", func() bool {
			m, ok := find(p.Members(), "node-2")
			return ok && m.State == "dead"
		})
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+procs[0].Admin+"/v1/drain", nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = res.Body.Close()
	if res.StatusCode/100 != 2 {
		t.Fatalf("POST /v1/drain: %s", res.Status)
	}
	select {
	case <-procs[0].Exited():
	case <-time.After(wait):
		t.Fatalf("node-0 did not finish its drain: %s", procs[0].Stderr())
	}
	if log := procs[0].Stderr(); strings.Contains(log, "could not move") || strings.Contains(log, "level=ERROR") {
		t.Fatalf("node-0's drain did not move everything: %s", log)
	}
	c1 := dial(t, procs[1].Endpoints["tcp"])
	var bound struct{ Node string }
	if err := c1.Request(ctx, "bind", map[string]string{"actor": room}, &bound); err != nil {
		t.Fatal(err)
	}
	if err := c1.Request(ctx, "room.echo", map[string]int{}, &out); err != nil {
		t.Fatal(err)
	}
	if out.Served != 4 || out.Node != "node-1" {
		t.Fatalf("room.echo after the drain %+v, want served 4 on node-1 (the state moved)", out)
	}
}
