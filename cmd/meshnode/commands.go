package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// command is one subcommand of the binary.
type command struct {
	name, args, what string
	run              func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

// commands are the binary's subcommands, in the order meshnode --help lists them.
func commands() []command {
	return []command{
		{"serve", "[flags]", "run a node until SIGINT or SIGTERM, then drain (the default command)", runServe},
		{"members", "[--admin ADDR]", "the mesh members as a node sees them, with their versions", runMembers},
		{"actors", "[--admin ADDR]", "the node's Actors", runActors},
		{"sessions", "[--admin ADDR] [--limit N]", "session counts, then the node's sessions with their bindings", runSessions},
		{"relocate", "[--admin ADDR] ACTOR-ID NODE-RID", "move an Actor (with its state, sessions kept) to another node", runRelocate},
		{"drain", "[--admin ADDR] [--wait D]", "move the node's Actors away, drain its sessions, leave; wait until it stopped", runDrain},
		{"call", "[--stream URL] [--attach SESSION] SERVICE.MEMBER JSON", "one service call (SERVICE.MEMBER splits at the last dot); its JSON result on stdout", runCall},
		{"watch", "[--stream URL] [--attach SESSION] [--count N] [--timeout D] SERVICE.MEMBER", "one JSON line per value of a state member ({\"seq\":S,\"value\":V}, the hydrated value first) or per event ({\"event\":E}); exit 0 after N lines or at SIGINT", runWatch},
		{"bench", "[--stream URL] [--sessions N] [--duration D] [--rate R] [--bind]", "load a node over STREAM and print requests/s, latency percentiles and errors", runBench},
		{"config", "[serve flags]", "the configuration serve would run with, where each value came from, and the OpenTelemetry settings", runConfig},
		{"version", "", "the build and the wire versions this binary speaks", runVersion},
		{"help", "[COMMAND]", "this help, or a command's", nil},
	}
}

// run runs the command args name (serve when the first argument is a flag or there is
// none).
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	err := dispatch(ctx, args, stdout, stderr)
	if errors.Is(err, errHelped) {
		return nil
	}
	return err
}

func dispatch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") && !isHelp(args[0]) {
		return runServe(ctx, args, stdout, stderr)
	}
	name := args[0]
	if isHelp(name) || name == "help" {
		if name == "help" && len(args) > 1 && !isHelp(args[1]) {
			return dispatch(ctx, []string{args[1], "--help"}, stdout, stderr)
		}
		usage(stdout)
		return nil
	}
	for _, c := range commands() {
		if c.name == name && c.run != nil {
			return c.run(ctx, args[1:], stdout, stderr)
		}
	}
	usage(stderr)
	return fmt.Errorf("unknown command %q: see the list above", name)
}

func isHelp(a string) bool { return a == "-h" || a == "--help" || a == "-help" }

// usage writes the binary's help: its commands, then the serve flags.
func usage(w io.Writer) {
	fmt.Fprintln(w, "meshnode: a node of a meshnode fleet, and the commands that operate one.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Usage: meshnode [COMMAND] [ARGS]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Commands:")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, c := range commands() {
		fmt.Fprintf(tw, "  %s %s\t%s\n", c.name, c.args, c.what)
	}
	_ = tw.Flush()
	fmt.Fprintln(w)
	fmt.Fprintln(w, "The commands that talk to a node take its admin address from --admin, else")
	fmt.Fprintln(w, "MESHNODE_ADMIN, else the admin key of the config file (--config, else")
	fmt.Fprintln(w, "MESHNODE_CONFIG), else "+defaultAdmin+"; and the credentials it asks for from --token-file")
	fmt.Fprintln(w, "(else MESHNODE_ADMIN_TOKEN, else the node's --admin-token-file) and, over TLS, --ca-file,")
	fmt.Fprintln(w, "--cert-file, --key-file (docs/security.md). meshnode COMMAND --help shows a command's flags.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Serve flags (also MESHNODE_<NAME> variables and --config file keys; an unknown")
	fmt.Fprintln(w, "one stops the start):")
	fs := flag.NewFlagSet("meshnode", flag.ContinueOnError)
	defineFlags(fs, &serveConfig{}, &rawFlags{})
	fs.SetOutput(w)
	fs.PrintDefaults()
}

// parseCommandFlags parses a command's flags. --help prints the command's usage on
// stdout: the caller then returns nil (errHelped) and the binary exits 0; a bad flag is
// errUsage (exit 2) after the flag package said what was wrong.
func parseCommandFlags(fs *flag.FlagSet, args []string, stdout io.Writer) error {
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		fs.SetOutput(stdout)
		fs.Usage()
		return errHelped
	}
	if err != nil {
		return errUsage
	}
	return nil
}

// errHelped: a command printed its help as asked; the binary exits 0.
var errHelped = errors.New("help printed")

// commandUsage gives fs a usage that shows the command's synopsis and its flags.
func commandUsage(fs *flag.FlagSet, name string) {
	for _, c := range commands() {
		if c.name != name {
			continue
		}
		fs.Usage = func() {
			w := fs.Output()
			fmt.Fprintf(w, "Usage: %s\n\n%s.\n\nFlags:\n", strings.TrimSpace("meshnode "+c.name+" "+c.args), upperFirst(c.what))
			fs.PrintDefaults()
		}
	}
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// runServe is `meshnode serve [flags]`.
func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && isHelp(args[0]) {
		usage(stdout)
		return errHelped
	}
	cfg, err := parseServeFlags(args, stderr)
	if err != nil {
		return err
	}
	return serve(ctx, cfg, stdout, stderr)
}
