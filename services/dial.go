package services

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
)

// Dial returns the facade of the singleton service of t on conn, for a Go program that
// only consumes services: a host of one facet that uses t, assembled against conn's
// catalogue (ctx bounds that). Over a StreamConnection it reaches the server's
// services; over its Session() the services of the session it attaches to (the facade
// works once an attach selected one: calls fail not_attached before, states are cold).
// The facade lives as long as conn: closing a StreamConnection or a Loopback closes it.
// Over a Connection of another kind, it lives until ctx ends.
//
//	counter, err := services.Dial(ctx, conn.Session(), sampleapp.CounterToken)
func Dial[T any](ctx context.Context, conn Connection, t Token[T]) (*T, error) {
	if !t.rpc {
		return nil, fmt.Errorf("services: Dial(%q): a local-only token is never reached through a connection", t.id)
	}
	var v *T
	h, err := NewHost(ctx, HostOptions{Name: "dial:" + t.id, Connections: []Connection{conn}, Logger: slog.Default()},
		Facet{ID: "dial", Setup: func(env *Env) { v = Use(env, t) }})
	if err != nil {
		return nil, fmt.Errorf("services: Dial(%q): %w", t.id, err)
	}
	if o, ok := conn.(hostOwner); ok {
		o.own(h)
	} else {
		context.AfterFunc(ctx, func() { _ = h.Close(context.Background()) })
	}
	return v, nil
}

// hostOwner is a connection that closes the hosts dialled through it when it closes.
type hostOwner interface{ own(h *Host) }

// dialed are the hosts a connection closes with itself.
type dialed struct {
	mu     sync.Mutex
	hosts  []*Host
	closed bool
}

func (d *dialed) own(h *Host) {
	d.mu.Lock()
	if !d.closed {
		d.hosts = append(d.hosts, h)
		d.mu.Unlock()
		return
	}
	d.mu.Unlock()
	_ = h.Close(context.Background())
}

func (d *dialed) close() {
	d.mu.Lock()
	hosts := d.hosts
	d.hosts, d.closed = nil, true
	d.mu.Unlock()
	for _, h := range hosts {
		_ = h.Close(context.Background())
	}
}
