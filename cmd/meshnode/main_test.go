package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/coder/websocket"
	"github.com/meshnode/meshnode/internal/testkit"
	"github.com/meshnode/meshnode/session/wire"
)

func TestMain(m *testing.M) {
	// A node started by a test keeps its embedded store in a directory of the test's
	// (startBinary gives each node its own), never under ./meshnode-data in the tree.
	dir, err := os.MkdirTemp("", "meshnode-cmd-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	_ = os.Setenv("MESHNODE_DATA_DIR", dir)
	code := m.Run()
	_ = os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// lineWriter hands each written line to a channel, so the test waits on output.
type lineWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	lines chan string
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	for {
		line, err := w.buf.ReadString('\n')
		if err != nil {
			w.buf.WriteString(line)
			return len(p), nil
		}
		w.lines <- strings.TrimSpace(line)
	}
}

func startBinary(t *testing.T, args ...string) (addrs map[string]string, stop func() error) {
	t.Helper()
	return startBinaryLogging(t, io.Discard, args...)
}

// startBinaryLogging is startBinary with the node's log written to stderr.
func startBinaryLogging(t *testing.T, stderr io.Writer, args ...string) (addrs map[string]string, stop func() error) {
	t.Helper()
	// A test that unset MESHNODE_DATA_DIR (and moved to a directory of its own) wants
	// the default data dir.
	if _, set := os.LookupEnv("MESHNODE_DATA_DIR"); set && !slices.Contains(args, "--data-dir") && !slices.Contains(args, "--store") {
		args = append(args, "--data-dir", t.TempDir())
	}
	ctx, cancel := context.WithCancel(context.Background())
	out := &lineWriter{lines: make(chan string, 64)}
	done := make(chan error, 1)
	go func() { done <- run(ctx, args, out, stderr) }()
	addrs = map[string]string{}
	deadline := time.After(10 * time.Second)
	for {
		select {
		case line := <-out.lines:
			switch {
			case strings.HasPrefix(line, "meshnode: traces: "):
				addrs["traces"] = strings.TrimPrefix(line, "meshnode: traces: ")
			case strings.HasPrefix(line, "meshnode: admin http://"):
				addrs["admin"] = strings.Fields(strings.TrimPrefix(line, "meshnode: admin http://"))[0]
			case strings.HasPrefix(line, "meshnode: node "):
				// meshnode: node RID generation G, mesh ADDR, remote ADDR
				f := strings.Fields(line)
				addrs["rid"] = f[2]
				addrs["generation"] = strings.TrimSuffix(f[4], ",")
				addrs["mesh"] = strings.TrimSuffix(f[6], ",")
			case strings.HasPrefix(line, "meshnode: data dir "):
				addrs["data-dir"] = strings.TrimPrefix(line, "meshnode: data dir ")
			case strings.HasPrefix(line, "meshnode: store "):
				addrs["store"] = strings.TrimPrefix(line, "meshnode: store ")
			case strings.HasPrefix(line, "meshnode: stream "):
				ep := strings.TrimPrefix(line, "meshnode: stream ")
				addrs[ep[:strings.Index(ep, "://")]] = ep
			case strings.HasPrefix(line, "meshnode: ready"):
				return addrs, func() error { cancel(); return <-done }
			}
		case err := <-done:
			cancel()
			t.Fatalf("meshnode exited early: %v", err)
		case <-deadline:
			cancel()
			t.Fatal("meshnode did not print ready")
		}
	}
}

func readFrame(t *testing.T, br *bufio.Reader) (wire.Header, []byte) {
	f := testkit.MustReadFrame(t, br)
	return f.Header, f.Payload
}

func frame(t *testing.T, h wire.Header, payload string) []byte {
	t.Helper()
	b, err := wire.AppendFrame(nil, &h, []byte(payload))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The binary serves the sample app: echo request, echo send, fail; the admin address
// answers health, readiness and metrics; cancelling (SIGINT) drains the session with
// session-closing ServerDrain. With no --data-dir or --store it keeps its state in the
// embedded store under ./meshnode-data/<node id> and says so at start-up.
func TestBinaryServesSampleAppAndDrains(t *testing.T) {
	t.Chdir(t.TempDir())
	t.Setenv("MESHNODE_DATA_DIR", "")    // restored after the test: TestMain's, for nodes
	_ = os.Unsetenv("MESHNODE_DATA_DIR") // here the default is the point
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	addrs, stop := startBinary(t, "--stream", "tcp://127.0.0.1:0", "--stream", "ws://127.0.0.1:0/", "--admin", "127.0.0.1:0",
		"--mesh", "127.0.0.1:0", "--remote", "127.0.0.1:0", "--node-id", "solo")
	if addrs["ws"] == "" || addrs["tcp"] == "" || addrs["admin"] == "" {
		t.Fatalf("printed addresses %v", addrs)
	}
	dataDir := filepath.Join("meshnode-data", "solo")
	dbPath := filepath.Join(wd, dataDir, "state.db")
	if want := "bolt " + dbPath + " (this node only)"; addrs["data-dir"] != dataDir || addrs["store"] != want {
		t.Fatalf("start-up said data dir %q and store %q, want %q and %q", addrs["data-dir"], addrs["store"], dataDir, want)
	}
	if _, err := os.Stat(dbPath); err != nil {
		t.Fatalf("the embedded store's file: %v", err)
	}
	nc, err := net.Dial("tcp", strings.TrimPrefix(addrs["tcp"], "tcp://"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(nc)

	msgpackPayload := "\x81\xa1a\x01"
	if _, err := nc.Write(frame(t, wire.Header{Kind: wire.KindRequest, Codec: wire.CodecMsgPack, RequestSeq: 1, Name: "echo"}, msgpackPayload)); err != nil {
		t.Fatal(err)
	}
	h, p := readFrame(t, br)
	if h.Kind != wire.KindResponse || h.RequestSeq != 1 || h.Codec != wire.CodecMsgPack || string(p) != msgpackPayload {
		t.Fatalf("echo request: %+v %q", h, p)
	}
	if _, err := nc.Write(frame(t, wire.Header{Kind: wire.KindSend, Codec: wire.CodecJSON, Name: "echo"}, `{"x":1}`)); err != nil {
		t.Fatal(err)
	}
	h, p = readFrame(t, br)
	if h.Kind != wire.KindSend || h.Name != "echo" || h.Codec != wire.CodecJSON || string(p) != `{"x":1}` {
		t.Fatalf("echo send: %+v %q", h, p)
	}
	if _, err := nc.Write(frame(t, wire.Header{Kind: wire.KindRequest, Codec: wire.CodecJSON, RequestSeq: 2, Name: "fail"}, `{}`)); err != nil {
		t.Fatal(err)
	}
	h, p = readFrame(t, br)
	if h.Kind != wire.KindError || h.RequestSeq != 2 || !strings.Contains(string(p), `"code":"rejected"`) {
		t.Fatalf("fail: %+v %q", h, p)
	}

	admin := "http://" + addrs["admin"]
	if code, _ := httpGet(t, admin+"/healthz"); code != 200 {
		t.Fatalf("healthz %d", code)
	}
	if code, _ := httpGet(t, admin+"/readyz"); code != 200 {
		t.Fatalf("readyz %d", code)
	}
	_, metrics := httpGet(t, admin+"/metrics")
	for _, want := range []string{
		`zlink_stream_connections_opened_total{`, `transport="tcp"`,
		`zlink_host_application_job_queue_limit`, `meshnode_stream_packets_total{direction="in"`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	_, members := httpGet(t, admin+"/v1/members")
	var rows []memberJSON
	if err := json.Unmarshal([]byte(members), &rows); err != nil || len(rows) != 1 || rows[0].RID != "solo" || rows[0].State != "alive" || rows[0].Generation == 0 {
		t.Fatalf("/v1/members %s (%v)", members, err)
	}
	if code, body := httpGet(t, admin+"/v1/actors"); code != 200 || strings.TrimSpace(body) != "[]" {
		t.Fatalf("/v1/actors %d %s", code, body)
	}
	// The runtime's own Actors and topics (the plugin services' sessions directory) are
	// listed only when asked for.
	if code, body := httpGet(t, admin+"/v1/actors?system=true"); code != 200 || !strings.Contains(body, `"kind": "meshnode.sessions"`) {
		t.Fatalf("/v1/actors?system=true %d %s", code, body)
	}
	var topics struct {
		Total  int `json:"total"`
		Topics []struct {
			Topic string `json:"topic"`
		} `json:"topics"`
	}
	if code := getJSON(t, admin+"/v1/topics", &topics); code != 200 || topics.Total != 0 || len(topics.Topics) != 0 {
		t.Fatalf("/v1/topics %d %+v", code, topics)
	}
	if code := getJSON(t, admin+"/v1/topics?system=true", &topics); code != 200 || topics.Total != 1 || topics.Topics[0].Topic != "meshnode.session-directory" {
		t.Fatalf("/v1/topics?system=true %d %+v", code, topics)
	}
	var table bytes.Buffer
	if err := run(context.Background(), []string{"members", "--admin", addrs["admin"]}, &table, io.Discard); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(table.String()), "\n"); len(lines) != 2 || !strings.HasPrefix(lines[0], "RID") || !strings.HasPrefix(lines[1], "solo ") ||
		!strings.Contains(lines[1], " alive ") || !strings.Contains(lines[1], build().Version) || !strings.HasSuffix(lines[1], "stream 1, service 1, meta 3, snapshot 1") {
		t.Fatalf("members table:\n%s", table.String())
	}

	if err := stop(); err != nil {
		t.Fatalf("drain: %v", err)
	}
	h, p = readFrame(t, br)
	if h.Kind != wire.KindControl || h.Name != wire.NameSessionClosing {
		t.Fatalf("want session-closing, got %+v", h)
	}
	sc, err := wire.DecodeSessionClosing(p)
	if err != nil || sc.Reason != wire.CloseServerDrain {
		t.Fatalf("session-closing %+v %v", sc, err)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("after session-closing: %v, want EOF", err)
	}
}

// A wrong flag value fails start-up with a message naming the flag.
func TestBinaryBadFlagsNameTheFlag(t *testing.T) {
	cases := map[string][]string{
		"--max-message-size": {"--max-message-size", "-1"},
		"--log-level":        {"--log-level", "loud"},
		"--admin":            {"--admin", "nonsense"},
		"--stream":           {"--stream", "tls://127.0.0.1:0"},
		"--tls-client-ca":    {"--tls-client-ca", "ca.pem"},
		"--mesh":             {"--mesh", "nohost"},
		"--remote":           {"--remote", "10.0.0.1:1"},
		"--join":             {"--join", "x"},
		"--mesh-timing":      {"--mesh-timing", "warp"},
		"--advertise-host":   {"--mesh", "0.0.0.0:0", "--remote", "0.0.0.0:0"},
	}
	for flagName, args := range cases {
		err := run(context.Background(), args, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), flagName) {
			t.Errorf("%v: error %v does not name %s", args, err, flagName)
		}
	}
	if err := run(context.Background(), []string{"--stream", "udp://127.0.0.1:0", "--admin", ""}, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "udp://") {
		t.Errorf("bad scheme: %v", err)
	}
}

// A duplicated listener and a missing, unreadable or malformed TLS file fail the start
// (serve and config alike) with a message naming the listener or the file and the flag,
// environment variable or config key that set it; nothing is left listening.
func TestBinaryStartFailsNamingDuplicateListenerOrBadTLSFile(t *testing.T) {
	dir := t.TempDir()
	pki, err := testkit.NewPKI()
	if err != nil {
		t.Fatal(err)
	}
	ca, cert, key, err := pki.Files(dir)
	if err != nil {
		t.Fatal(err)
	}
	garbage := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not PEM\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	absent := filepath.Join(dir, "absent.pem")
	cfgFile := filepath.Join(dir, "meshnode.toml")
	if err := os.WriteFile(cfgFile, []byte("tls-key = \""+absent+"\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := []string{"--admin", "", "--mesh", "127.0.0.1:0", "--remote", "127.0.0.1:0"}
	tlsStream := []string{"--stream", "tls://127.0.0.1:0"}
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want []string
	}{
		{"the same endpoint twice", nil, []string{"--stream", "tcp://127.0.0.1:7499", "--stream", "tcp://127.0.0.1:7499"},
			[]string{"flag --stream", "tcp://127.0.0.1:7499", "twice"}},
		{"two endpoints on one address", nil, []string{"--stream", "tcp://127.0.0.1:7499", "--stream", "ws://127.0.0.1:7499/"},
			[]string{"flag --stream", "tcp://127.0.0.1:7499", "ws://127.0.0.1:7499/"}},
		{"duplicate from the environment", map[string]string{"MESHNODE_STREAM": "tcp://127.0.0.1:7499,tcp://127.0.0.1:7499"}, nil,
			[]string{"environment variable MESHNODE_STREAM", "twice"}},
		{"missing certificate", nil, append(tlsStream, "--tls-cert", absent, "--tls-key", key), []string{"flag --tls-cert", absent}},
		{"missing key from the config file", nil, append(tlsStream, "--tls-cert", cert, "--config", cfgFile),
			[]string{"config file " + cfgFile + " key tls-key", absent}},
		{"malformed certificate", nil, append(tlsStream, "--tls-cert", garbage, "--tls-key", key), []string{"--tls-cert", garbage}},
		{"missing client CA", nil, append(tlsStream, "--tls-cert", cert, "--tls-key", key, "--tls-client-ca", absent),
			[]string{"flag --tls-client-ca", absent}},
		{"malformed client CA", map[string]string{"MESHNODE_TLS_CLIENT_CA": garbage}, append(tlsStream, "--tls-cert", cert, "--tls-key", key),
			[]string{"environment variable MESHNODE_TLS_CLIENT_CA", garbage}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			for _, cmd := range []string{"serve", "config"} {
				// Bounded: were the check missing, serve would start and serve until this ends.
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				err := run(ctx, append(append([]string{cmd}, base...), tc.args...), io.Discard, io.Discard)
				cancel()
				if err == nil {
					t.Fatalf("%s: no error", cmd)
				}
				for _, w := range tc.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("%s: %q does not name %q", cmd, err, w)
					}
				}
			}
		})
	}
	// The same files, well formed, are accepted.
	if err := run(context.Background(), append(append([]string{"config"}, base...),
		"--stream", "tls://127.0.0.1:0", "--tls-cert", cert, "--tls-key", key, "--tls-client-ca", ca), io.Discard, io.Discard); err != nil {
		t.Errorf("good TLS files: %v", err)
	}
}

// --ws-origin restricts the browser origins of ws:// sessions: a page from another
// origin is refused at the handshake, a listed one is served.
func TestBinaryWebSocketOriginFlag(t *testing.T) {
	addrs, stop := startBinary(t, "--stream", "ws://127.0.0.1:0/", "--admin", "", "--mesh", "127.0.0.1:0",
		"--remote", "127.0.0.1:0", "--node-id", "solo", "--ws-origin", "app.example.com")
	defer func() {
		if err := stop(); err != nil {
			t.Errorf("stop: %v", err)
		}
	}()
	dial := func(origin string) (*http.Response, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		h := http.Header{}
		h.Set("Origin", origin)
		c, resp, err := websocket.Dial(ctx, addrs["ws"], &websocket.DialOptions{HTTPHeader: h})
		if err == nil {
			_ = c.CloseNow()
		}
		return resp, err
	}
	if resp, err := dial("https://evil.example.net"); err == nil || resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Errorf("another origin: %v %v, want HTTP 403", resp, err)
	}
	if _, err := dial("https://app.example.com"); err != nil {
		t.Errorf("the listed origin: %v", err)
	}
}

// meshnode call: the sample's server service nodeinfo and, after --attach, the session
// service counter on a worker Actor; a failed call prints its code and exits 1.
func TestBinaryCallServerAndSessionServices(t *testing.T) {
	addrs, stop := startBinary(t, "--stream", "tcp://127.0.0.1:0", "--admin", "", "--mesh", "127.0.0.1:0",
		"--remote", "127.0.0.1:0", "--node-id", "solo")
	defer func() {
		if err := stop(); err != nil {
			t.Errorf("stop: %v", err)
		}
	}()
	call := func(args ...string) (string, error) {
		var out, errb bytes.Buffer
		err := run(context.Background(), append([]string{"call", "--stream", addrs["tcp"]}, args...), &out, &errb)
		return strings.TrimSpace(out.String()), err
	}
	if out, err := call("nodeinfo.describe", "{}"); err != nil || out != `{"node":"solo","members":1}` {
		t.Errorf("nodeinfo.describe: %q %v", out, err)
	}
	var cf *callFailed
	if _, err := call("--attach", "w-1", "counter.add", `{"n":2}`); !errors.As(err, &cf) || cf.code != "unknown_session" {
		t.Errorf("--attach to a session never created: %v, want unknown_session", err)
	}
	// SERVICE.MEMBER splits at the last dot: the service id has dots of its own.
	if out, err := call("meshnode.session-management.create", `{"session":"w-1"}`); err != nil || out != `{"session":"w-1"}` {
		t.Fatalf("meshnode.session-management.create: %q %v", out, err)
	}
	for _, want := range []string{`{"value":2}`, `{"value":4}`} {
		if out, err := call("--attach", "w-1", "counter.add", `{"n":2}`); err != nil || out != want {
			t.Errorf("counter.add on w-1: %q %v, want %s", out, err, want)
		}
	}
	if out, err := call("--attach", "w-1", "counter.get", `{}`); err != nil || out != `{"value":4}` {
		t.Errorf("counter.get: %q %v", out, err)
	}
	if _, err := call("counter.get", `{}`); !errors.As(err, &cf) || cf.code != "not_attached" {
		t.Errorf("a session service without --attach: %v, want not_attached", err)
	}
	if _, err := call("nope.describe", `{}`); !errors.As(err, &cf) || cf.code != "not_attached" && cf.code != "unknown_service" {
		t.Errorf("an unknown service: %v", err)
	}
	if _, err := call("--attach", "w-1", "counter.add", `{"n":"two"}`); !errors.As(err, &cf) || cf.code != "invalid_arguments" {
		t.Errorf("bad arguments: %v, want invalid_arguments", err)
	}
}

// --pprof serves net/http/pprof on the admin address; without it /debug/pprof/ is not
// there.
func TestBinaryPprofFlag(t *testing.T) {
	for _, on := range []bool{false, true} {
		args := []string{"--stream", "tcp://127.0.0.1:0", "--admin", "127.0.0.1:0", "--mesh", "127.0.0.1:0", "--remote", "127.0.0.1:0", "--node-id", "solo"}
		if on {
			args = append(args, "--pprof")
		}
		addrs, stop := startBinary(t, args...)
		code, body := httpGet(t, "http://"+addrs["admin"]+"/debug/pprof/goroutine?debug=1")
		if err := stop(); err != nil {
			t.Errorf("stop: %v", err)
		}
		switch {
		case on && (code != http.StatusOK || !strings.Contains(body, "goroutine profile")):
			t.Errorf("with --pprof: %d %.80q", code, body)
		case !on && code != http.StatusNotFound:
			t.Errorf("without --pprof: %d, want 404", code)
		}
	}
}
