package services_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/meshnode/meshnode/services"
)

// A member's last replica goes (its host closes) and another comes at once (a new host
// on the same connection): the connection unsubscribes the member and subscribes it
// again, from two goroutines, so the two can be reordered on the way (at the client,
// at a session's server, at the worker). The unsubscribe is held here until the new
// subscription has hydrated: coming last, it must not end that subscription (its
// replica froze: it never heard another update, with no error).
func TestReorder_LateUnsubscribeLeavesTheNextSubscription(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			provider := newHost(t, "provider", nil, boardFacet("provider", 0))
			conn, _ := tr.connect(t, provider)
			lateUnsubscribe(t, []services.Connection{conn}, conn, nil)
		})
	}
	for _, tr := range presentationTransports {
		t.Run("session-"+tr, func(t *testing.T) {
			f := startSvcFleet(t, 2, nil)
			w := f.workerOn(t, 1, "reorder-")
			p := f.connectPresentation(t, 0, tr)
			lateUnsubscribe(t, []services.Connection{p.server, p.session}, p.session, func(t *testing.T, mgmt *services.SessionManagement) {
				if _, err := mgmt.Create.Call(callCtx(t), services.CreateArgs{Session: w}); err != nil {
					t.Fatal(err)
				}
				if _, err := mgmt.Attach.Call(callCtx(t), services.AttachArgs{Session: w}); err != nil {
					t.Fatal(err)
				}
			})
		})
	}
}

// lateUnsubscribe runs a host on conns whose board comes over sub, closes it, and runs
// another at once; the first's unsubscribes are held until the second has hydrated.
// attach, when set, attaches the first host's presentation to its session.
func lateUnsubscribe(t *testing.T, conns []services.Connection, sub services.Connection, attach func(t *testing.T, mgmt *services.SessionManagement)) {
	held, release := services.HoldUnsubscribes(sub)
	t.Cleanup(release)
	consumer := func(first bool) (*services.Host, *Board) {
		var (
			b    *Board
			mgmt *services.SessionManagement
		)
		h := newHost(t, "consumer", conns, services.Facet{ID: "ui", Setup: func(env *services.Env) {
			b = services.Use(env, BoardToken)
			if attach != nil {
				mgmt = services.Use(env, services.SessionManagementToken)
			}
		}})
		if first && attach != nil {
			attach(t, mgmt)
		}
		return h, b
	}
	hydrated := func(b *Board) func() bool {
		return func() bool { _, ok := b.Score.Value(); return ok }
	}

	first, b1 := consumer(true)
	eventually(t, "the first host's score hydrates", hydrated(b1))
	if err := first.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the first host's unsubscribe of the score is on its way (held)", func() bool { return held("score") >= 1 })

	_, b2 := consumer(false)
	eventually(t, "the second host's score hydrates (its subscribe was served)", hydrated(b2))

	served, restore := services.CountUnsubscribesServed("score")
	t.Cleanup(restore)
	release()
	eventually(t, "the late unsubscribe is served", func() bool { return served() >= 1 })

	if _, err := b2.Set.Call(callCtx(t), Score{N: 42}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the second host's replica hears the next update", func() bool {
		v, ok := b2.Score.Value()
		return ok && v.N == 42
	})
	if st := b2.Score.Status(); !st.Hydrated || st.Stale {
		t.Fatalf("status %+v", st)
	}
}

// A connector stays its owner's when a StreamConnection on it closes, and the server
// keeps the STREAM session's subscriptions (Close sends no unsubscribes). A second
// StreamConnection on the same connector subscribes members the first held: its
// subscription ids must be later than the first's, or the server refuses them as
// superseded and its replicas never hydrate (they did not, when each connection
// counted its ids from 1).
func TestReorder_ASecondConnectionOnOneConnectorHydrates(t *testing.T) {
	provider := newHost(t, "provider", nil, boardFacet("provider", 0))
	connectStreamAs(t, provider) // serves the provider over STREAM
	ep, _ := streamServers.Load(provider)
	c, _ := connectStreamTo(t, ep.(string))
	board := func(conn services.Connection) (*services.Host, *Board) {
		var b *Board
		h := newHost(t, "consumer", []services.Connection{conn}, services.Facet{ID: "ui", Setup: func(env *services.Env) {
			b = services.Use(env, BoardToken)
		}})
		eventually(t, "a host's score hydrates", func() bool { _, ok := b.Score.Value(); return ok })
		return h, b
	}
	first := services.NewStreamConnection(c)
	// Three hosts one after the other: the first connection's ids of the score grow.
	for range 3 {
		h, _ := board(first)
		if err := h.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	board(first) // the server holds its subscription past the connection's Close
	first.Close()

	second := services.NewStreamConnection(c)
	t.Cleanup(second.Close)
	_, b := board(second)
	if _, err := b.Set.Call(callCtx(t), Score{N: 7}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the second connection's replica hears the next update", func() bool {
		v, ok := b.Score.Value()
		return ok && v.N == 7
	})
}

// A Go client whose server-scope subscription the server drops for flow control (its
// socket's queue was full) is told so, subscribes again and hydrates from a fresh
// snapshot: the notice carries no sequence (it is not one of the member's
// publications), and the client dropped it as one without, so its replica stayed ready
// and never heard another update.
func TestFlowControl_AGoClientDroppedSubscribesAgain(t *testing.T) {
	var refusing atomic.Bool
	t.Cleanup(services.RefuseDeliveries("score", refusing.Load))
	provider := newHost(t, "provider", nil, boardFacet("provider", 0))
	conn, _ := connectStream(t, provider)
	var b *Board
	newHost(t, "consumer", []services.Connection{conn}, services.Facet{ID: "ui", Setup: func(env *services.Env) {
		b = services.Use(env, BoardToken)
	}})
	eventually(t, "the score hydrates", func() bool { _, ok := b.Score.Value(); return ok })
	dropped := services.SubscriptionsDropped(provider)

	refusing.Store(true) // the next update finds the subscriber behind
	if _, err := b.Set.Call(callCtx(t), Score{N: 1}); err != nil {
		t.Fatal(err)
	}
	refusing.Store(false)
	if n := services.SubscriptionsDropped(provider) - dropped; n != 1 {
		t.Fatalf("%d subscriptions dropped for the refused update, want 1", n)
	}
	// Subscribed again: the fresh snapshot holds the update the drop missed, and the
	// next update arrives as usual.
	eventually(t, "the replica has the update its drop missed", func() bool {
		v, ok := b.Score.Value()
		return ok && v.N == 1
	})
	if _, err := b.Set.Call(callCtx(t), Score{N: 2}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the replica hears the next update", func() bool {
		v, ok := b.Score.Value()
		return ok && v.N == 2
	})
}
