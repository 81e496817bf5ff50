package stream_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/meshnode/meshnode/session"
)

// Seed §3.2: every startup validation fails Start as a configuration error before the
// host starts. Each case registers a valid node first, so "nothing was bound" checks
// that validation of every node runs before the first listener opens.

// thirdSession is a third session type, for the "two session types on one node" cases.
type thirdSession struct{ recSession }

func thirdType(rec *recorder) session.SessionType {
	return session.NewSessionType(func() *thirdSession { return &thirdSession{recSession{rec: rec}} })
}

// socketFDs counts this process's open sockets (Linux /proc), so a test can tell
// that a failed Start left no listener open while every bind uses port 0.
func socketFDs(t testing.TB) int {
	t.Helper()
	dir := "/proc/self/fd"
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("reading %s (Linux only): %v", dir, err)
	}
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && strings.HasPrefix(l, "socket:") {
			n++
		}
	}
	return n
}

// assertNoNewSockets fails when the process has more sockets open than before.
func assertNoNewSockets(t testing.TB, before int) {
	t.Helper()
	if after := socketFDs(t); after > before {
		t.Errorf("%d sockets open after the failed start, %d before: something was bound", after, before)
	}
}

const (
	tcp0 = "tcp://127.0.0.1:0"
	tls0 = "tls://127.0.0.1:0"
	ws0  = "ws://127.0.0.1:0/"
)

// startupFails registers a valid node "ok", lets build register the bad one, and
// checks that Start fails with want (and ErrConfiguration) and binds nothing.
func startupFails(t *testing.T, want error, badNode string, build func(h *session.Host, rec *recorder)) {
	t.Helper()
	rec := newRecorder()
	mp, _ := newMeter(t)
	h := newHost(session.HostOptions{MeterProvider: mp, Logger: quietLogger()})
	t.Cleanup(func() { _ = h.Close() })
	h.AddStreamNode("ok").Bind(tcp0).Bind(ws0).Session(recType(rec))
	build(h, rec)

	before := socketFDs(t)
	err := h.Start(context.Background())
	if err == nil {
		t.Fatalf("Start succeeded; want %v", want)
	}
	if !errors.Is(err, want) {
		t.Errorf("Start error %q does not match %q", err, want)
	}
	if !errors.Is(err, session.ErrConfiguration) {
		t.Errorf("Start error %q does not match ErrConfiguration", err)
	}
	var ce *session.ConfigError
	if !errors.As(err, &ce) {
		t.Errorf("Start error %T is not a *session.ConfigError", err)
	} else if ce.Node != badNode {
		t.Errorf("ConfigError.Node = %q, want %q", ce.Node, badNode)
	}
	assertNoNewSockets(t, before)
	if n := h.Node("ok"); n != nil {
		t.Errorf("Node(\"ok\") = %v after a failed start, want nil", n.Endpoints())
	}
	if ns := h.Nodes(); len(ns) != 0 {
		t.Errorf("Nodes() has %d nodes after a failed start", len(ns))
	}
	if evs := rec.snapshot(); len(evs) != 0 {
		t.Errorf("callbacks ran: %s", describe(evs))
	}
}

func TestStartup_EmptyNodeName(t *testing.T) {
	for _, name := range []string{"", "   "} {
		t.Run(strconv.Quote(name), func(t *testing.T) {
			startupFails(t, session.ErrEmptyNodeName, name, func(h *session.Host, rec *recorder) {
				h.AddStreamNode(name).Bind(tcp0).Session(otherType(rec))
			})
		})
	}
}

func TestStartup_DuplicateNodeName(t *testing.T) {
	startupFails(t, session.ErrDuplicateNodeName, "ok", func(h *session.Host, rec *recorder) {
		h.AddStreamNode("ok").Bind(tcp0).Session(otherType(rec))
	})
}

func TestStartup_NoBindEndpoint(t *testing.T) {
	startupFails(t, session.ErrNoBindEndpoint, "gw", func(h *session.Host, rec *recorder) {
		h.AddStreamNode("gw").Session(otherType(rec))
	})
}

func TestStartup_TwoSessionTypes(t *testing.T) {
	startupFails(t, session.ErrMultipleSessionTypes, "gw", func(h *session.Host, rec *recorder) {
		h.AddStreamNode("gw").Bind(tcp0).Session(otherType(rec)).Session(thirdType(rec))
	})
}

func TestStartup_TwoSessionTypesSameType(t *testing.T) {
	// Registering the same type twice is still two registrations on one node.
	startupFails(t, session.ErrMultipleSessionTypes, "gw", func(h *session.Host, rec *recorder) {
		h.AddStreamNode("gw").Bind(tcp0).Session(otherType(rec)).Session(otherType(rec))
	})
}

func TestStartup_SessionTypeOnTwoNodes(t *testing.T) {
	startupFails(t, session.ErrSessionTypeOnTwoNodes, "gw", func(h *session.Host, rec *recorder) {
		h.AddStreamNode("gw").Bind(tcp0).Session(recType(rec))
	})
}

func TestStartup_TLSCertPathEmpty(t *testing.T) {
	_, _, key := tlsFiles(t)
	startupFails(t, session.ErrTLSCertPathEmpty, "gw", func(h *session.Host, rec *recorder) {
		h.AddStreamNode("gw").Bind(tls0).TLSServer("", key).Session(otherType(rec))
	})
}

func TestStartup_TLSKeyPathEmpty(t *testing.T) {
	_, cert, _ := tlsFiles(t)
	startupFails(t, session.ErrTLSKeyPathEmpty, "gw", func(h *session.Host, rec *recorder) {
		h.AddStreamNode("gw").Bind(tls0).TLSServer(cert, "").Session(otherType(rec))
	})
}

func TestStartup_ClientCertWithoutTLS(t *testing.T) {
	ca, _, _ := tlsFiles(t)
	startupFails(t, session.ErrClientCertWithoutTLS, "gw", func(h *session.Host, rec *recorder) {
		h.AddStreamNode("gw").Bind(tcp0).RequireClientCertificate(ca).Session(otherType(rec))
	})
}

func TestStartup_NegativeMaxMessageSize(t *testing.T) {
	startupFails(t, session.ErrNegativeMaxMessageSize, "gw", func(h *session.Host, rec *recorder) {
		h.AddStreamNode("gw").Bind(tcp0).MaxMessageSize(-1).Session(otherType(rec))
	})
}

// Digest §11: a wildcard bind host is never advertised and needs an explicit advertise
// host. The bind is never attempted, so these cases open no wildcard socket.
func TestStartup_WildcardBindWithoutAdvertiseHost(t *testing.T) {
	cases := map[string]func(b *session.NodeBuilder){
		"BindHost0000":          func(b *session.NodeBuilder) { b.BindHost("0.0.0.0").Bind("tcp://*:0") },
		"EndpointHost0000":      func(b *session.NodeBuilder) { b.Bind("tcp://0.0.0.0:0") },
		"EndpointHostIPv6Any":   func(b *session.NodeBuilder) { b.Bind("tcp://[::]:0") },
		"WildcardAdvertiseHost": func(b *session.NodeBuilder) { b.BindHost("0.0.0.0").AdvertiseHost("0.0.0.0").Bind("tcp://*:0") },
	}
	for name, cfg := range cases {
		t.Run(name, func(t *testing.T) {
			startupFails(t, session.ErrNoAdvertiseHost, "gw", func(h *session.Host, rec *recorder) {
				cfg(h.AddStreamNode("gw").Session(otherType(rec)))
			})
		})
	}
}

// Not in the seed's list, but the builder documents them as start-up failures too.
func TestStartup_NoSessionType(t *testing.T) {
	startupFails(t, session.ErrNoSessionType, "gw", func(h *session.Host, rec *recorder) {
		h.AddStreamNode("gw").Bind(tcp0)
	})
}

func TestStartup_TLSEndpointWithoutTLSServer(t *testing.T) {
	startupFails(t, session.ErrTLSEndpointWithoutTLS, "gw", func(h *session.Host, rec *recorder) {
		h.AddStreamNode("gw").Bind(tls0).Session(otherType(rec))
	})
}

func TestStartup_BadEndpoint(t *testing.T) {
	for _, ep := range []string{"udp://127.0.0.1:1", "tcp://127.0.0.1", "tcp://127.0.0.1:99999", "tcp://127.0.0.1:1/path"} {
		t.Run(ep, func(t *testing.T) {
			startupFails(t, session.ErrBadEndpoint, "gw", func(h *session.Host, rec *recorder) {
				h.AddStreamNode("gw").Bind(ep).Session(otherType(rec))
			})
		})
	}
}

// A node whose listener cannot bind (port taken) fails Start after earlier nodes were
// bound: they must be released and not reported as started.
func TestStartup_ListenFailureBindsNothing(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	mustNotErr(t, err, "listen")
	defer busy.Close()
	rec := newRecorder()
	mp, _ := newMeter(t)
	h := newHost(session.HostOptions{MeterProvider: mp, Logger: quietLogger()})
	t.Cleanup(func() { _ = h.Close() })
	h.AddStreamNode("a").Bind(tcp0).Bind(ws0).Session(recType(rec))
	h.AddStreamNode("b").Bind("tcp://" + busy.Addr().String()).Session(otherType(rec))
	before := socketFDs(t)
	if err := h.Start(context.Background()); err == nil {
		t.Fatal("Start succeeded with a port in use")
	}
	assertNoNewSockets(t, before)
	if n := h.Node("a"); n != nil {
		t.Errorf("Node(\"a\") = %v after the failed start, want nil", n.Endpoints())
	}
	if ns := h.Nodes(); len(ns) != 0 {
		t.Errorf("Nodes() has %d nodes after the failed start", len(ns))
	}
}

// After a failed Start nothing may keep running even if the caller never calls Close
// (there is nothing to close: the host never started).
func TestStartup_ListenFailureLeavesNothingRunning(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	mustNotErr(t, err, "listen")
	defer busy.Close()
	before := goleak.IgnoreCurrent()
	rec := newRecorder()
	mp, _ := newMeter(t)
	h := newHost(session.HostOptions{MeterProvider: mp, Logger: quietLogger()})
	h.AddStreamNode("b").Bind("tcp://" + busy.Addr().String()).Session(otherType(rec))
	if err := h.Start(context.Background()); err == nil {
		_ = h.Close()
		t.Fatal("Start succeeded with a port in use")
	}
	if err := goleak.Find(before); err != nil {
		t.Errorf("goroutines left running by a failed Start (no Close called): %v", err)
	}
	_ = h.Close() // clean up for the package leak check either way
}

func TestStartup_StartTwiceFails(t *testing.T) {
	th := startHost(t, nil, session.HostOptions{}, nil)
	err := th.h.Start(context.Background())
	if !errors.Is(err, session.ErrHostStarted) || !errors.Is(err, session.ErrConfiguration) {
		t.Fatalf("second Start: %v", err)
	}
}

func TestStartup_JobQueueLimitOutOfRange(t *testing.T) {
	mp, _ := newMeter(t)
	h := newHost(session.HostOptions{MaxQueuedApplicationJobs: -1, MeterProvider: mp, Logger: quietLogger()})
	t.Cleanup(func() { _ = h.Close() })
	h.AddStreamNode("gw").Bind(tcp0).Session(recType(newRecorder()))
	before := socketFDs(t)
	err := h.Start(context.Background())
	if !errors.Is(err, session.ErrJobQueueLimit) || !errors.Is(err, session.ErrConfiguration) {
		t.Fatalf("Start: %v", err)
	}
	assertNoNewSockets(t, before)
}

// Digest §11: advertised endpoint = advertise host + the real port; bind address =
// bind host + the real port; port 0 never remains.
func TestListener_AdvertiseHostAndRealPort(t *testing.T) {
	th := startHost(t, nil, session.HostOptions{}, func(b *session.NodeBuilder) {
		b.AdvertiseHost("node-a.example.net").Bind("tcp://127.0.0.1:0").Bind("ws://*:0/stream")
	})
	eps, binds := th.node.Endpoints(), th.node.BindAddrs()
	if len(eps) != 2 || len(binds) != 2 {
		t.Fatalf("endpoints %v binds %v", eps, binds)
	}
	for i, ep := range eps {
		host, port, err := net.SplitHostPort(binds[i])
		mustNotErr(t, err, "bind addr")
		if host != "127.0.0.1" || port == "0" {
			t.Errorf("bind addr %q: want 127.0.0.1 and a real port", binds[i])
		}
		want := []string{"tcp://node-a.example.net:" + port, "ws://node-a.example.net:" + port + "/stream"}[i]
		if ep != want {
			t.Errorf("endpoint %d = %q, want %q", i, ep, want)
		}
	}
}

func tlsFiles(t testing.TB) (ca, cert, key string) {
	t.Helper()
	ca, cert, key, err := testPKI(t).Files(t.TempDir())
	mustNotErr(t, err, "write PKI")
	return ca, cert, key
}

// The socket count the startup tests rely on does see a successful bind.
func TestStartup_SocketCountSeesBinds(t *testing.T) {
	mp, _ := newMeter(t)
	h := newHost(session.HostOptions{MeterProvider: mp, Logger: quietLogger()})
	t.Cleanup(func() { _ = h.Close() })
	h.AddStreamNode("gw").Bind(tcp0).Bind(ws0).Session(recType(newRecorder()))
	before := socketFDs(t)
	mustNotErr(t, h.Start(context.Background()), "Start")
	if after := socketFDs(t); after < before+2 {
		t.Fatalf("sockets %d -> %d after binding two listeners", before, after)
	}
}
