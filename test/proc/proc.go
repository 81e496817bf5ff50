package proc

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/meshnode/meshnode/internal/testkit"
	"github.com/meshnode/meshnode/internal/testkit/freeport"
	"github.com/meshnode/meshnode/mesh"
	"github.com/meshnode/meshnode/session/connector"
)

// Wait bounds every wait of the kit.
const Wait = 30 * time.Second

var (
	buildMu  sync.Mutex
	buildDir string
	builds   = map[string]string{} // version stamped ("" none) -> the binary's path
)

// Binary builds cmd/meshnode once for the whole test binary and returns its path.
func Binary(t testing.TB) string {
	t.Helper()
	return BinaryVersion(t, "")
}

// BinaryVersion builds cmd/meshnode with version stamped as its module version
// (-X main.version; "" stamps none), once per version for the whole test binary, and
// returns its path: a fleet of several versions.
func BinaryVersion(t testing.TB, version string) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if p, ok := builds[version]; ok {
		return p
	}
	if buildDir == "" {
		dir, err := os.MkdirTemp("", "meshnode-bin-")
		if err != nil {
			t.Fatal(err)
		}
		buildDir = dir
	}
	name := "meshnode"
	args := []string{"build"}
	if version != "" {
		name += "-" + version
		args = append(args, "-ldflags", "-X main.version="+version)
	}
	path := filepath.Join(buildDir, name)
	cmd := exec.Command("go", append(args, "-o", path, "github.com/meshnode/meshnode/cmd/meshnode")...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("build meshnode %s: %v: %s", version, err, out.String())
	}
	builds[version] = path
	return path
}

// Cleanup removes the built binary; call it from TestMain after the tests ran.
func Cleanup() {
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
}

// FreePort returns a port free now, chosen below the kernel's ephemeral range (see
// freeport.Below).
func FreePort(t testing.TB) int {
	t.Helper()
	return freeport.Below(t)
}

// Config describes one process.
type Config struct {
	// ID is the node RID (--node-id).
	ID string
	// Mesh, Remote and Admin are host:port; empty means 127.0.0.1:0 (the OS chooses,
	// the kit reads the real one from the process's output).
	Mesh, Remote, Admin string
	// Streams are --stream endpoints (default tcp and ws on port 0).
	Streams []string
	// Join lists mesh addresses to join.
	Join []string
	// Timing is --mesh-timing (default test).
	Timing string
	// Args are extra flags.
	Args []string
	// OpenFiles, when positive, runs the process with that open-files limit.
	OpenFiles int
	// Version, when set, runs a binary with that module version stamped
	// (BinaryVersion).
	Version string
}

// Node is one running meshnode process.
type Node struct {
	Config
	// Endpoints are the STREAM endpoints the process printed, by scheme.
	Endpoints map[string]string
	cmd       *exec.Cmd
	exited    chan struct{}
	ready     chan struct{} // closed when the process prints "meshnode: ready"
	admin     chan struct{} // closed when it prints its admin address
	stdout    *testkit.LockedBuffer
	stderr    *testkit.LockedBuffer
}

var (
	reNode   = regexp.MustCompile(`^meshnode: node \S+ generation \d+, mesh (\S+), remote (\S+)$`)
	reAdmin  = regexp.MustCompile(`^meshnode: admin http://(\S+) `)
	reStream = regexp.MustCompile(`^meshnode: stream (\w+)://(\S+)$`)
)

// Start starts a process and waits until it is ready; it is stopped (SIGTERM, then
// SIGKILL) when the test ends.
func Start(t testing.TB, cfg Config) *Node {
	t.Helper()
	n := Launch(t, cfg)
	n.WaitReady(t)
	return n
}

// Launch starts a process without waiting for it to be ready (WaitReady, WaitAdmin,
// Exited wait for what a test needs); it is stopped (SIGTERM, then SIGKILL) when the
// test ends. The process gets the test's environment without its MESHNODE_*
// variables (the suites' own switches, which the binary would refuse as unknown):
// its configuration is its flags.
func Launch(t testing.TB, cfg Config) *Node {
	t.Helper()
	bin := BinaryVersion(t, cfg.Version)
	if cfg.Mesh == "" {
		cfg.Mesh = "127.0.0.1:0"
	}
	if cfg.Remote == "" {
		cfg.Remote = "127.0.0.1:0"
	}
	if cfg.Admin == "" {
		cfg.Admin = "127.0.0.1:0"
	}
	if cfg.Streams == nil {
		cfg.Streams = []string{"tcp://127.0.0.1:0", "ws://127.0.0.1:0/"}
	}
	if cfg.Timing == "" {
		cfg.Timing = "test"
	}
	args := []string{"--mesh", cfg.Mesh, "--remote", cfg.Remote, "--admin", cfg.Admin, "--mesh-timing", cfg.Timing}
	if cfg.ID != "" {
		args = append(args, "--node-id", cfg.ID)
	}
	for _, s := range cfg.Streams {
		args = append(args, "--stream", s)
	}
	for _, j := range cfg.Join {
		args = append(args, "--join", j)
	}
	args = append(args, cfg.Args...)
	if !slices.Contains(args, "--data-dir") && !slices.Contains(args, "--store") {
		// The embedded store of a process goes to a directory of the test's, never
		// under the package's ./meshnode-data.
		args = append(args, "--data-dir", t.TempDir())
	}
	n := &Node{Config: cfg, Endpoints: map[string]string{}, exited: make(chan struct{}), ready: make(chan struct{}),
		admin: make(chan struct{}), stdout: &testkit.LockedBuffer{}, stderr: &testkit.LockedBuffer{}}
	if cfg.OpenFiles > 0 {
		quoted := make([]string, len(args))
		for i, a := range args {
			quoted[i] = "'" + a + "'"
		}
		n.cmd = exec.Command("sh", "-c", fmt.Sprintf("ulimit -n %d && exec '%s' %s", cfg.OpenFiles, bin, strings.Join(quoted, " ")))
	} else {
		n.cmd = exec.Command(bin, args...)
	}
	n.cmd.Env = Environ()
	out, err := n.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	n.cmd.Stderr = n.stderr
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Stop)
	go func() {
		sc := bufio.NewScanner(out)
		var ready, admin bool
		for sc.Scan() {
			line := sc.Text()
			_, _ = n.stdout.Write([]byte(line + "\n"))
			if m := reNode.FindStringSubmatch(line); m != nil {
				n.Mesh, n.Remote = m[1], m[2]
			}
			if m := reAdmin.FindStringSubmatch(line); m != nil {
				n.Config.Admin = m[1]
			}
			if m := reStream.FindStringSubmatch(line); m != nil {
				n.Endpoints[m[1]] = m[1] + "://" + m[2]
			}
			if !admin && reAdmin.MatchString(line) {
				close(n.admin)
				admin = true
			}
			if !ready && strings.HasPrefix(line, "meshnode: ready") {
				close(n.ready)
				ready = true
			}
		}
		_ = n.cmd.Wait()
		close(n.exited)
	}()
	return n
}

// Environ is the test's environment without MESHNODE_* variables: what the kit's
// processes get.
func Environ() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "MESHNODE_") {
			env = append(env, kv)
		}
	}
	return env
}

// WaitReady waits until the process printed "meshnode: ready", failing the test when
// it exits first or is not ready within Wait.
func (n *Node) WaitReady(t testing.TB) {
	t.Helper()
	n.waitFor(t, n.ready, "ready")
}

// WaitAdmin waits until the process printed its admin address (Admin is then the
// real one), failing the test when it exits first or does not within Wait.
func (n *Node) WaitAdmin(t testing.TB) {
	t.Helper()
	n.waitFor(t, n.admin, "serving its admin address")
}

func (n *Node) waitFor(t testing.TB, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-n.exited:
		t.Fatalf("meshnode %s exited before it was %s: %s", n.ID, what, n.stderr.Tail(2000))
	case <-time.After(Wait):
		t.Fatalf("meshnode %s not %s after %v: %s", n.ID, what, Wait, n.stderr.Tail(2000))
	}
	// What the output reader filled in before it closed ch is visible from here.
}

// Ready reports whether the process has printed "meshnode: ready".
func (n *Node) Ready() bool {
	select {
	case <-n.ready:
		return true
	default:
		return false
	}
}

// Stdout returns what the process printed on its standard output so far.
func (n *Node) Stdout() string { return n.stdout.String() }

// ExitCode waits until the process has exited (at most Wait, failing the test) and
// returns its exit code.
func (n *Node) ExitCode(t testing.TB) int {
	t.Helper()
	select {
	case <-n.exited:
	case <-time.After(Wait):
		t.Fatalf("meshnode %s still runs after %v: %s", n.ID, Wait, n.stderr.Tail(2000))
	}
	return n.cmd.ProcessState.ExitCode()
}

// Stderr returns the end of the process's log.
func (n *Node) Stderr() string { return n.stderr.Tail(4000) }

// Exited is closed when the process has exited.
func (n *Node) Exited() <-chan struct{} { return n.exited }

// PID returns the process id (of meshnode itself, also when it runs under a shell
// that set its limits: the shell execs it).
func (n *Node) PID() int { return n.cmd.Process.Pid }

// Signal sends sig to the process.
func (n *Node) Signal(sig syscall.Signal) {
	if n.cmd != nil && n.cmd.Process != nil {
		_ = n.cmd.Process.Signal(sig)
	}
}

// Stop drains and stops the process (SIGTERM), or kills it if it does not stop within
// 15 s. A stopped (SIGSTOP) process is continued first.
func (n *Node) Stop() {
	select {
	case <-n.exited:
		return
	default:
	}
	n.Signal(syscall.SIGCONT)
	n.Signal(syscall.SIGTERM)
	select {
	case <-n.exited:
	case <-time.After(15 * time.Second):
		n.Signal(syscall.SIGKILL)
		<-n.exited
	}
}

// Kill kills the process (SIGKILL) and waits until it is gone.
func (n *Node) Kill() {
	n.Signal(syscall.SIGKILL)
	<-n.exited
}

// Member is one row of /v1/members.
type Member struct {
	RID        string `json:"rid"`
	Generation uint64 `json:"generation,string"`
	Address    string `json:"address"`
	State      string `json:"state"`
	// Versions is what the member announces (nil: nothing, an older build).
	Versions *mesh.Versions `json:"versions"`
}

// Members returns the process's view of the mesh (nil when the admin endpoint does not
// answer).
func (n *Node) Members() []Member {
	var ms []Member
	if err := n.getJSON("/v1/members", &ms); err != nil {
		return nil
	}
	return ms
}

// Alive counts the members the process sees alive.
func (n *Node) Alive() int {
	alive := 0
	for _, m := range n.Members() {
		if m.State == "alive" {
			alive++
		}
	}
	return alive
}

// Actors returns how many Actors the process hosts (-1 when it does not answer).
func (n *Node) Actors() int {
	var as []json.RawMessage
	if err := n.getJSON("/v1/actors", &as); err != nil {
		return -1
	}
	return len(as)
}

var adminClient = &http.Client{Timeout: 5 * time.Second}

func (n *Node) getJSON(path string, v any) error {
	resp, err := adminClient.Get("http://" + n.Admin + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", path, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// Metrics returns the process's /metrics text.
func (n *Node) Metrics() (string, error) {
	resp, err := adminClient.Get("http://" + n.Admin + "/metrics")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("/metrics: %s", resp.Status)
	}
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// Metric returns the sum of the samples of the Prometheus metric name whose labels
// include every label given as "key=value" (-1 when /metrics does not answer).
func (n *Node) Metric(name string, labels ...string) float64 {
	text, err := n.Metrics()
	if err != nil {
		return -1
	}
	return Sum(text, name, labels...)
}

// Sum adds the samples of metric name in a Prometheus text exposition whose labels
// include every label given as "key=value".
func Sum(text, name string, labels ...string) float64 {
	total := 0.0
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, name) {
			continue
		}
		rest := line[len(name):]
		var lbls string
		switch {
		case strings.HasPrefix(rest, "{"):
			end := strings.Index(rest, "}")
			if end < 0 {
				continue
			}
			lbls, rest = rest[1:end], rest[end+1:]
		case strings.HasPrefix(rest, " "):
		default:
			continue // a longer metric name
		}
		ok := true
		for _, l := range labels {
			k, v, _ := strings.Cut(l, "=")
			if !strings.Contains(","+lbls+",", ","+k+`="`+v+`",`) {
				ok = false
				break
			}
		}
		if !ok {
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
		if err == nil {
			total += f
		}
	}
	return total
}

// RSS returns the process's resident set size in bytes. A figure it cannot read fails
// the test (t.Errorf, so that a goroutine sampling it may call it too) and is -1: a
// bound checked against a zero read would pass whatever the process used.
func (n *Node) RSS(t testing.TB) int64 {
	t.Helper()
	v, err := n.readRSS()
	if err != nil {
		t.Errorf("meshnode %s: RSS: %v", n.ID, err)
		return -1
	}
	return v
}

func (n *Node) readRSS() (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", n.PID()))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "VmRSS:") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 3 || f[2] != "kB" {
			return 0, fmt.Errorf("unexpected VmRSS line %q", line)
		}
		kb, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("VmRSS line %q: %w", line, err)
		}
		return kb << 10, nil
	}
	return 0, fmt.Errorf("no VmRSS line in /proc/%d/status", n.PID())
}

// HeapInUse returns the Go heap in use of the process (go_memstats_heap_inuse_bytes
// from its metrics). A figure it cannot read fails the test (t.Errorf, as RSS) and is
// -1.
func (n *Node) HeapInUse(t testing.TB) int64 {
	t.Helper()
	const name = "go_memstats_heap_inuse_bytes"
	text, err := n.Metrics()
	if err == nil && !strings.Contains(text, "\n"+name+" ") {
		err = fmt.Errorf("%s not exported", name)
	}
	if err != nil {
		t.Errorf("meshnode %s: heap in use: %v", n.ID, err)
		return -1
	}
	return int64(Sum(text, name))
}

// Eventually polls cond until it holds, failing the test after Wait.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testkit.Eventually(t, Wait, what, cond)
}

// Connect opens a Go connector to endpoint (no heartbeat, no reconnect: a test sees
// every drop) and closes it when the test ends.
func Connect(t testing.TB, endpoint string) *connector.Connector {
	t.Helper()
	c := testkit.DialConnector(t, endpoint, Wait)
	t.Cleanup(func() { _ = c.Close() })
	return c
}
