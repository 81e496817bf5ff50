package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/meshnode/meshnode"
	"github.com/meshnode/meshnode/store"
)

// openStore opens the node's Actor state store before the node starts, so that a store
// that cannot be used fails the start naming --store (or --data-dir), and says which
// store the node uses.
func openStore(ctx context.Context, cfg serveConfig, nc meshnode.Config, stdout io.Writer) (store.Store, error) {
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	st, _, err := meshnode.OpenStore(octx, nc)
	if err != nil {
		where := cfg.storeWhere
		if cfg.storeURL == "" {
			where = cfg.dataDirWhere + " " + cfg.dataDir
		}
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	in := st.Info()
	scope := "this node only"
	if in.Shared {
		scope = "shared by the nodes that use it"
	}
	if cfg.storeURL == "" {
		fmt.Fprintf(stdout, "meshnode: data dir %s\n", cfg.dataDir)
	}
	fmt.Fprintf(stdout, "meshnode: store %s %s (%s)\n", in.Name, in.Location, scope)
	return st, nil
}

// storeHealthJSON is the store's part of /readyz and of GET /v1/node.
type storeHealthJSON struct {
	Name     string `json:"name"`
	Location string `json:"location"`
	Shared   bool   `json:"shared"`
	OK       bool   `json:"ok"`
	Error    string `json:"error,omitempty"`
}

// notReady is why the node is not ready while its store does not answer (/readyz
// and GET /v1/node's health say the same).
func (h storeHealthJSON) notReady() string {
	return "store " + h.Name + " " + h.Location + ": " + h.Error
}

// storeHealth pings the store (at most a second).
func storeHealth(ctx context.Context, st store.Store) storeHealthJSON {
	if st == nil {
		return storeHealthJSON{Name: "none", OK: true}
	}
	in := st.Info()
	h := storeHealthJSON{Name: in.Name, Location: in.Location, Shared: in.Shared, OK: true}
	pctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := st.Ping(pctx); err != nil {
		h.OK = false
		h.Error = err.Error()
		if errors.Is(err, context.DeadlineExceeded) {
			h.Error = "no answer within 1s"
		}
	}
	return h
}
