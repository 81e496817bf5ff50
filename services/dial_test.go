package services_test

import (
	"context"
	"errors"
	"testing"

	"github.com/meshnode/meshnode/internal/testkit"
	"github.com/meshnode/meshnode/services"
)

// Issue 28, item 8: a Go program that only consumes gets a typed client in one line:
// Dial returns the facade of a token on a connection (the server's services, or the
// session's through conn.Session()), methods and replicated state included, and it
// closes with the connection.
func TestIssue28_DialATypedClientInOneLine(t *testing.T) {
	t.Run("server", func(t *testing.T) {
		provider := newHost(t, "provider", nil, providerFacet("p", nil), boardFacet("p", 5))
		c := testkit.DialConnector(t, streamEndpoint(t, provider), wait)
		t.Cleanup(func() { _ = c.Close() })
		conn := services.NewStreamConnection(c)
		echo, err := services.Dial(callCtx(t), conn, EchoToken)
		if err != nil {
			t.Fatal(err)
		}
		if r, err := echo.Say.Call(callCtx(t), SayArgs{Text: "one line"}); err != nil || r.Text != "one line" {
			t.Fatalf("a call through Dial's facade: %+v %v", r, err)
		}
		board, err := services.Dial(callCtx(t), conn, BoardToken)
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, "its state hydrates", func() bool { v, ok := board.Score.Value(); return ok && v.N == 5 })
		if _, err := services.Dial(callCtx(t), conn, DialogToken); !errors.Is(err, services.ErrAssembly) {
			t.Fatalf("Dial of a service the server does not offer: %v", err)
		}
		conn.Close()
		if _, err := echo.Say.Call(callCtx(t), SayArgs{Text: "after"}); !errors.Is(err, services.ErrUnavailable) {
			t.Fatalf("after the connection's Close: %v, want unavailable", err)
		}
	})
	t.Run("session", func(t *testing.T) {
		f := startSvcFleet(t, 2, nil)
		w := f.workerOn(t, 1, "dial-")
		c := testkit.DialConnector(t, f.Node(0).Endpoints()[0], wait)
		t.Cleanup(func() { _ = c.Close() })
		conn := services.NewStreamConnection(c)
		t.Cleanup(conn.Close)
		mgmt, err := services.Dial(callCtx(t), conn, services.SessionManagementToken)
		if err != nil {
			t.Fatal(err)
		}
		board, err := services.Dial(callCtx(t), conn.Session(), BoardToken)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := board.Who.Call(callCtx(t), struct{}{}); !errors.Is(err, services.ErrNotAttached) {
			t.Fatalf("before an attach: %v, want not_attached", err)
		}
		if _, err := mgmt.Create.Call(callCtx(t), services.CreateArgs{Session: w}); err != nil {
			t.Fatal(err)
		}
		if _, err := mgmt.Attach.Call(callCtx(t), services.AttachArgs{Session: w}); err != nil {
			t.Fatal(err)
		}
		if _, err := board.Set.Call(callCtx(t), Score{N: 42}); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the session's state", func() bool { v, ok := board.Score.Value(); return ok && v.N == 42 })
		_ = context.Background
	})
}
