package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"text/tabwriter"

	"github.com/meshnode/meshnode/store"
	"github.com/meshnode/meshnode/store/boltstore"
)

// runConfig is `meshnode config [serve flags]`: the effective serve configuration, from
// flags, MESHNODE_* environment variables and --config, with where each value came
// from. It checks the configuration as serve would and fails the same way.
func runConfig(_ context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, _, err := parseServeConfig(args, stderr)
	if err != nil {
		return err
	}
	fs := flag.NewFlagSet("meshnode config", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	defineFlags(fs, &serveConfig{}, &rawFlags{})
	sources, err := parseSources(fs, args)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tVALUE\tSOURCE")
	fs.VisitAll(func(f *flag.Flag) {
		value := f.Value.String()
		switch {
		case f.Name == "data-dir" && value == "":
			value = cfg.dataDir // defaulted from the node id
		case f.Name == "store" && value == "":
			value = "bolt:" + filepath.Join(cfg.dataDir, boltstore.FileName) // the embedded store
		case f.Name == "store":
			value = store.Redact(value) // never the password
		case f.Name == "gossip-key" && value != "":
			value = "(" + plural(len(cfg.gossipKeys), "key") + ", not shown)" // never a key
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", f.Name, value, sources[f.Name])
	})
	if err := tw.Flush(); err != nil {
		return err
	}
	// What protects the node (docs/security.md), as serve would load it.
	fmt.Fprintln(stdout)
	tw = tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PROTECTION\tSTATE\tDETAIL")
	for _, p := range protections(cfg) {
		state := "off"
		if p.On {
			state = "on"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", p.Name, state, p.Detail)
	}
	return tw.Flush()
}
