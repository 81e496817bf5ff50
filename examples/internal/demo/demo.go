// Package demo starts what the pattern examples run on: a mesh of two meshnode nodes in
// this process, sharing the project's embedded store (one bbolt file, as a fleet shares
// a PostgreSQL server), with a session-worker kind, and presentations that reach a node
// over STREAM (or, for the tests, in process) and attach to a session.
package demo

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strconv"

	"github.com/meshnode/meshnode"
	"github.com/meshnode/meshnode/services"
	"github.com/meshnode/meshnode/session"
	"github.com/meshnode/meshnode/session/connector"
	"github.com/meshnode/meshnode/store"
	"github.com/meshnode/meshnode/store/boltstore"
)

// WorkerKind is the session workers' Actor kind.
const WorkerKind = "worker"

// Mesh is two nodes and their store.
type Mesh struct {
	Nodes []*meshnode.Node
	Store store.Store
}

// Start starts two nodes whose session workers run facets(st) (st: the shared store,
// for durable records), keeping the store in dir.
func Start(ctx context.Context, dir string, facets func(st store.Store) []services.Facet) (*Mesh, error) {
	st, err := boltstore.Open(filepath.Join(dir, "state.db"), boltstore.Options{})
	if err != nil {
		return nil, fmt.Errorf("demo: the store: %w", err)
	}
	m := &Mesh{Store: st}
	for i := range 2 {
		cfg := meshnode.DefaultLocalConfig()
		cfg.NodeID = "node-" + string(rune('a'+i))
		cfg.Logger = slog.New(slog.DiscardHandler)
		cfg.Store = st
		cfg.Session = func(n *meshnode.Node) session.SessionType { return n.ServeServices(session.NewMux("demo")).Type() }
		cfg.ServiceWorker = &meshnode.ServiceWorker{Kind: WorkerKind, Facets: facets(st)}
		if i > 0 {
			cfg.Join = []string{m.Nodes[0].MeshAddr()}
		}
		n, err := meshnode.Start(ctx, cfg)
		if err != nil {
			m.Close()
			return nil, fmt.Errorf("demo: node %d: %w", i, err)
		}
		m.Nodes = append(m.Nodes, n)
	}
	for _, n := range m.Nodes {
		if err := n.WaitMembers(ctx, 2); err != nil {
			m.Close()
			return nil, fmt.Errorf("demo: the mesh: %w", err)
		}
	}
	return m, nil
}

// Close stops the nodes, then the store.
func (m *Mesh) Close() {
	for i := len(m.Nodes) - 1; i >= 0; i-- {
		_ = m.Nodes[i].Close()
	}
	_ = m.Store.Close()
}

// SessionOn returns a session id, starting with prefix, whose worker placement puts on
// node i.
func (m *Mesh) SessionOn(ctx context.Context, i int, prefix string) (string, error) {
	for k := range 1000 {
		id := prefix + strconv.Itoa(k)
		f, err := m.Nodes[0].Actors().Lookup(ctx, WorkerKind, id)
		if err != nil {
			return "", err
		}
		if f.Node == m.Nodes[i].ID() {
			return id, nil
		}
	}
	return "", fmt.Errorf("demo: no session placed on node %d", i)
}

// Replace stops the worker of session wherever it runs (as a crash of the worker
// would, without taking a node down): its presentations' servers attach them again to
// a replacement, which rebuilds the session's work from its durable records.
func (m *Mesh) Replace(ctx context.Context, session string) error {
	_, f, err := m.Nodes[0].Actors().Where(ctx, session)
	if err != nil {
		return err
	}
	for _, n := range m.Nodes {
		if n.ID() == f.Node {
			n.Actors().Deactivate(session)
			return nil
		}
	}
	return fmt.Errorf("demo: the worker of %s is on no node here", session)
}

// Presentation is a client program attached (or about to attach) to a session: a
// services host of its facets over one connection to a node.
type Presentation struct {
	Name string
	Mgmt *services.SessionManagement
	host *services.Host
	stop func()
}

// Transports a presentation reaches its node by.
const (
	Stream   = "stream"
	Loopback = "loopback"
)

// Present starts a presentation named name on node i, over transport, with facets
// (they may Use and Observe the session's services: they reach the session it attaches
// to).
func (m *Mesh) Present(ctx context.Context, i int, name, transport string, facets ...services.Facet) (*Presentation, error) {
	p := &Presentation{Name: name}
	var conns []services.Connection
	switch transport {
	case Loopback:
		l := services.NewLoopback(m.Nodes[i].Services(), services.Client{ID: name})
		conns = []services.Connection{l, l.Session()}
		p.stop = l.Close
	default:
		c, err := connector.New(m.Nodes[i].Endpoints()[0], connector.Options{Reconnect: connector.ReconnectPolicy{Disabled: true}})
		if err != nil {
			return nil, err
		}
		if err := c.Connect(ctx); err != nil {
			return nil, err
		}
		sc := services.NewStreamConnection(c)
		conns = []services.Connection{sc, sc.Session()}
		p.stop = func() { sc.Close(); _ = c.Close() }
	}
	facets = append(facets, services.Facet{ID: "demo.management", Setup: func(env *services.Env) {
		p.Mgmt = services.Use(env, services.SessionManagementToken)
	}})
	h, err := services.NewHost(ctx, services.HostOptions{Name: name, Connections: conns, Logger: slog.New(slog.DiscardHandler)}, facets...)
	if err != nil {
		p.stop()
		return nil, err
	}
	p.host = h
	return p, nil
}

// Attach selects session for the presentation.
func (p *Presentation) Attach(ctx context.Context, session string) error {
	_, err := p.Mgmt.Attach.Call(ctx, services.AttachArgs{Session: session})
	return err
}

// Disconnect closes the presentation's connection (its host with it), without asking
// the session for anything: the session's work goes on.
func (p *Presentation) Disconnect() {
	_ = p.host.Close(context.Background())
	p.stop()
}
