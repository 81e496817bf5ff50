package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"text/tabwriter"
)

// runMembers is `meshnode members`: the members as a table.
func runMembers(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("meshnode members", flag.ContinueOnError)
	fs.SetOutput(stderr)
	target := adminFlags(fs)
	commandUsage(fs, "members")
	if err := parseCommandFlags(fs, args, stdout); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("members: unexpected argument %q", fs.Arg(0))
	}
	t, err := target()
	if err != nil {
		return fmt.Errorf("members: %w", err)
	}
	var members []memberJSON
	if err := t.call(ctx, http.MethodGet, "/v1/members", &members); err != nil {
		return fmt.Errorf("members: %w", err)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RID\tGENERATION\tADDRESS\tSTATE\tVERSION\tWIRE")
	for _, m := range members {
		build, wire := "-", "-" // a build before node metadata version 3 announces none
		if v := m.Versions; v != nil {
			build = v.Build
			if v.Revision != "" {
				build += " (" + v.Revision + ")"
			}
			wire = fmt.Sprintf("stream %d, service %d, meta %d, snapshot %d", v.Stream, v.Service, v.Meta, v.Snapshot)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\n", m.RID, m.Generation, m.Address, m.State, build, wire)
	}
	return tw.Flush()
}
