package meshnode_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/meshnode"
	"github.com/meshnode/meshnode/fault"
	"github.com/meshnode/meshnode/internal/testkit"
	"github.com/meshnode/meshnode/meshtls"
)

// A node that would serve beyond loopback without mesh TLS and gossip encryption does
// not start, naming BindHost and what is missing; InsecureMesh lets it, with a
// warning naming what is missing; loopback needs nothing. Half a TLS set and TLS
// without a NodeID are refused too.
func TestSafeDefaults_NonLoopbackNeedsSecurityOrInsecureMesh(t *testing.T) {
	for _, host := range []string{"0.0.0.0", "10.1.2.3", "node.example"} {
		cfg := quiet(meshnode.TestConfig())
		cfg.BindHost, cfg.AdvertiseHost = host, "10.1.2.3"
		_, err := meshnode.Start(context.Background(), cfg)
		if !errors.Is(err, meshnode.ErrConfig) || !strings.Contains(err.Error(), "Config.BindHost") ||
			!strings.Contains(err.Error(), "mesh TLS") || !strings.Contains(err.Error(), "gossip encryption") {
			t.Fatalf("bind %s without security: %v", host, err)
		}
	}
	for _, host := range []string{"", "127.0.0.1", "127.9.9.9", "localhost", "::1"} {
		if !meshnode.IsLoopbackHost(host) {
			t.Fatalf("%q is loopback", host)
		}
	}

	// On loopback InsecureMesh changes nothing and says nothing.
	var log testkit.LockedBuffer
	cfg := meshnode.TestConfig()
	cfg.Logger = slog.New(slog.NewTextHandler(&log, nil))
	cfg.InsecureMesh = true
	n, err := meshnode.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	_ = n.Close()
	if strings.Contains(log.String(), "INSECURE MESH") {
		t.Fatal("a loopback node warned of an insecure mesh")
	}

	cases := map[string]func(*meshnode.Config){
		"MeshTLSCertFile": func(c *meshnode.Config) { c.NodeID, c.MeshTLSCertFile = "a", "x.crt" },
		"NodeID":          func(c *meshnode.Config) { c.MeshTLSCertFile, c.MeshTLSKeyFile, c.MeshTLSCAFile = "x", "y", "z" },
		"GossipKeyFile":   func(c *meshnode.Config) { c.GossipKeys, c.GossipKeyFile = [][]byte{make([]byte, 16)}, "k" },
		"ClusterLabel":    func(c *meshnode.Config) { c.ClusterLabel = strings.Repeat("x", 256) },
	}
	for field, set := range cases {
		cfg := quiet(meshnode.TestConfig())
		set(&cfg)
		if _, err := meshnode.Start(context.Background(), cfg); !errors.Is(err, meshnode.ErrConfig) || !strings.Contains(err.Error(), "Config."+field) {
			t.Fatalf("%s: %v", field, err)
		}
	}
}

// InsecureMesh on a non-loopback address lets the start go on, after a warning naming
// what is missing. (The host is a name that does not resolve, so that the test binds
// nothing beyond loopback: the start then fails at the bind, after the warning.)
func TestSafeDefaults_InsecureMeshWarnsAtStart(t *testing.T) {
	var log testkit.LockedBuffer
	cfg := meshnode.TestConfig()
	cfg.Logger = slog.New(slog.NewTextHandler(&log, nil))
	cfg.BindHost = "meshnode-test.invalid"
	cfg.InsecureMesh = true
	_, err := meshnode.Start(context.Background(), cfg)
	if err == nil || strings.Contains(err.Error(), "Config.BindHost") {
		t.Fatalf("start: %v, want a bind failure past the configuration check", err)
	}
	if got := strings.Count(log.String(), "INSECURE MESH"); got != 1 || !strings.Contains(log.String(), "mesh TLS") || !strings.Contains(log.String(), "gossip encryption") {
		t.Fatalf("want one warning naming what is missing: %s", log.String())
	}
}

// A certificate file that cannot be used fails the start naming its Config field, and
// nothing keeps running.
func TestMeshTLS_BadFilesFailTheStartNamingTheField(t *testing.T) {
	p, err := testkit.NewFleetPKI("fleet")
	if err != nil {
		t.Fatal(err)
	}
	f, err := p.IssueFiles(t.TempDir(), "node-a")
	if err != nil {
		t.Fatal(err)
	}
	garbage := t.TempDir() + "/garbage.pem"
	if err := os.WriteFile(garbage, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := map[string]func(*meshnode.Config){
		"Config.MeshTLSCertFile": func(c *meshnode.Config) { c.MeshTLSCertFile = garbage },
		"Config.MeshTLSKeyFile":  func(c *meshnode.Config) { c.MeshTLSKeyFile = garbage },
		"Config.MeshTLSCAFile":   func(c *meshnode.Config) { c.MeshTLSCAFile = garbage },
		"Config.NodeID":          func(c *meshnode.Config) { c.NodeID = "node-b" },
	}
	for field, set := range cases {
		cfg := quiet(meshnode.TestConfig())
		cfg.NodeID = "node-a"
		cfg.MeshTLSCertFile, cfg.MeshTLSKeyFile, cfg.MeshTLSCAFile = f.Cert, f.Key, f.CA
		set(&cfg)
		_, err := meshnode.Start(context.Background(), cfg)
		if !errors.Is(err, fault.NotConfigured) || !strings.Contains(err.Error(), field) {
			t.Fatalf("%s: %v", field, err)
		}
	}
}

// A renewed certificate written over the node's files is in use within the reload
// interval, without a restart; a broken one is reported and the old one stays.
func TestMeshTLS_CertificateReloadWithoutRestart(t *testing.T) {
	p, err := testkit.NewFleetPKI("fleet")
	if err != nil {
		t.Fatal(err)
	}
	f, err := p.IssueFiles(t.TempDir(), "node-a")
	if err != nil {
		t.Fatal(err)
	}
	cfg := quiet(meshnode.TestConfig())
	cfg.NodeID = "node-a"
	cfg.MeshTLSCertFile, cfg.MeshTLSKeyFile, cfg.MeshTLSCAFile = f.Cert, f.Key, f.CA
	cfg.ReloadInterval = 50 * time.Millisecond
	n, err := meshnode.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	first := n.Security().Mesh.TLS.Serial
	cert, key, err := p.NodeWith("node-a", testkit.NodeCertOptions{NotAfter: time.Now().Add(72 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.WriteNode(filepath.Dir(f.Cert), "node-a", cert, key); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, wait, "the renewed certificate in use", func() bool {
		st := n.Security().Mesh.TLS
		return st.Serial != first && st.Reloads == 1
	})
	if err := os.WriteFile(f.Cert, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := n.Reload(); !errors.Is(err, meshtls.ErrBadFile) {
		t.Fatalf("reload of a broken certificate: %v", err)
	}
	if st := n.Security().Mesh.TLS; st.ReloadError == "" || st.Reloads != 1 {
		t.Fatalf("after a broken file: %+v", st)
	}
}
