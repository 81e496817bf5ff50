package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"text/tabwriter"
	"time"
)

// runMembers is `meshnode members --admin ADDR`: the members as a table.
func runMembers(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("meshnode members", flag.ContinueOnError)
	fs.SetOutput(stderr)
	admin := fs.String("admin", defaultAdmin, "admin address of a running meshnode")
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+*admin+"/v1/members", nil)
	if err != nil {
		return fmt.Errorf("flag --admin: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("members: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("members: %s answered %s", *admin, resp.Status)
	}
	var members []memberJSON
	if err := json.NewDecoder(resp.Body).Decode(&members); err != nil {
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
