package meshtls_test

import (
	"crypto/tls"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/meshnode/fault"
	"github.com/meshnode/meshnode/internal/testkit"
	"github.com/meshnode/meshnode/meshtls"
)

func pki(t *testing.T) *testkit.FleetPKI {
	t.Helper()
	p, err := testkit.NewFleetPKI("fleet CA")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func files(t *testing.T, p *testkit.FleetPKI, id string) meshtls.Files {
	t.Helper()
	f, err := p.IssueFiles(t.TempDir(), id)
	if err != nil {
		t.Fatal(err)
	}
	return meshtls.Files{Cert: f.Cert, Key: f.Key, CA: f.CA}
}

func write(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// Every unusable file is refused with a *FileError naming its role and path, of kind
// NotConfigured; a certificate that does not name the node id is ErrIdentity.
func TestLoad_BadFilesAreNamed(t *testing.T) {
	p := pki(t)
	other := pki(t)
	good := files(t, p, "node-a")
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.pem")
	write(t, garbage, []byte("not PEM at all"))
	otherFiles := files(t, other, "node-a")
	expiredCert, expiredKey, err := p.NodeWith("node-a", testkit.NodeCertOptions{NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	expired, err := p.WriteNode(t.TempDir(), "node-a", expiredCert, expiredKey)
	if err != nil {
		t.Fatal(err)
	}
	serverOnlyCert, serverOnlyKey, err := p.NodeWith("node-a", testkit.NodeCertOptions{ServerOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	serverOnly, err := p.WriteNode(t.TempDir(), "node-a", serverOnlyCert, serverOnlyKey)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		files meshtls.Files
		role  meshtls.Role
		text  string
	}{
		{"missing certificate", meshtls.Files{Cert: filepath.Join(dir, "nope.crt"), Key: good.Key, CA: good.CA}, meshtls.RoleCert, "no such file"},
		{"certificate not PEM", meshtls.Files{Cert: garbage, Key: good.Key, CA: good.CA}, meshtls.RoleCert, "no PEM certificate"},
		{"key not PEM", meshtls.Files{Cert: good.Cert, Key: garbage, CA: good.CA}, meshtls.RoleKey, "not the key of"},
		{"another certificate's key", meshtls.Files{Cert: good.Cert, Key: otherFiles.Key, CA: good.CA}, meshtls.RoleKey, "not the key of"},
		{"CA not PEM", meshtls.Files{Cert: good.Cert, Key: good.Key, CA: garbage}, meshtls.RoleCA, "no PEM certificate"},
		{"another CA", meshtls.Files{Cert: good.Cert, Key: good.Key, CA: otherFiles.CA}, meshtls.RoleCert, "unknown authority"},
		{"expired", meshtls.Files{Cert: expired.Cert, Key: expired.Key, CA: expired.CA}, meshtls.RoleCert, "expired at"},
		{"server use only", meshtls.Files{Cert: serverOnly.Cert, Key: serverOnly.Key, CA: serverOnly.CA}, meshtls.RoleCert, "client authentication"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := meshtls.Load(tc.files, "node-a")
			var fe *meshtls.FileError
			if !errors.As(err, &fe) || fe.Role != tc.role || !errors.Is(err, meshtls.ErrBadFile) || !errors.Is(err, fault.NotConfigured) {
				t.Fatalf("err = %v, want a %s FileError", err, tc.role)
			}
			if !strings.Contains(err.Error(), tc.text) {
				t.Fatalf("err = %v, want it to say %q", err, tc.text)
			}
		})
	}
	if _, err := meshtls.Load(good, "node-b"); !errors.Is(err, meshtls.ErrIdentity) || !strings.Contains(err.Error(), `"node-b"`) {
		t.Fatalf("a certificate for node-a loaded as node-b: %v", err)
	}
	for _, id := range []string{"10.0.0.5", "127.0.0.1:7946", "node a", "a..b"} {
		if _, err := meshtls.Load(good, id); !errors.Is(err, meshtls.ErrIdentity) {
			t.Fatalf("node id %q: %v, want ErrIdentity", id, err)
		}
	}
	if _, err := meshtls.Load(good, "node-a"); err != nil {
		t.Fatal(err)
	}
}

// A reload with unchanged files changes nothing; a new certificate replaces the old one
// for the next handshakes; a broken file keeps the old one and is reported until a
// reload succeeds.
func TestReload_ReplacesOnlyWithAGoodSet(t *testing.T) {
	p := pki(t)
	f := files(t, p, "node-a")
	c, err := meshtls.Load(f, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	first := c.Status().Serial
	if changed, err := c.Reload(); changed || err != nil {
		t.Fatalf("reload of unchanged files: changed %v, %v", changed, err)
	}
	cert, key, err := p.NodeWith("node-a", testkit.NodeCertOptions{NotAfter: time.Now().Add(48 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	// The certificate replaced, its key not yet: a pair that does not match.
	write(t, f.Cert, cert)
	if changed, err := c.Reload(); changed || !errors.Is(err, meshtls.ErrBadFile) {
		t.Fatalf("reload of a mismatched pair: changed %v, %v", changed, err)
	}
	if st := c.Status(); st.Serial != first || st.ReloadError == "" {
		t.Fatalf("after a failed reload: %+v", st)
	}
	write(t, f.Key, key)
	if changed, err := c.Reload(); !changed || err != nil {
		t.Fatalf("reload of a good pair: changed %v, %v", changed, err)
	}
	st := c.Status()
	if st.Serial == first || st.ReloadError != "" || st.Reloads != 1 {
		t.Fatalf("after a good reload: %+v", st)
	}
	if got := c.ServerTLS(tls.RequireAndVerifyClientCert).Certificates[0].Leaf.SerialNumber.Text(16); got != st.Serial {
		t.Fatalf("the server configuration serves %s, want %s", got, st.Serial)
	}
	// A certificate for another node id is not taken either.
	otherCert, otherKey, _ := p.Node("node-b")
	write(t, f.Cert, otherCert)
	write(t, f.Key, otherKey)
	if _, err := c.Reload(); !errors.Is(err, meshtls.ErrIdentity) {
		t.Fatalf("reload of node-b's certificate: %v", err)
	}
}

// A mutual handshake with ServerTLS and ClientTLS: the client checks the server names
// the expected node id exactly.
func TestHandshake_ServerMustNameTheNodeDialled(t *testing.T) {
	p := pki(t)
	a, err := meshtls.Load(files(t, p, "node-a"), "node-a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := meshtls.Load(files(t, p, "node-b"), "node-b")
	if err != nil {
		t.Fatal(err)
	}
	handshake := func(name string) (serverNames []string, err error) {
		ln, err := tls.Listen("tcp", "127.0.0.1:0", b.ServerTLS(tls.RequireAndVerifyClientCert))
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		done := make(chan []string, 1)
		go func() {
			c, err := ln.Accept()
			if err != nil {
				done <- nil
				return
			}
			defer c.Close()
			tc := c.(*tls.Conn)
			if tc.Handshake() != nil {
				done <- nil
				return
			}
			st := tc.ConnectionState()
			done <- meshtls.PeerNames(&st)
		}()
		c, err := tls.Dial("tcp", ln.Addr().String(), a.ClientTLS(name))
		if err == nil {
			_ = c.Close()
		}
		return <-done, err
	}
	names, err := handshake("node-b")
	if err != nil || len(names) != 1 || names[0] != "node-a" {
		t.Fatalf("handshake a->b: %v, the server saw %v", err, names)
	}
	if _, err := handshake("NODE-B"); err == nil {
		t.Fatal("a server named node-b passed for NODE-B")
	}
	if _, err := handshake("node-c"); err == nil {
		t.Fatal("a server named node-b passed for node-c")
	}
}

func TestExpiry_WarnsAtAThirdOfTheLifetimeAtMostAWeek(t *testing.T) {
	now := time.Now()
	day := 24 * time.Hour
	cases := []struct {
		life, left   time.Duration
		soon, expire bool
	}{
		{90 * day, 30 * day, false, false},
		{90 * day, 6 * day, true, false},
		{3 * day, 25 * time.Hour, false, false},
		{3 * day, 23 * time.Hour, true, false},
		{3 * day, -time.Minute, true, true},
	}
	for _, tc := range cases {
		s := meshtls.Status{NotBefore: now.Add(tc.left - tc.life), NotAfter: now.Add(tc.left)}
		_, soon, expired := s.Expiry(now)
		if soon != tc.soon || expired != tc.expire {
			t.Errorf("life %v, left %v: soon %v expired %v", tc.life, tc.left, soon, expired)
		}
	}
}
