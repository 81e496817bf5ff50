package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/meshnode/meshnode/internal/buildinfo"
)

// runVersion is `meshnode version`: the build (module version and VCS revision, from
// Go's build information) and the versions of the wire formats this binary speaks.
func runVersion(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("meshnode version", flag.ContinueOnError)
	fs.SetOutput(stderr)
	commandUsage(fs, "version")
	if err := parseCommandFlags(fs, args, stdout); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("version: unexpected argument %q", fs.Arg(0))
	}
	b := build()
	fmt.Fprintln(stdout, "meshnode", b.Version)
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	rev := b.Revision
	switch {
	case rev == "":
		rev = "unknown (built without VCS information)"
	case b.Modified:
		rev += " (modified)"
	}
	if b.Time != "" {
		rev += ", committed " + b.Time
	}
	fmt.Fprintf(tw, "  revision\t%s\n", rev)
	fmt.Fprintf(tw, "  go\t%s\n", b.GoVersion)
	fmt.Fprintf(tw, "  STREAM wire\t%d\n", buildinfo.Stream)
	fmt.Fprintf(tw, "  service wire\t%d\n", buildinfo.ServiceWire)
	fmt.Fprintf(tw, "  node metadata\t%d (reads 1 to %d)\n", buildinfo.NodeMeta, buildinfo.NodeMeta)
	fmt.Fprintf(tw, "  state snapshot\t%d\n", buildinfo.StateSnapshot)
	return tw.Flush()
}
