package session_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/meshnode/meshnode/fault"
	"github.com/meshnode/meshnode/session"
	"github.com/meshnode/meshnode/session/connector"
	"github.com/meshnode/meshnode/session/wire"
)

// A Mux routes Requests and Sends by packet name, by name prefix, and to a fallback.
// Here it is served by a Host with one stream node on an OS-chosen port (a meshnode
// node does the same with Config.Streams and Config.Session), and a connector is its
// client.
func ExampleMux() {
	ctx := context.Background()

	mux := session.NewMux("example").
		// Request "echo": the reply is the request's own payload, in its codec.
		Request("echo", func(_ context.Context, p *session.Packet) error {
			return p.Reply(p.Codec, p.Payload)
		}).
		// Send "ping": no reply; the server pushes a Send "pong" back.
		Send("ping", func(ctx context.Context, p *session.Packet) error {
			return p.Peer.SendValue(ctx, "pong", wire.CodecJSON, "pong")
		}).
		// Every "math." name no exact route takes.
		Prefix("math.", func(_ context.Context, p *session.Packet) error {
			var xs []int
			if err := p.Decode(&xs); err != nil {
				return err
			}
			if p.Name != "math.sum" {
				return fault.Errorf(fault.NotFound, "no such operation %s", p.Name)
			}
			sum := 0
			for _, x := range xs {
				sum += x
			}
			return p.ReplyValue(sum)
		}).
		// Whatever no route takes. A returned error answers a Request with its fault
		// kind's code.
		Fallback(func(_ context.Context, p *session.Packet) error {
			if !p.IsRequest() {
				return nil // an unknown Send is dropped
			}
			return fault.Errorf(fault.NotFound, "nothing serves %s", p.Name)
		})

	host := session.NewHost(session.HostOptions{Logger: slog.New(slog.DiscardHandler)})
	host.AddStreamNode("gateway").Bind("tcp://127.0.0.1:0").Session(mux.Type())
	if err := host.Start(ctx); err != nil {
		fmt.Println("start:", err)
		return
	}
	defer host.Shutdown(ctx)

	c, err := connector.New(host.Node("gateway").Endpoints()[0], connector.Options{})
	if err != nil {
		fmt.Println("connector:", err)
		return
	}
	defer c.Close()
	pongs := make(chan string, 1)
	c.Handle("pong", func(m connector.Message) {
		var s string
		_ = m.Decode(&s)
		pongs <- s
	})
	if err := c.Connect(ctx); err != nil {
		fmt.Println("connect:", err)
		return
	}

	var echoed string
	if err := c.Request(ctx, "echo", "hello", &echoed); err != nil {
		fmt.Println("echo:", err)
		return
	}
	fmt.Println("echo:", echoed)

	var sum int
	if err := c.Request(ctx, "math.sum", []int{1, 2, 3}, &sum); err != nil {
		fmt.Println("math.sum:", err)
		return
	}
	fmt.Println("math.sum:", sum)

	if err := c.Send(ctx, "ping", nil); err != nil {
		fmt.Println("ping:", err)
		return
	}
	select {
	case s := <-pongs:
		fmt.Println("pushed:", s)
	case <-time.After(5 * time.Second):
		fmt.Println("no pong")
		return
	}

	err = c.Request(ctx, "nope", nil, nil)
	var remote *connector.RemoteError
	if errors.As(err, &remote) {
		fmt.Println("nope:", remote.Code, "-", remote.Message)
	}
	// Output:
	// echo: hello
	// math.sum: 6
	// pushed: pong
	// nope: not_found - nothing serves nope
}
