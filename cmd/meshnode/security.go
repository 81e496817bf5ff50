package main

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/meshnode/meshnode"
	"github.com/meshnode/meshnode/mesh"
	"github.com/meshnode/meshnode/meshtls"
)

// The binary's security settings (docs/security.md): mutual TLS between nodes
// (--mesh-tls-*), encrypted gossip (--gossip-key, --gossip-key-file, --cluster-label),
// the admin API's credentials (--admin-token-file, --admin-tls), and the explicit
// leave to serve beyond loopback without them (--insecure-mesh).

func defineSecurityFlags(fs *flag.FlagSet, cfg *serveConfig, raw *rawFlags) {
	fs.StringVar(&cfg.meshTLSCert, "mesh-tls-cert", "", "PEM certificate of this node, signed by the fleet CA for server and client authentication, with a DNS SAN equal to --node-id; with --mesh-tls-key and --mesh-tls-ca the record transport between nodes is mutual TLS (reloaded on change and SIGHUP)")
	fs.StringVar(&cfg.meshTLSKey, "mesh-tls-key", "", "PEM private key of --mesh-tls-cert")
	fs.StringVar(&cfg.meshTLSCA, "mesh-tls-ca", "", "PEM bundle of the fleet CA: every peer's certificate must chain to it")
	fs.Var(&raw.gossipKeys, "gossip-key", "gossip encryption key, base64 of 16, 24 or 32 bytes (openssl rand -base64 32), repeatable: the first is the primary; prefer --gossip-key-file, which rotates without a restart")
	fs.StringVar(&cfg.gossipKeyFile, "gossip-key-file", "", "file of gossip encryption keys, one base64 key per line, the first the primary; re-read on change and SIGHUP (rotation: add, make primary, remove)")
	fs.StringVar(&cfg.clusterLabel, "cluster-label", "", "label on every gossip message: a node refuses another label, so two fleets on one network never merge")
	fs.BoolVar(&cfg.insecureMesh, "insecure-mesh", false, "allow --mesh, --remote and --admin on a non-loopback address without mesh TLS, gossip encryption and admin credentials (logs a warning; anyone who reaches the ports can join, forge records, drain the node)")
	fs.StringVar(&cfg.adminTokenFile, "admin-token-file", "", "file of admin bearer tokens, one per line: every admin endpoint but /healthz, /readyz and /metrics requires one (re-read on change and SIGHUP)")
	fs.BoolVar(&cfg.adminTLS, "admin-tls", false, "serve the admin API over TLS with the mesh certificate too (needs --mesh-tls-*): credentials are taken over TLS only, and a client certificate of the fleet CA authenticates; probes and scrapers may stay on plain HTTP")
}

// checkSecurity checks the security settings as the node will use them, so that a bad
// file or key fails the start naming where it was set; gossipKeys are the raw
// --gossip-key values.
func checkSecurity(cfg *serveConfig, gossipKeys []string, meshHost string, where func(string) string) error {
	set := 0
	for _, f := range []string{cfg.meshTLSCert, cfg.meshTLSKey, cfg.meshTLSCA} {
		if f != "" {
			set++
		}
	}
	if set != 0 && set != 3 {
		for _, name := range []string{"mesh-tls-cert", "mesh-tls-key", "mesh-tls-ca"} {
			if map[string]string{"mesh-tls-cert": cfg.meshTLSCert, "mesh-tls-key": cfg.meshTLSKey, "mesh-tls-ca": cfg.meshTLSCA}[name] == "" {
				return fmt.Errorf("%s: missing: --mesh-tls-cert, --mesh-tls-key and --mesh-tls-ca go together", where(name))
			}
		}
	}
	if set == 3 {
		if cfg.nodeID == "" {
			return fmt.Errorf("%s: required with --mesh-tls-cert: the node id is the DNS SAN its certificate names", where("node-id"))
		}
		if _, err := meshtls.Load(meshtls.Files{Cert: cfg.meshTLSCert, Key: cfg.meshTLSKey, CA: cfg.meshTLSCA}, cfg.nodeID); err != nil {
			var fe *meshtls.FileError
			if errors.As(err, &fe) {
				name := map[meshtls.Role]string{meshtls.RoleCert: "mesh-tls-cert", meshtls.RoleKey: "mesh-tls-key", meshtls.RoleCA: "mesh-tls-ca"}[fe.Role]
				return fmt.Errorf("%s: %w", where(name), err)
			}
			return fmt.Errorf("%s and %s: %w", where("node-id"), where("mesh-tls-cert"), err)
		}
	}
	for i, k := range gossipKeys {
		key, err := mesh.ParseGossipKey(k)
		if err != nil {
			return fmt.Errorf("%s (value %d of %d): %w", where("gossip-key"), i+1, len(gossipKeys), err)
		}
		cfg.gossipKeys = append(cfg.gossipKeys, key)
	}
	if len(gossipKeys) > 0 && cfg.gossipKeyFile != "" {
		return fmt.Errorf("%s and %s: give the gossip keys one way (the file rotates without a restart)", where("gossip-key"), where("gossip-key-file"))
	}
	if cfg.gossipKeyFile != "" {
		if _, err := mesh.ReadGossipKeyFile(cfg.gossipKeyFile); err != nil {
			return fmt.Errorf("%s: %w", where("gossip-key-file"), err)
		}
	}
	if len(cfg.clusterLabel) > 255 {
		return fmt.Errorf("%s: %d bytes; at most 255", where("cluster-label"), len(cfg.clusterLabel))
	}
	if cfg.adminTLS && set != 3 {
		return fmt.Errorf("%s: needs --mesh-tls-cert, --mesh-tls-key and --mesh-tls-ca (the admin API serves the node's certificate)", where("admin-tls"))
	}
	if cfg.adminTokenFile != "" {
		if _, err := loadTokens(cfg.adminTokenFile); err != nil {
			return fmt.Errorf("%s: %w", where("admin-token-file"), err)
		}
	}
	if cfg.insecureMesh {
		return nil
	}
	if !meshnode.IsLoopbackHost(meshHost) {
		var missing []string
		if set != 3 {
			missing = append(missing, "--mesh-tls-cert, --mesh-tls-key and --mesh-tls-ca")
		}
		if len(cfg.gossipKeys) == 0 && cfg.gossipKeyFile == "" {
			missing = append(missing, "--gossip-key-file (or --gossip-key)")
		}
		if len(missing) > 0 {
			return fmt.Errorf("%s: %s is not a loopback address, and a node serving beyond this machine needs %s; or --insecure-mesh to run without (anyone who reaches the ports could join the mesh and forge records)",
				where("mesh"), meshHost, strings.Join(missing, " and "))
		}
	}
	if cfg.admin != "" {
		host, _, _ := net.SplitHostPort(cfg.admin)
		if !meshnode.IsLoopbackHost(host) && cfg.adminTokenFile == "" && !cfg.adminTLS {
			return fmt.Errorf("%s: %s is not a loopback address, and an admin API serving beyond this machine needs --admin-token-file or --admin-tls; or --insecure-mesh to run without (anyone who reaches it could drain the node, move Actors, read sessions)",
				where("admin"), host)
		}
	}
	return nil
}

// adminAuthOn reports whether the admin API asks for credentials.
func (c serveConfig) adminAuthOn() bool { return c.adminTokenFile != "" || c.adminTLS }

// tokens are the admin bearer tokens of --admin-token-file, kept as SHA-256 hashes and
// compared in constant time (hashing first: equal lengths, whatever was sent).
type tokens struct {
	path string
	mu   sync.RWMutex
	sums [][sha256.Size]byte
	own  string // the first token: what this node sends to other members
	file [sha256.Size]byte
}

// loadTokens reads a token file: one token per line, blank lines and lines starting
// with # ignored; it needs one.
func loadTokens(path string) (*tokens, error) {
	t := &tokens{path: path}
	if _, err := t.reload(); err != nil {
		return nil, err
	}
	return t, nil
}

// reload reads the file again; changed is false when its bytes did not change. On an
// error the tokens in use stay.
func (t *tokens) reload() (changed bool, err error) {
	b, err := os.ReadFile(t.path)
	if err != nil {
		return false, err
	}
	sum := sha256.Sum256(b)
	t.mu.RLock()
	same := sum == t.file && t.sums != nil
	t.mu.RUnlock()
	if same {
		return false, nil
	}
	var sums [][sha256.Size]byte
	own := ""
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if own == "" {
			own = line
		}
		sums = append(sums, sha256.Sum256([]byte(line)))
	}
	if len(sums) == 0 {
		return false, fmt.Errorf("%s holds no token", t.path)
	}
	t.mu.Lock()
	t.sums, t.own, t.file = sums, own, sum
	t.mu.Unlock()
	return true, nil
}

// match reports whether token is one of the file's, in time that does not depend on
// which (or how much of one) matched.
func (t *tokens) match(token string) bool {
	h := sha256.Sum256([]byte(token))
	t.mu.RLock()
	defer t.mu.RUnlock()
	ok := 0
	for _, s := range t.sums {
		ok |= subtle.ConstantTimeCompare(h[:], s[:])
	}
	return ok == 1
}

// ownToken is the token this node sends to other members' admin APIs.
func (t *tokens) ownToken() string {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.own
}

// count returns how many tokens the file holds.
func (t *tokens) count() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.sums)
}

// protection is one row of what protects a node, for `meshnode config`, the start and
// the dashboard.
type protection struct {
	Name   string `json:"name"`
	On     bool   `json:"on"`
	Detail string `json:"detail"`
}

// protections describes cfg's protections (from its files, as serve would load them).
func protections(cfg serveConfig) []protection {
	var out []protection
	p := protection{Name: "mesh TLS"}
	if cfg.meshTLSCert != "" {
		p.On = true
		p.Detail = "certificate " + cfg.meshTLSCert + ", fleet CA " + cfg.meshTLSCA
		if c, err := meshtls.Load(meshtls.Files{Cert: cfg.meshTLSCert, Key: cfg.meshTLSKey, CA: cfg.meshTLSCA}, ""); err == nil {
			st := c.Status()
			p.Detail = fmt.Sprintf("names %s, expires %s; %s", strings.Join(st.Names, ","), st.NotAfter.Format(time.RFC3339), p.Detail)
		}
	} else {
		p.Detail = "off: records between nodes in the clear, any process that reaches --remote can send them"
	}
	out = append(out, p)
	g := protection{Name: "gossip encryption"}
	switch {
	case cfg.gossipKeyFile != "":
		g.On = true
		g.Detail = "keys from " + cfg.gossipKeyFile
		if keys, err := mesh.ReadGossipKeyFile(cfg.gossipKeyFile); err == nil {
			g.Detail = fmt.Sprintf("%s from %s, primary %s", plural(len(keys), "key"), cfg.gossipKeyFile, mesh.KeyID(keys[0]))
		}
	case len(cfg.gossipKeys) > 0:
		g.On = true
		g.Detail = fmt.Sprintf("%s from --gossip-key, primary %s", plural(len(cfg.gossipKeys), "key"), mesh.KeyID(cfg.gossipKeys[0]))
	default:
		g.Detail = "off: any process that reaches --mesh can join"
	}
	if cfg.clusterLabel != "" {
		g.Detail += fmt.Sprintf("; cluster label %q", cfg.clusterLabel)
	}
	out = append(out, g)
	a := protection{Name: "admin authentication", On: cfg.adminAuthOn()}
	var how []string
	if cfg.adminTokenFile != "" {
		how = append(how, "bearer token from "+cfg.adminTokenFile)
	}
	if cfg.adminTLS {
		how = append(how, "client certificate of the fleet CA; TLS required for credentials")
	}
	if len(how) > 0 {
		a.Detail = strings.Join(how, " or ")
	} else {
		a.Detail = "off: the admin API (drain, relocate, sessions) answers anyone who reaches it"
	}
	out = append(out, a)
	host, _, _ := net.SplitHostPort(cfg.meshAddr)
	adminHost, _, _ := net.SplitHostPort(cfg.admin)
	var open []string
	if !meshnode.IsLoopbackHost(host) {
		if !p.On {
			open = append(open, "mesh TLS")
		}
		if !g.On {
			open = append(open, "gossip encryption")
		}
	}
	if cfg.admin != "" && !meshnode.IsLoopbackHost(adminHost) && !a.On {
		open = append(open, "admin authentication")
	}
	e := protection{Name: "exposure", On: len(open) == 0}
	switch {
	case len(open) > 0:
		e.Detail = "beyond loopback without " + strings.Join(open, ", ") + " (--insecure-mesh)"
	case meshnode.IsLoopbackHost(host) && (cfg.admin == "" || meshnode.IsLoopbackHost(adminHost)):
		e.Detail = "loopback only"
	default:
		e.Detail = "beyond loopback, protected"
	}
	out = append(out, e)
	return out
}

// adminSecurity is what the serving binary holds for its admin API: the credential
// check, the TLS configuration (with --admin-tls), and how it reaches other members'
// admin APIs with its own credentials.
type adminSecurity struct {
	auth  *adminAuth
	certs *meshtls.Certs // the node's, for --admin-tls and for peers; nil without mesh TLS
	tls   bool           // --admin-tls (this node's, and by assumption every member's)
}

func newAdminSecurity(cfg serveConfig, node *meshnode.Node, log *slog.Logger, mp metric.MeterProvider) (*adminSecurity, error) {
	auth, err := newAdminAuth(cfg, log, mp)
	if err != nil {
		return nil, fmt.Errorf("flag --admin-token-file: %w", err)
	}
	return &adminSecurity{auth: auth, certs: node.MeshTLS(), tls: cfg.adminTLS}, nil
}

// listener wraps the admin listener: TLS and plain HTTP on one port with --admin-tls.
func (s *adminSecurity) listener(ln net.Listener) net.Listener {
	if !s.tls {
		return ln
	}
	return newTLSSniffer(ln, adminTLSConfig(s.certs), func(remote string, err error) {
		s.auth.count("bad_certificate", remote, "TLS handshake: "+mesh.TLSRefusalReason(err)+": "+err.Error())
	})
}

// peerRequest makes a request to another member's admin API (the fleet figures) with
// this node's own credentials: its client certificate over TLS (checked to be the
// member's, rid) with --admin-tls, and its token when it has one.
func (s *adminSecurity) peerRequest(ctx context.Context, admin, rid, path string) (*http.Request, *http.Client, error) {
	scheme := "http://"
	client := plainPeerClient
	if s != nil && s.tls {
		scheme = "https://"
		cfg := s.certs.ClientTLS(rid)
		cfg.NextProtos = []string{"http/1.1"}
		// One transport per request: keep-alives are off anyway (nothing outlives a
		// request), and the name checked is the member's.
		client = &http.Client{Timeout: plainPeerClient.Timeout, Transport: &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true}}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+admin+path, nil)
	if err != nil {
		return nil, nil, err
	}
	if s != nil && s.auth.tokens != nil {
		req.Header.Set("Authorization", "Bearer "+s.auth.tokens.ownToken())
	}
	return req, client, nil
}

// plainPeerClient asks other members over plain HTTP. Per-request contexts bound each
// call; its timeout bounds a caller that forgets. No idle connections: none outlives a
// request (nor the node), and one request a second per member is not worth keeping.
var plainPeerClient = &http.Client{Timeout: 2 * fleetPeerTimeout, Transport: &http.Transport{DisableKeepAlives: true}}

// readiness returns why the node's security makes it not ready (its certificate
// expired: peers refuse it), and warnings /readyz shows while it is ready (the
// certificate expires soon, a reload failed).
func securityReadiness(node *meshnode.Node, now time.Time) (notReady string, warnings []string) {
	st := node.Security().Mesh
	if t := st.TLS; t != nil {
		left, soon, expired := t.Expiry(now)
		switch {
		case expired:
			return fmt.Sprintf("mesh TLS certificate %s expired at %s: peers refuse it; install a renewed one (docs/security.md)", t.Files.Cert, t.NotAfter.Format(time.RFC3339)), nil
		case soon:
			warnings = append(warnings, fmt.Sprintf("mesh TLS certificate %s expires in %s (at %s): renew it", t.Files.Cert, left.Round(time.Minute), t.NotAfter.Format(time.RFC3339)))
		}
		if t.ReloadError != "" {
			warnings = append(warnings, "mesh TLS certificate reload failed (the previous one stays in use): "+t.ReloadError)
		}
	}
	if st.Gossip.ReloadError != "" {
		warnings = append(warnings, "gossip key file reload failed (the keys in use stay): "+st.Gossip.ReloadError)
	}
	return "", warnings
}

// reloadLoop re-reads the node's certificates and gossip keys (Node.Reload) and the
// admin token file on SIGHUP, and the token file every DefaultReloadInterval (the node
// polls its own files). It stops when stop is closed; the returned function waits.
func reloadLoop(node *meshnode.Node, sec *adminSecurity, log *slog.Logger, hup <-chan os.Signal, stop <-chan struct{}) (wait func()) {
	var wg sync.WaitGroup
	reloadTokens := func() {
		if t := sec.auth.tokens; t != nil {
			if changed, err := t.reload(); err != nil {
				sec.auth.limiter.Log(log, slog.LevelWarn, "tokens|"+err.Error(), "admin: token file reload failed; the tokens in use stay", "err", err)
			} else if changed {
				log.Info("admin: token file reloaded", "file", t.path, "tokens", t.count())
			}
		}
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(meshnode.DefaultReloadInterval)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-hup:
				log.Info("SIGHUP: reloading certificates, gossip keys and admin tokens")
				if err := node.Reload(); err != nil {
					log.Warn("reload", "err", err)
				}
				reloadTokens()
			case <-tick.C:
				reloadTokens()
			}
		}
	}()
	return wg.Wait
}

// securityJSON is the node's protections in GET /v1/node (the dashboard shows them).
type securityJSON struct {
	MeshTLS *meshtls.Status      `json:"meshTLS,omitempty"`
	Expires string               `json:"expires,omitempty"` // "soon" or "expired" when so
	Gossip  mesh.GossipStatus    `json:"gossip"`
	Pending []mesh.PendingMember `json:"pending,omitempty"`
	Admin   struct {
		Token bool `json:"token"`
		TLS   bool `json:"tls"`
	} `json:"admin"`
	InsecureMesh bool             `json:"insecureMesh"`
	Missing      []string         `json:"missing,omitempty"`
	Refused      map[string]int64 `json:"refused"`
}

func securityFigures(node *meshnode.Node, sec *adminSecurity) *securityJSON {
	st := node.Security()
	out := &securityJSON{MeshTLS: st.Mesh.TLS, Gossip: st.Mesh.Gossip, Pending: st.Mesh.Pending, InsecureMesh: st.InsecureMesh,
		Missing: st.Missing, Refused: st.Mesh.Refused}
	if t := st.Mesh.TLS; t != nil {
		if _, soon, expired := t.Expiry(time.Now()); expired {
			out.Expires = "expired"
		} else if soon {
			out.Expires = "soon"
		}
	}
	if sec != nil {
		out.Admin.Token, out.Admin.TLS = sec.auth.tokens != nil, sec.tls
		for k, v := range sec.auth.refused() {
			out.Refused["admin."+k] = v
		}
	}
	return out
}

// printProtections says at start what protects the node, and warns about what is off
// on an address beyond loopback (--insecure-mesh let it start).
func printProtections(stdout io.Writer, log *slog.Logger, cfg serveConfig) {
	var parts []string
	for _, p := range protections(cfg) {
		state := "off"
		if p.On {
			state = "on"
		}
		if p.Name == "exposure" {
			parts = append(parts, p.Detail)
			continue
		}
		parts = append(parts, p.Name+" "+state)
	}
	fmt.Fprintf(stdout, "meshnode: protections: %s\n", strings.Join(parts, ", "))
	if cfg.insecureMesh && cfg.admin != "" && !cfg.adminAuthOn() {
		if host, _, _ := net.SplitHostPort(cfg.admin); !meshnode.IsLoopbackHost(host) {
			log.Warn("admin: INSECURE ADMIN API: serving beyond loopback without credentials (--insecure-mesh); anyone who reaches it can drain the node, move Actors and read sessions", "admin", cfg.admin)
		}
	}
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
