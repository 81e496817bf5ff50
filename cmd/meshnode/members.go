package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"text/tabwriter"
)

// runMembers is `meshnode members --admin ADDR`: the members as a table.
func runMembers(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("meshnode members", flag.ContinueOnError)
	fs.SetOutput(stderr)
	admin := fs.String("admin", defaultAdmin, "admin address of a running meshnode")
	creds := credFlags(fs)
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	c, addr, err := creds(*admin)
	if err != nil {
		return err
	}
	var members []memberJSON
	if err := adminCall(ctx, c, http.MethodGet, addr, "/v1/members", &members); err != nil {
		return fmt.Errorf("members: %w", err)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RID\tGENERATION\tADDRESS\tSTATE")
	for _, m := range members {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", m.RID, m.Generation, m.Address, m.State)
	}
	return tw.Flush()
}
