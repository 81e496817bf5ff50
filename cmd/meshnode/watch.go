package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/meshnode/meshnode/services"
	"github.com/meshnode/meshnode/session/connector"
)

// watchSetup bounds connecting, attaching and subscribing when --timeout does not.
const watchSetup = 10 * time.Second

// runWatch is `meshnode watch [--stream URL] [--attach SESSION] [--count N] [--timeout D]
// SERVICE.MEMBER`: one JSON line per value of a state member ({"seq":S,"value":V}, the
// hydrated value first) or per event of an events member ({"event":E}), until N lines
// (exit 0), SIGINT (exit 0), or a failure ("code: message" on stderr, exit 1). A
// service the server offers is watched there; any other at the session attached with
// --attach.
func runWatch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("meshnode watch", flag.ContinueOnError)
	fs.SetOutput(stderr)
	stream := fs.String("stream", "tcp://127.0.0.1:7400", "STREAM endpoint of a meshnode")
	attach := fs.String("attach", "", "session to attach to first (made with meshnode.session-management.create)")
	count := fs.Int("count", 0, "exit 0 after this many lines (0: run until SIGINT)")
	timeout := fs.Duration("timeout", 0, "end the watch after this long: a failure when --count lines were not printed by then (0: no bound)")
	commandUsage(fs, "watch")
	if err := parseCommandFlags(fs, args, stdout); err != nil {
		return err
	}
	if fs.NArg() != 1 || *count < 0 || *timeout < 0 {
		fs.Usage()
		return errUsage
	}
	// Service ids may hold dots; the member is what follows the last one.
	i := strings.LastIndexByte(fs.Arg(0), '.')
	if i <= 0 || i == len(fs.Arg(0))-1 {
		return &callFailed{services.CodeInvalidArguments, fmt.Sprintf("%q is not SERVICE.MEMBER", fs.Arg(0))}
	}
	svc, member := fs.Arg(0)[:i], fs.Arg(0)[i+1:]
	if *timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *timeout)
		defer cancel()
	}
	setup, cancelSetup := context.WithTimeout(ctx, watchSetup)
	defer cancelSetup()

	c, err := connector.New(*stream, connector.Options{Reconnect: connector.ReconnectPolicy{Disabled: true}})
	if err != nil {
		return fmt.Errorf("flag --stream: %w", err)
	}
	defer c.Close()
	if err := c.Connect(setup); err != nil {
		return &callFailed{services.CodeDisconnected, err.Error()}
	}
	dropped := make(chan struct{})
	var dropOnce sync.Once
	unwatch := c.WatchState(func(s connector.State) {
		if s != connector.StateConnected {
			dropOnce.Do(func() { close(dropped) })
		}
	})
	defer unwatch()
	conn := services.NewStreamConnection(c)
	defer conn.Close()
	if *attach != "" {
		a, _ := json.Marshal(services.AttachArgs{Session: *attach})
		if _, err := conn.Call(setup, services.Call{Service: services.SessionManagementToken.ID(), Member: "attach", Args: a}); err != nil {
			return asCallFailed(err)
		}
	}
	cat, err := conn.Catalogue(setup)
	if err != nil {
		return asCallFailed(err)
	}
	var target services.Connection = conn.Session()
	for _, e := range cat.Services {
		if e.ID == svc {
			target = conn
		}
	}

	var (
		mu      sync.Mutex
		printed int
		werr    error
		done    = make(chan struct{})
		failed  = make(chan error, 1)
		kind    string
	)
	finish := sync.OnceFunc(func() { close(done) })
	line := func(d services.Delivery, v json.RawMessage) {
		mu.Lock()
		defer mu.Unlock()
		if (*count > 0 && printed >= *count) || werr != nil {
			return
		}
		var b []byte
		if kind == "events" {
			b, _ = json.Marshal(struct {
				Event json.RawMessage `json:"event"`
			}{v})
		} else {
			b, _ = json.Marshal(struct {
				Seq   uint64          `json:"seq"`
				Value json.RawMessage `json:"value"`
			}{d.Seq, v})
		}
		if _, werr = fmt.Fprintln(stdout, string(b)); werr != nil {
			finish()
			return
		}
		printed++
		if *count > 0 && printed == *count {
			finish()
		}
	}
	mu.Lock() // the first line waits until kind is known
	k, stop, err := services.Watch(setup, target, svc, member, line, func(err error) {
		select {
		case failed <- err:
		default:
		}
	})
	kind = k
	mu.Unlock()
	if err != nil {
		return asCallFailed(err)
	}
	defer stop()
	cancelSetup()

	select {
	case <-done:
		mu.Lock()
		defer mu.Unlock()
		return werr
	case err := <-failed:
		return asCallFailed(err)
	case <-dropped:
		return &callFailed{services.CodeDisconnected, "the connection to " + *stream + " dropped"}
	case <-ctx.Done():
		mu.Lock()
		n := printed
		mu.Unlock()
		if ctx.Err() == context.DeadlineExceeded && *count > 0 {
			return &callFailed{"deadline_exceeded", fmt.Sprintf("%d of %d lines within %v", n, *count, *timeout)}
		}
		return nil // SIGINT, or the --timeout of a watch with no --count
	}
}
