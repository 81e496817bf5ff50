package services

import (
	"context"

	"github.com/meshnode/meshnode/actor"
)

// Hooks for the package's own black-box tests (package services_test), which need to
// play a frame of an old route by hand.

// AttacherOf returns the Attacher serving a node's server host.
func AttacherOf(h *Host) *Attacher { return h.attacher() }

// AttachmentKeyOf returns the worker-side key of the live route of the presentation
// whose authenticated identity is presenterID ("" for none).
func (a *Attacher) AttachmentKeyOf(presenterID string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	for p, ps := range a.pres {
		if p.id == presenterID && ps.route != nil {
			return ps.route.client
		}
	}
	return ""
}

// RouteCallAs sends a worker a call as the attachment key client would: what a frame
// delayed from a route that ended looks like when it reaches the worker.
func RouteCallAs(ctx context.Context, actors *actor.Host, kind, session, client, svc, member string, args []byte) error {
	v, err := actors.Request(ctx, actor.Address{Kind: kind, ID: session}, &workerCall{Client: client, Rid: "stale-1", Svc: svc, Member: member, Args: args})
	if err != nil {
		return err
	}
	return v.(*answer).err()
}

// SubscriptionsOf returns how many subscriptions the clients of h hold.
func SubscriptionsOf(h *Host) int { return int(h.stats.subscriptions.Load()) }

// SubscriptionsDropped returns how many subscriptions h dropped for flow control.
func SubscriptionsDropped(h *Host) int64 { return h.stats.dropCount.Load() }

// RefHandle returns the handle of a reference a remote call returned ("" in process).
func RefHandle[T any](r Ref[T]) string {
	if r.st == nil {
		return ""
	}
	return r.st.handle
}

// SetSessionsPerOwner lowers the bound of sessions per creator for a test; the
// returned function restores it.
func SetSessionsPerOwner(n int) (restore func()) {
	old := sessionsPerOwner
	sessionsPerOwner = n
	return func() { sessionsPerOwner = old }
}
