// Package cluster tests meshnode fleets of real processes: it builds the binary, starts
// three processes joined by gossip, kills one with SIGKILL and restarts it.
package cluster

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/meshnode/meshnode/mesh"
	"github.com/meshnode/meshnode/mesh/meshpb"
	"github.com/meshnode/meshnode/mesh/wire"
)

const wait = 30 * time.Second

type member struct {
	RID        string `json:"rid"`
	Generation uint64 `json:"generation"`
	Address    string `json:"address"`
	State      string `json:"state"`
}

// proc is one meshnode process.
type proc struct {
	id                  string
	args                []string
	admin, mesh, remote string
	cmd                 *exec.Cmd
	exited              chan struct{}
	stderr              *bytes.Buffer
}

// lockedWriter serialises writes to the process's stderr buffer.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

func (p *proc) stderrText() string {
	lw, ok := p.cmd.Stderr.(*lockedWriter)
	if !ok {
		return ""
	}
	lw.mu.Lock()
	defer lw.mu.Unlock()
	s := p.stderr.String()
	if len(s) > 2000 {
		s = s[len(s)-2000:]
	}
	return s
}

// freePort returns a port that is free now, chosen below the kernel's ephemeral range:
// tests running in parallel packages bind port 0 and get ephemeral ports, so they can
// never take a port a process here was given (or gets back after a restart).
func freePort(t *testing.T) int {
	t.Helper()
	for range 1000 {
		port := 20000 + rand.IntN(12000)
		tcp, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		udp, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", port))
		_ = tcp.Close()
		if err != nil {
			continue
		}
		_ = udp.Close()
		return port
	}
	t.Fatal("no free port below the ephemeral range")
	return 0
}

func buildBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "meshnode")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/meshnode/meshnode/cmd/meshnode")
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("build meshnode: %v", err)
	}
	return bin
}

func (p *proc) start(t *testing.T, bin string) {
	t.Helper()
	p.cmd = exec.Command(bin, p.args...)
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.stderr = &bytes.Buffer{}
	p.cmd.Stderr = &lockedWriter{w: p.stderr}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.exited = make(chan struct{})
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		signalled := false
		for sc.Scan() {
			if !signalled && strings.HasPrefix(sc.Text(), "meshnode: ready") {
				close(ready)
				signalled = true
			}
		}
		_ = p.cmd.Wait()
		close(p.exited)
	}()
	select {
	case <-ready:
	case <-p.exited:
		t.Fatalf("%s exited before ready: %s", p.id, p.stderrText())
	case <-time.After(wait):
		t.Fatalf("%s not ready", p.id)
	}
}

func (p *proc) signal(sig syscall.Signal) {
	if p.cmd != nil && p.cmd.Process != nil {
		_ = p.cmd.Process.Signal(sig)
	}
}

func (p *proc) stop() {
	select {
	case <-p.exited:
		return
	default:
	}
	p.signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		p.signal(syscall.SIGKILL)
		<-p.exited
	}
}

func members(t *testing.T, admin string) []member {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/v1/members")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var ms []member
	if err := json.NewDecoder(resp.Body).Decode(&ms); err != nil {
		return nil
	}
	return ms
}

func find(ms []member, rid string) (member, bool) {
	for _, m := range ms {
		if m.RID == rid {
			return m, true
		}
	}
	return member{}, false
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting: %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

var staleDrops = regexp.MustCompile(`zlink_mesh_node_messages_dropped_total\{[^}]*reason="stale_target"[^}]*\} (\d+)`)

func staleCount(admin string) int {
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	m := staleDrops.FindSubmatch(b)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// Three processes join; one is killed with SIGKILL and the others mark it failed; it
// restarts under a new generation and rejoins; a record addressed to its old
// generation is rejected as stale.
func TestThreeProcessesKillRestartStaleRecord(t *testing.T) {
	bin := buildBinary(t)
	procs := make([]*proc, 3)
	for i := range procs {
		p := &proc{
			id:     fmt.Sprintf("node-%d", i),
			admin:  fmt.Sprintf("127.0.0.1:%d", freePort(t)),
			mesh:   fmt.Sprintf("127.0.0.1:%d", freePort(t)),
			remote: fmt.Sprintf("127.0.0.1:%d", freePort(t)),
		}
		p.args = []string{"--node-id", p.id, "--stream", "tcp://127.0.0.1:0", "--admin", p.admin,
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
	allAlive := func(admin string, n int) func() bool {
		return func() bool {
			ms := members(t, admin)
			alive := 0
			for _, m := range ms {
				if m.State == "alive" {
					alive++
				}
			}
			return alive == n
		}
	}
	for _, p := range procs {
		eventually(t, p.id+" sees three alive members", allAlive(p.admin, 3))
	}
	before, _ := find(members(t, procs[0].admin), "node-2")

	procs[2].signal(syscall.SIGKILL)
	<-procs[2].exited
	for _, p := range procs[:2] {
		eventually(t, p.id+" marks node-2 failed", func() bool {
			m, ok := find(members(t, p.admin), "node-2")
			return ok && m.State == "dead" && m.Generation == before.Generation
		})
	}

	procs[2].start(t, bin)
	var after member
	eventually(t, "node-0 sees node-2 alive under a new generation", func() bool {
		m, ok := find(members(t, procs[0].admin), "node-2")
		after = m
		return ok && m.State == "alive" && m.Generation > before.Generation
	})

	// An in-process node joins the fleet and plays a peer that still addresses node-2's
	// previous lifecycle.
	peer, err := mesh.Start(context.Background(), mesh.Config{Join: []string{procs[0].mesh}, Preset: mesh.PresetTest})
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Kill()
	eventually(t, "peer sees node-2's new lifecycle", func() bool {
		return peer.IsLive(mesh.NodeID{RID: "node-2", Generation: after.Generation})
	})
	frames, err := wire.Encode(&wire.Record{Body: &wire.BoundSessionReplaced{
		ActorAuthority: wire.ActorRouteFence{Actor: wire.ActorRef{ID: "a", Generation: 1}, TargetNodeRID: peer.ID().RID,
			TargetNodeGeneration: peer.ID().Generation, ExpectedAuthorityOwnerGeneration: 1, ExpectedOwnerLeaseGeneration: 1},
		RetiredSession: wire.SessionFence{OwnerNodeRID: "node-2", OwnerNodeGeneration: before.Generation, OwnerID: "s",
			OwnerLeaseGeneration: 1, SessionRID: "s", BindingGeneration: 1},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if n := staleCount(procs[2].admin); n != 0 {
		t.Fatalf("stale drops before the record: %d", n)
	}
	id := peer.ID()
	peer.SendEnvelope(procs[2].remote, &meshpb.Envelope{FromRid: id.RID, FromGeneration: id.Generation,
		ToRid: "node-2", ToGeneration: before.Generation, Frames: frames})
	eventually(t, "node-2 counts the record to its old generation as stale", func() bool { return staleCount(procs[2].admin) == 1 })
}
