package connector_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/meshnode/meshnode"
	"github.com/meshnode/meshnode/fault"
	"github.com/meshnode/meshnode/session"
	"github.com/meshnode/meshnode/session/connector"
)

// Request marshals the request value with the connector's codec (JSON by default) and
// decodes the Response into the reply value; an Error reply is a *RemoteError that
// matches the fault kind of its code.
func ExampleConnector_Request() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// A node serving one route, Request "add", on an OS-chosen port.
	type addArgs struct{ A, B int }
	type addResult struct{ Sum int }
	cfg := meshnode.TestConfig()
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.Streams = []string{"tcp://127.0.0.1:0"}
	cfg.Session = func(*meshnode.Node) session.SessionType {
		return session.NewMux("calc").Request("add", func(_ context.Context, p *session.Packet) error {
			var args addArgs
			if err := p.Decode(&args); err != nil {
				return err
			}
			return p.ReplyValue(addResult{Sum: args.A + args.B})
		}).Type()
	}
	n, err := meshnode.Start(ctx, cfg)
	if err != nil {
		fmt.Println("start:", err)
		return
	}
	defer n.Shutdown(context.Background())

	// The client: New validates, Connect dials, Close ends it for good.
	c, err := connector.New(n.Endpoints()[0], connector.Options{})
	if err != nil {
		fmt.Println("new:", err)
		return
	}
	defer c.Close()
	if err := c.Connect(ctx); err != nil {
		fmt.Println("connect:", err)
		return
	}

	var res addResult
	if err := c.Request(ctx, "add", addArgs{A: 2, B: 3}, &res); err != nil {
		fmt.Println("add:", err)
		return
	}
	fmt.Println("2 + 3 =", res.Sum)

	// No route serves "mul": the server answers with an Error not_found.
	err = c.Request(ctx, "mul", addArgs{A: 2, B: 3}, &res)
	var remote *connector.RemoteError
	if errors.As(err, &remote) {
		fmt.Println("mul:", remote.Code, errors.Is(err, fault.NotFound))
	}
	// Output:
	// 2 + 3 = 5
	// mul: not_found true
}
