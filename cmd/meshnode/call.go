package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/meshnode/meshnode/services"
	"github.com/meshnode/meshnode/session/connector"
)

// callFailed is a service call's error: printed as "code: message" on stderr, exit 1.
type callFailed struct{ code, message string }

func (c *callFailed) Error() string { return c.code + ": " + c.message }

// runCall is `meshnode call --stream URL [--attach SESSION] SERVICE.MEMBER JSON`: one
// service call, its JSON result on stdout. A service the server offers is called
// there; any other goes to the session worker attached with --attach.
func runCall(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("meshnode call", flag.ContinueOnError)
	fs.SetOutput(stderr)
	stream := fs.String("stream", "tcp://127.0.0.1:7400", "STREAM endpoint of a meshnode")
	attach := fs.String("attach", "", "session to attach to before the call (made with meshnode.session-management.create)")
	timeout := fs.Duration("timeout", 10*time.Second, "bound on connecting, attaching and the call")
	commandUsage(fs, "call")
	if err := parseCommandFlags(fs, args, stdout); err != nil {
		return err
	}
	if fs.NArg() != 2 {
		fs.Usage()
		return errUsage
	}
	// Service ids may hold dots; the member is what follows the last one.
	i := strings.LastIndexByte(fs.Arg(0), '.')
	if i <= 0 || i == len(fs.Arg(0))-1 {
		return &callFailed{services.CodeInvalidArguments, fmt.Sprintf("%q is not SERVICE.MEMBER", fs.Arg(0))}
	}
	svc, member := fs.Arg(0)[:i], fs.Arg(0)[i+1:]
	argsJSON := json.RawMessage(fs.Arg(1))
	if !json.Valid(argsJSON) {
		return &callFailed{services.CodeInvalidArguments, "the arguments are not JSON"}
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	c, err := connector.New(*stream, connector.Options{Reconnect: connector.ReconnectPolicy{Disabled: true}})
	if err != nil {
		return fmt.Errorf("flag --stream: %w", err)
	}
	defer c.Close()
	if err := c.Connect(ctx); err != nil {
		return &callFailed{services.CodeDisconnected, err.Error()}
	}
	conn := services.NewStreamConnection(c)
	if *attach != "" {
		a, _ := json.Marshal(services.AttachArgs{Session: *attach})
		if _, err := conn.Call(ctx, services.Call{Service: services.SessionManagementToken.ID(), Member: "attach", Args: a}); err != nil {
			return asCallFailed(err)
		}
	}
	cat, err := conn.Catalogue(ctx)
	if err != nil {
		return asCallFailed(err)
	}
	var target services.Connection = conn.Session()
	for _, e := range cat.Services {
		if e.ID == svc {
			target = conn
		}
	}
	raw, err := target.Call(ctx, services.Call{Service: svc, Member: member, Args: argsJSON})
	if err != nil {
		return asCallFailed(err)
	}
	if len(raw) == 0 {
		raw = json.RawMessage("null")
	}
	_, err = fmt.Fprintln(stdout, string(raw))
	return err
}

func asCallFailed(err error) error {
	var e *services.Error
	if errors.As(err, &e) {
		return &callFailed{e.Code, e.Message}
	}
	return &callFailed{services.CodeInternal, err.Error()}
}
