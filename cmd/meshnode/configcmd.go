package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
)

// runConfig is `meshnode config [serve flags]`: the effective serve configuration, from
// flags, MESHNODE_* environment variables and --config, with where each value came
// from. It checks the configuration as serve would and fails the same way.
func runConfig(_ context.Context, args []string, stdout, stderr io.Writer) error {
	if _, _, err := parseServeConfig(args, stderr); err != nil {
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
		fmt.Fprintf(tw, "%s\t%s\t%s\n", f.Name, f.Value.String(), sources[f.Name])
	})
	return tw.Flush()
}
