package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/internal/testkit/pgtest"
	"github.com/meshnode/meshnode/session/connector"
	"github.com/meshnode/meshnode/test/proc"
)

// Actor state that survives a crash (issue 27, docs/persistence.md), on real meshnode
// processes: the sample room saves its served count before it answers each room.echo.

// startStoreFleet starts n processes with extra flags each.
func startStoreFleet(t *testing.T, n int, args ...string) []*proc.Node {
	t.Helper()
	nodes := make([]*proc.Node, n)
	for i := range nodes {
		cfg := proc.Config{
			ID:      fmt.Sprintf("node-%d", i),
			Streams: []string{"tcp://127.0.0.1:0"},
			Args:    args,
		}
		if i > 0 {
			cfg.Join = []string{nodes[0].Mesh}
		}
		nodes[i] = proc.Start(t, cfg)
	}
	for _, p := range nodes {
		proc.Eventually(t, p.ID+" sees every member alive", func() bool { return p.Alive() == n })
	}
	return nodes
}

type roomEcho struct {
	Actor  string `json:"actor"`
	Node   string `json:"node"`
	Served int64  `json:"served"`
}

func echoRoom(ctx context.Context, c *connector.Connector, opts ...connector.CallOption) (roomEcho, error) {
	var out roomEcho
	err := c.Request(ctx, "room.echo", map[string]int{"n": 1}, &out, opts...)
	return out, err
}

// Items 3 and 5: a single node with the default embedded store (a --data-dir of the
// test's), killed with SIGKILL and started again on the same data dir: every room it
// saved comes back with its served count, and the next room.echo answers n + 1.
func TestPersistence_RestartWithEmbeddedStore(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "solo")
	cfg := proc.Config{ID: "solo", Streams: []string{"tcp://127.0.0.1:0"}, Args: []string{"--data-dir", dir}}
	p := proc.Start(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	rooms := map[string]int64{"lobby": 5, "hall": 2}
	c := dial(t, p.Endpoints["tcp"])
	for room, n := range rooms {
		var bound map[string]any
		if err := c.Request(ctx, "bind", map[string]string{"actor": room}, &bound); err != nil {
			t.Fatal(err)
		}
		for i := int64(1); i <= n; i++ {
			out, err := echoRoom(ctx, c, connector.WithMetadata("actor", room))
			if err != nil || out.Served != i {
				t.Fatalf("%s echo %d: %+v %v", room, i, out, err)
			}
		}
	}
	p.Kill()
	again := proc.Start(t, cfg)
	c2 := dial(t, again.Endpoints["tcp"])
	for room, n := range rooms {
		var bound map[string]any
		if err := c2.Request(ctx, "bind", map[string]string{"actor": room}, &bound); err != nil {
			t.Fatal(err)
		}
		out, err := echoRoom(ctx, c2, connector.WithMetadata("actor", room))
		if err != nil || out.Served != n+1 {
			t.Fatalf("%s after the restart: %+v %v, want served %d", room, out, err, n+1)
		}
	}
}

// Items 4, 5 and 8: three processes sharing a PostgreSQL server (--store); the node
// hosting a room is killed with SIGKILL; after a rebind the room answers from a
// survivor with served n + 1.
func TestPersistence_KillNineWithPostgresActorBackOnSurvivor(t *testing.T) {
	srv := pgtest.Start(t, pgtest.Options{})
	procs := startStoreFleet(t, 3, "--store", srv.URL(""))
	ctx, cancel := context.WithTimeout(context.Background(), 2*wait)
	defer cancel()
	c := dial(t, procs[0].Endpoints["tcp"])
	room := bindRoomOn(t, ctx, c, "node-2")
	const n = 4
	for i := int64(1); i <= n; i++ {
		out, err := echoRoom(ctx, c)
		if err != nil || out.Served != i || out.Node != "node-2" {
			t.Fatalf("echo %d: %+v %v", i, out, err)
		}
	}
	procs[2].Kill()
	// The survivors activate the room anew once they have declared node-2 failed and
	// the failover margin has passed: bind again until that happens.
	var out roomEcho
	proc.Eventually(t, room+" bound again on a survivor", func() bool {
		var bound struct{ Node string }
		return c.Request(ctx, "bind", map[string]string{"actor": room}, &bound) == nil && bound.Node != "node-2"
	})
	out, err := echoRoom(ctx, c)
	if err != nil || out.Served != n+1 || out.Node == "node-2" {
		t.Fatalf("after kill -9 of node-2: %+v %v, want served %d on a survivor", out, err, n+1)
	}
	if got := srv.SQL(t, "SELECT count(*) FROM meshnode_actor_state WHERE kind = 'room' AND id = '"+room+"' AND data IS NOT NULL"); got != "1" {
		t.Fatalf("the room's row: %s", got)
	}
}

// Bad input at start-up: a store URL that does not parse, a server that refuses the
// credentials, and a data directory another node holds each fail the start with an
// error naming --store (or --data-dir); nothing is listening afterwards.
func TestPersistence_BadStoreFailsTheStartNamingTheFlag(t *testing.T) {
	srv := pgtest.Start(t, pgtest.Options{})
	bin := proc.Binary(t)
	held := filepath.Join(t.TempDir(), "held")
	proc.Start(t, proc.Config{ID: "holder", Args: []string{"--data-dir", held}})
	wrong := strings.Replace(srv.URL(""), srv.Password, "wrong-password", 1)
	cases := []struct {
		args []string
		want []string
	}{
		{[]string{"--store", "redis://127.0.0.1:1"}, []string{"flag --store", "bad store URL"}},
		{[]string{"--store", "postgres://u:hunter2@127.0.0.1:notaport/db"}, []string{"flag --store", "bad store URL"}},
		{[]string{"--store", wrong}, []string{"flag --store", "access denied"}},
		{[]string{"--data-dir", held}, []string{"flag --data-dir", "locked by another process"}},
	}
	for _, tc := range cases {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		args := append([]string{"--mesh", "127.0.0.1:0", "--remote", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--stream", "tcp://127.0.0.1:0",
			"--mesh-timing", "test", "--node-id", "bad"}, tc.args...)
		cmd := exec.CommandContext(ctx, bin, args...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		cancel()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 {
			t.Errorf("%v: %v, want exit status 2; stderr: %s", tc.args, err, stderr.String())
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(stderr.String(), w) {
				t.Errorf("%v: stderr %q does not say %q", tc.args, stderr.String(), w)
			}
		}
		for _, secret := range []string{"hunter2", "wrong-password", srv.Password} {
			if strings.Contains(stderr.String(), secret) {
				t.Errorf("%v: stderr shows a password: %s", tc.args, stderr.String())
			}
		}
	}
}
