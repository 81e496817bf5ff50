package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/meshnode/meshnode/store"
	"github.com/meshnode/meshnode/store/boltstore"
	"github.com/meshnode/meshnode/tracing"
)

// runConfig is `meshnode config [serve flags]`: the serve configuration in force, from
// flags, MESHNODE_* environment variables and --config, with where each value came
// from (defaults as serve applies them), then the OpenTelemetry settings the
// environment gives. It checks the configuration as serve would and fails the same
// way.
func runConfig(_ context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && isHelp(args[0]) {
		fmt.Fprintln(stdout, "Usage: meshnode config [serve flags]")
		fmt.Fprintln(stdout)
		fmt.Fprintln(stdout, "Prints the configuration serve would run with and where each value came from,")
		fmt.Fprintln(stdout, "then the OpenTelemetry settings in force. The serve flags are in meshnode --help.")
		return errHelped
	}
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
		case f.Name == "stream" && sources[f.Name] == "default":
			value = strings.Join(defaultStreams, ",") // what serve listens on without --stream
		case f.Name == "data-dir" && value == "":
			value = cfg.dataDir // defaulted from the node id
		case f.Name == "store" && value == "":
			value = "bolt:" + filepath.Join(cfg.dataDir, boltstore.FileName) // the embedded store
		case f.Name == "store":
			value = store.Redact(value) // never the password
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", f.Name, value, sources[f.Name])
	})
	if err := tw.Flush(); err != nil {
		return err
	}
	s, err := tracing.SettingsFromEnv()
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout)
	tw = tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "OPENTELEMETRY\tVALUE\tSOURCE")
	if !s.Enabled {
		why := s.Why
		if why == "" {
			why = "neither OTEL_TRACES_EXPORTER nor an OTLP endpoint is set"
		}
		fmt.Fprintf(tw, "traces\toff\t%s\n", why)
	} else {
		fmt.Fprintf(tw, "traces\tOTLP %s\t%s\n", s.Protocol, s.Why)
		fmt.Fprintf(tw, "endpoint\t%s\t%s\n", s.Endpoint, envSource("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"))
		fmt.Fprintf(tw, "sampler\t%s\t%s\n", s.Sampler, envSource("OTEL_TRACES_SAMPLER"))
	}
	fmt.Fprintf(tw, "metrics\t/metrics on the admin address (Prometheus)\t--admin\n")
	return tw.Flush()
}

// envSource names the first of vars that is set ("env NAME"), else "default".
func envSource(vars ...string) string {
	for _, v := range vars {
		if strings.TrimSpace(os.Getenv(v)) != "" {
			return "env " + v
		}
	}
	return "default"
}
