package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// The commands that talk to a running node (members, actors, sessions, relocate,
// drain) find its admin address as serve finds its own: --admin, else MESHNODE_ADMIN,
// else the admin key of the configuration file (--config, else MESHNODE_CONFIG), else
// the default. So a shell or a host set up for one node needs no flag. A wildcard host
// (0.0.0.0, ::) is dialled on loopback.

// adminTarget is where a command's admin requests go, and where that came from.
type adminTarget struct {
	addr  string // host:port to dial
	where string // "flag --admin", "environment variable MESHNODE_ADMIN", ...
}

// adminFlags declares --admin and --config on fs; resolve, called after fs.Parse,
// returns the target.
func adminFlags(fs *flag.FlagSet) (resolve func() (adminTarget, error)) {
	admin := fs.String("admin", "", "admin address host:port of a running meshnode (default: MESHNODE_ADMIN, else the config file's admin, else "+defaultAdmin+")")
	config := fs.String("config", "", "configuration file whose admin key names the admin address (default: MESHNODE_CONFIG)")
	return func() (adminTarget, error) { return resolveAdmin(*admin, *config) }
}

// resolveAdmin finds the admin address: flag, environment, configuration file (read
// and checked as serve reads it: an unknown key or MESHNODE_* variable is an error),
// default.
func resolveAdmin(flagValue, configPath string) (adminTarget, error) {
	fs := flag.NewFlagSet("meshnode", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg := serveConfig{}
	defineFlags(fs, &cfg, &rawFlags{})
	var args []string
	if configPath != "" {
		args = []string{"--config", configPath}
	}
	sources, err := parseSources(fs, args)
	if err != nil {
		return adminTarget{}, err
	}
	t := adminTarget{addr: cfg.admin, where: whereFrom(sources, "admin")}
	if flagValue != "" {
		t = adminTarget{addr: flagValue, where: "flag --admin"}
	}
	if t.addr == "" {
		return adminTarget{}, fmt.Errorf("%s: the admin address is empty (that node serves no admin API)", t.where)
	}
	host, port, err := net.SplitHostPort(t.addr)
	if err != nil {
		return adminTarget{}, fmt.Errorf("%s: %w", t.where, err)
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		t.addr = net.JoinHostPort("127.0.0.1", port)
	}
	return t, nil
}

// whereFrom names where a serve setting came from, for messages: "flag --X",
// "environment variable MESHNODE_X", "config file PATH key X", or "the default".
func whereFrom(sources map[string]string, name string) string {
	switch src := sources[name]; {
	case strings.HasPrefix(src, "env "):
		return "environment variable " + strings.TrimPrefix(src, "env ")
	case strings.HasPrefix(src, "file "):
		return "config file " + strings.TrimPrefix(src, "file ") + " key " + name
	case src == "flag":
		return "flag --" + name
	}
	return "the default --" + name
}

// adminClient bounds every admin request of the commands.
var adminClient = &http.Client{Timeout: 30 * time.Second}

// call sends one admin request and decodes its JSON answer into out. Its errors say
// which address was asked and where that address came from: nothing listening there,
// something that is not a meshnode admin API, or the node's own error.
func (t adminTarget) call(ctx context.Context, method, path string, out any) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, "http://"+t.addr+path, nil)
	if err != nil {
		return fmt.Errorf("%s %q: %w", t.where, t.addr, err)
	}
	resp, err := adminClient.Do(req)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			return fmt.Errorf("%w at %s (%s): %w", errNoAdminAPI, t.addr, t.where, op.Err)
		}
		return fmt.Errorf("%s %s at %s (%s): %w", method, path, t.addr, t.where, err)
	}
	defer resp.Body.Close()
	body := io.LimitReader(resp.Body, 16<<20)
	isJSON := strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json")
	if resp.StatusCode/100 != 2 {
		var e errorJSON
		if isJSON && json.NewDecoder(body).Decode(&e) == nil && e.Error != "" {
			return &adminError{code: e.Error, message: e.Message, target: t}
		}
		return fmt.Errorf("%s (%s) answered %s %s with %s: is it a meshnode admin address?", t.addr, t.where, method, path, resp.Status)
	}
	if out == nil {
		return nil
	}
	if !isJSON {
		return fmt.Errorf("%s (%s) answered %s %s with %s, not JSON: is it a meshnode admin address?", t.addr, t.where, method, path, resp.Header.Get("Content-Type"))
	}
	if err := json.NewDecoder(body).Decode(out); err != nil {
		return fmt.Errorf("%s (%s) answered %s %s: %w", t.addr, t.where, method, path, err)
	}
	return nil
}

// errNoAdminAPI: nothing accepted a connection at the admin address.
var errNoAdminAPI = errors.New("no meshnode admin API answers")

// adminError is an error the node answered (docs/admin.md: a fault code and a
// message).
type adminError struct {
	code, message string
	target        adminTarget
}

func (e *adminError) Error() string {
	return fmt.Sprintf("%s answered %s: %s", e.target.addr, e.code, e.message)
}
