package meshnode

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/meshnode/meshnode/internal/ratelog"
	"github.com/meshnode/meshnode/mesh"
	"github.com/meshnode/meshnode/meshtls"
)

// DefaultReloadInterval is how often a node checks its certificate and gossip key
// files for changes (Config.ReloadInterval). Reading four small files is cheap; a
// renewed certificate is in use within this long.
const DefaultReloadInterval = 5 * time.Second

// Security is what protects a node now (docs/security.md).
type Security struct {
	// Mesh is the mesh's part: the certificate, the gossip encryption, the refusals.
	Mesh mesh.SecurityStatus `json:"mesh"`
	// InsecureMesh: the node was allowed to serve a non-loopback address without every
	// protection (Config.InsecureMesh).
	InsecureMesh bool `json:"insecureMesh"`
	// Missing names the protections a node serving beyond loopback lacks (empty when
	// it binds loopback only, or has them all).
	Missing []string `json:"missing,omitempty"`
}

// IsLoopbackHost reports whether host only reaches this machine: "localhost" or a
// loopback IP (127.0.0.0/8, ::1). The empty host is the default bind host, 127.0.0.1.
// A wildcard or any other name or address is not.
func IsLoopbackHost(host string) bool {
	if host == "" || strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// meshTLS reports whether mesh TLS is configured; gossipKeys whether gossip is
// encrypted.
func (c *Config) meshTLS() bool    { return c.MeshTLSCertFile != "" }
func (c *Config) gossipKeys() bool { return len(c.GossipKeys) > 0 || c.GossipKeyFile != "" }

// missingProtections names what a node that serves beyond loopback lacks.
func (c *Config) missingProtections() []string {
	if IsLoopbackHost(c.BindHost) {
		return nil
	}
	var out []string
	if !c.meshTLS() {
		out = append(out, "mesh TLS (MeshTLSCertFile, MeshTLSKeyFile, MeshTLSCAFile)")
	}
	if !c.gossipKeys() {
		out = append(out, "gossip encryption (GossipKeys or GossipKeyFile)")
	}
	return out
}

func (c *Config) validateSecurity() error {
	set := 0
	for _, f := range []string{c.MeshTLSCertFile, c.MeshTLSKeyFile, c.MeshTLSCAFile} {
		if f != "" {
			set++
		}
	}
	if set != 0 && set != 3 {
		return configError("MeshTLSCertFile", "MeshTLSCertFile, MeshTLSKeyFile and MeshTLSCAFile go together")
	}
	if c.meshTLS() && c.NodeID == "" {
		return configError("NodeID", "required with mesh TLS: it is the DNS SAN the node's certificate names")
	}
	if len(c.GossipKeys) > 0 && c.GossipKeyFile != "" {
		return configError("GossipKeyFile", "GossipKeys are set too: give the gossip keys one way")
	}
	if len(c.ClusterLabel) > 255 {
		return configError("ClusterLabel", "%d bytes; at most 255", len(c.ClusterLabel))
	}
	if missing := c.missingProtections(); len(missing) > 0 && !c.InsecureMesh {
		return configError("BindHost", "%s is not a loopback address, and a node that serves beyond this machine needs %s (or InsecureMesh to run without: anyone who reaches the ports could join the mesh and forge records)",
			c.BindHost, strings.Join(missing, " and "))
	}
	return nil
}

// loadMeshTLS loads the node's certificates; errors name the Config field at fault.
func loadMeshTLS(cfg Config) (*meshtls.Certs, error) {
	if !cfg.meshTLS() {
		return nil, nil
	}
	certs, err := meshtls.Load(meshtls.Files{Cert: cfg.MeshTLSCertFile, Key: cfg.MeshTLSKeyFile, CA: cfg.MeshTLSCAFile}, cfg.NodeID)
	if err != nil {
		field := "NodeID"
		var fe *meshtls.FileError
		if errors.As(err, &fe) {
			field = map[meshtls.Role]string{meshtls.RoleCert: "MeshTLSCertFile", meshtls.RoleKey: "MeshTLSKeyFile", meshtls.RoleCA: "MeshTLSCAFile"}[fe.Role]
		}
		return nil, fmt.Errorf("%w: Config.%s: %w", ErrConfig, field, err)
	}
	return certs, nil
}

// warnInsecure logs, at start, what a node serving beyond loopback without every
// protection lacks (it was allowed by InsecureMesh).
func (n *Node) warnInsecure() {
	if missing := n.cfg.missingProtections(); len(missing) > 0 {
		n.log.Warn("meshnode: INSECURE MESH: serving beyond loopback without "+strings.Join(missing, " and ")+
			"; anyone who reaches the mesh ports can join the mesh and forge records (docs/security.md)",
			"bind", n.cfg.BindHost, "insecure_mesh", true)
	}
}

// reloader re-reads the node's certificate and gossip key files, every interval and
// when asked (Node.Reload).
type reloader struct {
	n       *Node
	stop    chan struct{}
	wg      sync.WaitGroup
	mu      sync.Mutex // one reload at a time
	limiter ratelog.Limiter
}

func (n *Node) startReloader() {
	if n.certs == nil && n.cfg.GossipKeyFile == "" {
		return
	}
	r := &reloader{n: n, stop: make(chan struct{})}
	n.reload = r
	interval := n.cfg.ReloadInterval
	if interval == 0 {
		interval = DefaultReloadInterval
	}
	if interval < 0 {
		return
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-r.stop:
				return
			case <-t.C:
				_ = r.run()
			}
		}
	}()
}

// stopReloader stops the polling; it is the first thing a stopping node does.
func (n *Node) stopReloader() {
	if r := n.reload; r != nil {
		close(r.stop)
		r.wg.Wait()
	}
}

// run reloads what changed, logs it, and returns the failures. A failure leaves the
// material in use as it was; it is logged once per interval and cause (a certificate
// and its key replaced one after the other fail once in between).
func (r *reloader) run() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var errs []error
	if c := r.n.certs; c != nil {
		changed, err := c.Reload()
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("mesh TLS: %w", err))
			r.limiter.Log(r.n.log, slog.LevelWarn, "tls|"+err.Error(), "meshnode: mesh TLS certificate reload failed; the previous certificate stays in use", "err", err)
		case changed:
			st := c.Status()
			r.n.log.Info("meshnode: mesh TLS certificate reloaded", "serial", st.Serial, "names", strings.Join(st.Names, ","), "not_after", st.NotAfter)
		}
	}
	if _, err := r.n.mesh.ReloadGossipKeys(); err != nil {
		errs = append(errs, fmt.Errorf("gossip keys: %w", err))
		r.limiter.Log(r.n.log, slog.LevelWarn, "gossip|"+err.Error(), "meshnode: gossip key file reload failed; the keys in use stay", "err", err)
	}
	return errors.Join(errs...)
}

// Reload reads the node's certificate, key and CA files and its gossip key file again
// now (the binary does it on SIGHUP), applying what changed; the files are also
// checked every Config.ReloadInterval. A file that cannot be used leaves what is in
// use as it was, and the error says which and why.
func (n *Node) Reload() error {
	if n.reload == nil {
		return nil
	}
	return n.reload.run()
}

// MeshTLS returns the node's certificates (nil without mesh TLS): the binary serves
// its admin API and authenticates to other members' with them.
func (n *Node) MeshTLS() *meshtls.Certs { return n.certs }

// Security returns what protects the node now.
func (n *Node) Security() Security {
	return Security{Mesh: n.mesh.Security(), InsecureMesh: n.cfg.InsecureMesh, Missing: n.cfg.missingProtections()}
}
