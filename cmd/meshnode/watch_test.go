package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

// Issue 28, item 9: meshnode watch prints one JSON line per value of a state member
// ({"seq":S,"value":V}, the hydrated value first) or per event ({"event":E}) of the
// sample counter, exits 0 after --count lines, and fails with a code for what cannot be
// watched; SERVICE.MEMBER splits at the last dot (the session directory's state).
func TestBinaryWatch(t *testing.T) {
	addrs, stop := startBinary(t, "--stream", "tcp://127.0.0.1:0", "--admin", "", "--mesh", "127.0.0.1:0",
		"--remote", "127.0.0.1:0", "--node-id", "solo")
	defer func() {
		if err := stop(); err != nil {
			t.Errorf("stop: %v", err)
		}
	}()
	call := func(args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if err := run(context.Background(), append([]string{"call", "--stream", addrs["tcp"]}, args...), &out, &errb); err != nil {
			t.Fatalf("call %v: %v", args, err)
		}
		return strings.TrimSpace(out.String())
	}
	// watch runs meshnode watch in the background; its lines come on the channel, its
	// end on the other.
	watch := func(args ...string) (chan string, chan error) {
		out := &lineWriter{lines: make(chan string, 64)}
		done := make(chan error, 1)
		go func() {
			var errb bytes.Buffer
			if !strings.Contains(strings.Join(args, " "), "--timeout") {
				args = append([]string{"--timeout", "20s"}, args...)
			}
			done <- run(context.Background(), append([]string{"watch", "--stream", addrs["tcp"]}, args...), out, &errb)
		}()
		return out.lines, done
	}
	next := func(lines chan string) string {
		t.Helper()
		select {
		case l := <-lines:
			return l
		case <-time.After(15 * time.Second):
			t.Fatal("no line")
			return ""
		}
	}
	ended := func(done chan error) error {
		t.Helper()
		select {
		case err := <-done:
			return err
		case <-time.After(15 * time.Second):
			t.Fatal("watch did not end")
			return nil
		}
	}
	call("meshnode.session-management.create", `{"session":"w-1"}`)
	call("--attach", "w-1", "counter.add", `{"n":2}`)

	values, done := watch("--attach", "w-1", "--count", "3", "counter.value")
	var first struct {
		Seq   uint64
		Value int
	}
	if l := next(values); json.Unmarshal([]byte(l), &first) != nil || first.Value != 2 || first.Seq == 0 || !strings.HasPrefix(l, `{"seq":`) {
		t.Fatalf("the first line %q, want the hydrated {\"seq\":S,\"value\":2}", l)
	}
	events, edone := watch("--attach", "w-1", "--count", "2", "counter.changed")
	// The events watch is active once it is attached and subscribed: add until it hears one.
	var ev string
	for ev == "" {
		call("--attach", "w-1", "counter.add", `{"n":1}`)
		select {
		case ev = <-events:
		case <-time.After(200 * time.Millisecond):
		}
	}
	var e struct{ Event struct{ From, To int } }
	if json.Unmarshal([]byte(ev), &e) != nil || e.Event.To != e.Event.From+1 || !strings.HasPrefix(ev, `{"event":{"from":`) {
		t.Fatalf("an event line %q", ev)
	}
	call("--attach", "w-1", "counter.add", `{"n":1}`)
	if l := next(events); !strings.Contains(l, `"to":`) {
		t.Fatalf("the second event line %q", l)
	}
	if err := ended(edone); err != nil {
		t.Fatalf("the events watch after --count lines: %v, want exit 0", err)
	}
	for i := 0; i < 2; i++ {
		var v struct {
			Seq   uint64
			Value int
		}
		if l := next(values); json.Unmarshal([]byte(l), &v) != nil || v.Seq != first.Seq+uint64(i)+1 || v.Value != first.Value+i+1 {
			t.Fatalf("value line %d: %q after %+v", i+2, l, first)
		}
	}
	if err := ended(done); err != nil {
		t.Fatalf("the state watch after --count lines: %v, want exit 0", err)
	}
	// The session directory, a service id with dots of its own.
	dir, ddone := watch("--count", "1", "meshnode.session-directory.sessions")
	if l := next(dir); !strings.Contains(l, `"session":"w-1"`) || !strings.HasPrefix(l, `{"seq":`) {
		t.Fatalf("the directory line %q", l)
	}
	if err := ended(ddone); err != nil {
		t.Fatal(err)
	}
	for args, code := range map[string]string{
		"--attach w-1 counter.nope":    "unknown_member",
		"nodeinfo.describe":            "invalid_arguments",
		"--attach never counter.value": "unknown_session",
		"nope.value":                   "not_attached",
		"--attach w-1 nope.value":      "unknown_service",
		"--attach w-1 --count 5 --timeout 500ms counter.changed": "deadline_exceeded",
	} {
		_, done := watch(strings.Fields(args)...)
		var cf *callFailed
		err := ended(done)
		if !errors.As(err, &cf) || cf.code != code {
			t.Errorf("watch %s: %v, want %s", args, err, code)
			continue
		}
		// The process prints "code: message" on stderr and exits 1.
		var stderr bytes.Buffer
		if status := exitCode(err, &stderr); status != 1 || !strings.HasPrefix(stderr.String(), code+": ") || strings.Count(stderr.String(), "\n") != 1 {
			t.Errorf("watch %s: exit %d, stderr %q; want 1 and \"%s: message\"", args, status, stderr.String(), code)
		}
	}
	// At SIGINT (the end of run's context) a watch with no --count exits 0.
	ctx, interrupt := context.WithCancel(context.Background())
	out := &lineWriter{lines: make(chan string, 64)}
	sdone := make(chan error, 1)
	go func() {
		sdone <- run(ctx, []string{"watch", "--stream", addrs["tcp"], "--attach", "w-1", "counter.value"}, out, &bytes.Buffer{})
	}()
	next(out.lines)
	interrupt()
	var stderr bytes.Buffer
	if err := ended(sdone); exitCode(err, &stderr) != 0 || stderr.Len() != 0 {
		t.Fatalf("watch at SIGINT: %v (stderr %q), want exit 0", err, stderr.String())
	}
}
