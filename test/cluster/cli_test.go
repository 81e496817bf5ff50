package cluster

import (
	"bytes"
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/meshnode/test/proc"
)

// meshnode runs the binary with args and the kit's environment plus env, bounded by
// proc.Wait, and returns its exit code, stdout and stderr.
func meshnode(t *testing.T, env []string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(proc.Binary(t), args...)
	cmd.Env = append(proc.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(proc.Wait):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("meshnode %v still ran after %v:\n%s%s", args, proc.Wait, out.String(), errb.String())
	}
	return cmd.ProcessState.ExitCode(), out.String(), errb.String()
}

// meshnode --help lists every subcommand the binary has (the command table of
// cmd/meshnode, read from its source, so a command added later is checked too), in
// the table's order and nothing else; help COMMAND and COMMAND --help print each
// one's help and exit 0; the serve flags' help has no garbled line.
func TestCLIHelpListsEveryCommand(t *testing.T) {
	commands := commandTable(t)
	// The table as it stood when this test was written: a command that leaves it
	// fails here, and so does a table this test no longer finds.
	for _, cmd := range []string{"serve", "members", "actors", "sessions", "relocate", "drain", "call", "watch", "bench", "config", "version", "help"} {
		if !slices.Contains(commands, cmd) {
			t.Errorf("the command table of cmd/meshnode has no %s: %v", cmd, commands)
		}
	}
	code, out, errs := meshnode(t, nil, "--help")
	if code != 0 {
		t.Fatalf("meshnode --help exited %d: %s", code, errs)
	}
	if listed := helpCommands(out); !slices.Equal(listed, commands) {
		t.Errorf("meshnode --help lists the commands %v, want the table's %v:\n%s", listed, commands, out)
	}
	// The flag package takes a back-quoted word of a usage for the flag's value name:
	// --drain-actors' help read "-drain-actors meshnode drain".
	if !strings.Contains(out, "  -drain-actors\n") || strings.Contains(out, "-drain-actors meshnode") {
		t.Errorf("the --drain-actors help is garbled:\n%s", out)
	}
	args := [][]string{{"help"}, {"-h"}, {"bench", "-h"}}
	for _, cmd := range commands {
		args = append(args, []string{"help", cmd}, []string{cmd, "--help"})
	}
	for _, args := range args {
		code, out, errs := meshnode(t, nil, args...)
		if code != 0 || out == "" {
			t.Errorf("meshnode %v: exit %d, stdout %q, stderr %q", args, code, out, errs)
		}
	}
	if code, _, errs := meshnode(t, nil, "bogus"); code != 2 || !strings.Contains(errs, `unknown command "bogus"`) {
		t.Errorf("meshnode bogus: exit %d, %s", code, errs)
	}
}

// commandTable returns the names of the binary's commands, in order: the first field
// of each entry of the slice that func commands in cmd/meshnode/commands.go returns
// (package main, which a test cannot import).
func commandTable(t *testing.T) []string {
	t.Helper()
	const file = "../../cmd/meshnode/commands.go"
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Name.Name != "commands" || fn.Recv != nil || fn.Body == nil {
			continue
		}
		for _, st := range fn.Body.List {
			ret, ok := st.(*ast.ReturnStmt)
			if !ok || len(ret.Results) != 1 {
				continue
			}
			table, ok := ret.Results[0].(*ast.CompositeLit)
			if !ok {
				continue
			}
			for _, e := range table.Elts {
				entry, ok := e.(*ast.CompositeLit)
				if !ok || len(entry.Elts) == 0 {
					t.Fatalf("%s: an entry of the command table is not a literal: %T", file, e)
				}
				lit, ok := entry.Elts[0].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					t.Fatalf("%s: a command's name is not a string literal: %T", file, entry.Elts[0])
				}
				name, err := strconv.Unquote(lit.Value)
				if err != nil {
					t.Fatal(err)
				}
				names = append(names, name)
			}
		}
	}
	if len(names) == 0 {
		t.Fatalf("%s: no command table found (func commands returning a slice literal)", file)
	}
	return names
}

// helpCommands returns the command names meshnode --help lists under "Commands:",
// in order: the first word of each line up to the blank line.
func helpCommands(help string) []string {
	_, rest, ok := strings.Cut(help, "\nCommands:\n")
	if !ok {
		return nil
	}
	var names []string
	for _, line := range strings.Split(rest, "\n") {
		if strings.TrimSpace(line) == "" {
			break
		}
		names = append(names, strings.Fields(line)[0])
	}
	return names
}

// An unknown MESHNODE_* variable or a misspelt key of the config file stops the start
// (and meshnode config), naming it and the setting it most likely meant; nothing is
// left listening.
func TestCLIUnknownSettingStopsTheStart(t *testing.T) {
	port := proc.FreePort(t)
	stream := fmt.Sprintf("tcp://127.0.0.1:%d", port)
	file := filepath.Join(t.TempDir(), "meshnode.toml")
	if err := os.WriteFile(file, []byte("node_id = \"a\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := []string{"--stream", stream, "--admin", "", "--mesh", "127.0.0.1:0", "--remote", "127.0.0.1:0"}
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"a misspelt variable", []string{"MESHNODE_NODEID=a"}, nil, "environment variable MESHNODE_NODEID is not a meshnode setting (did you mean MESHNODE_NODE_ID?)"},
		{"an unknown variable", []string{"MESHNODE_COLOUR=blue"}, nil, "environment variable MESHNODE_COLOUR is not a meshnode setting"},
		{"a misspelt key", nil, []string{"--config", file}, `config file ` + file + `: error parsing TOML config: key "node_id" is not a meshnode setting (did you mean node-id?)`},
		{"a misspelt key named by MESHNODE_CONFIG", []string{"MESHNODE_CONFIG=" + file}, nil, `key "node_id" is not a meshnode setting`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, cmd := range []string{"serve", "config"} {
				code, _, errs := meshnode(t, tc.env, append(append([]string{cmd}, base...), tc.args...)...)
				if code != 2 || !strings.Contains(errs, tc.want) {
					t.Errorf("meshnode %s: exit %d, stderr %q, want 2 and %q", cmd, code, errs, tc.want)
				}
			}
			if ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err != nil {
				t.Errorf("the stream port is taken after the refused start: %v", err)
			} else {
				_ = ln.Close()
			}
		})
	}
}

// Every command that talks to a node finds its admin address in MESHNODE_ADMIN, or in
// the admin key of the config file (--config, or MESHNODE_CONFIG), without --admin.
// Pointed where nothing listens, at something that is not a meshnode, or at a node of
// another fleet, a command says so, naming the address and where it came from.
func TestCLICommandsFindTheAdminAddress(t *testing.T) {
	fleet := startFleet(t, 2, "test")
	a := fleet[0]
	file := filepath.Join(t.TempDir(), "meshnode.yaml")
	if err := os.WriteFile(file, []byte("admin: "+a.Admin+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := dial(t, a.Endpoints["tcp"])
	ctx := testContext(t)
	if err := c.Request(ctx, "bind", map[string]string{"actor": "cli-room"}, nil); err != nil {
		t.Fatal(err)
	}
	for _, how := range []struct {
		name string
		env  []string
		args []string
	}{
		{"MESHNODE_ADMIN", []string{"MESHNODE_ADMIN=" + a.Admin}, nil},
		{"--config", nil, []string{"--config", file}},
		{"MESHNODE_CONFIG", []string{"MESHNODE_CONFIG=" + file}, nil},
	} {
		t.Run(how.name, func(t *testing.T) {
			for _, tc := range []struct {
				args []string
				want string
			}{
				{[]string{"members"}, "node-1"},
				{[]string{"actors"}, "OBJECT GENERATION"}, // the room may live on either node
				{[]string{"sessions"}, "cli-room@"},
			} {
				code, out, errs := meshnode(t, how.env, append(tc.args, how.args...)...)
				if code != 0 || !strings.Contains(out, tc.want) {
					t.Errorf("meshnode %v: exit %d, stdout %q, stderr %q", tc.args, code, out, errs)
				}
			}
			// relocate: where the room lives is where it goes back and forth.
			var to string
			for _, n := range fleet {
				if n.Actors() == 0 {
					to = n.ID
				}
			}
			code, out, errs := meshnode(t, how.env, append([]string{"relocate"}, append(how.args, "cli-room", to)...)...)
			if code != 0 || !strings.Contains(out, "cli-room moved to "+to) {
				t.Errorf("meshnode relocate: exit %d, %q %q", code, out, errs)
			}
		})
	}

	// Bad addresses: nothing listens, something else listens, another fleet.
	free := fmt.Sprintf("127.0.0.1:%d", proc.FreePort(t))
	code, _, errs := meshnode(t, []string{"MESHNODE_ADMIN=" + free}, "members")
	if code != 2 || !strings.Contains(errs, "no meshnode admin API answers at "+free+" (environment variable MESHNODE_ADMIN)") {
		t.Errorf("members where nothing listens: exit %d, %q", code, errs)
	}
	other := httpServer(t)
	code, _, errs = meshnode(t, nil, "actors", "--admin", other)
	if code != 2 || !strings.Contains(errs, other+" (flag --admin) answered GET /v1/actors with 404 Not Found: is it a meshnode admin address?") {
		t.Errorf("actors at a web server: exit %d, %q", code, errs)
	}
	code, _, errs = meshnode(t, nil, "relocate", "--admin", a.Admin, "cli-room", "node-of-another-fleet")
	if code != 2 || !strings.Contains(errs, "the mesh of "+a.Admin+" has node-0, node-1: is flag --admin the fleet you meant?") {
		t.Errorf("relocate to a node of another fleet: exit %d, %q", code, errs)
	}
	// drain, last: it stops node-1.
	code, out, errs := meshnode(t, []string{"MESHNODE_ADMIN=" + fleet[1].Admin}, "drain")
	if code != 0 || !strings.Contains(out, fleet[1].Admin+" stopped") {
		t.Errorf("meshnode drain: exit %d, %q %q", code, out, errs)
	}
	select {
	case <-fleet[1].Exited():
	case <-time.After(proc.Wait):
		t.Error("node-1 still runs after meshnode drain")
	}
}

// httpServer is a web server that is not a meshnode, on loopback; it stops when the
// test ends.
func httpServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.NotFoundHandler(), ReadHeaderTimeout: time.Second}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close(); <-done })
	return ln.Addr().String()
}

// testContext is bounded by proc.Wait and ends with the test.
func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), proc.Wait)
	t.Cleanup(cancel)
	return ctx
}
