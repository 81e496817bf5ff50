package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/meshnode/internal/testkit"
	"github.com/meshnode/meshnode/test/proc"
)

const testToken = "test-admin-token-0123456789abcdef"

func writeFile(t *testing.T, dir, name, body string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// call makes one request with the given Authorization header ("" for none) through
// client and returns the status, the body and the error code of a JSON error.
func call(t *testing.T, client *http.Client, method, url, authz string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if authz != "" {
		req.Header.Set("Authorization", authz)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var e errorJSON
	if resp.StatusCode/100 != 2 && strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		_ = json.Unmarshal(b, &e)
	}
	return resp.StatusCode, string(b), e.Error
}

var plainClient = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

// protectedCalls are the admin calls that change something or show client data.
var protectedCalls = []struct{ method, path string }{
	{"POST", "/v1/drain"},
	{"POST", "/v1/actors/room-1/relocate?to=solo"},
	{"GET", "/v1/sessions"},
	{"GET", "/v1/bindings"},
	{"GET", "/v1/members"},
	{"GET", "/v1/actors"},
	{"GET", "/v1/actors/room-1"},
	{"GET", "/v1/node"},
	{"GET", "/v1/node/actors"},
	{"GET", "/v1/fleet"},
	{"GET", "/v1/fleet/actors"},
	{"GET", "/debug/pprof/"},
	{"GET", "/debug/pprof/cmdline"},
}

// With --admin-token-file every admin call but the probes and the dashboard's page is
// refused without the token (401, a JSON error, counted), whatever the Authorization
// header holds instead, and changes nothing (the node is still ready and did not
// drain); with the token they work, from the API and from the commands (--token-file,
// MESHNODE_ADMIN_TOKEN); the probes stay open.
func TestAdmin_WithoutTokenIs401AndChangesNothing(t *testing.T) {
	dir := t.TempDir()
	tokenFile := writeFile(t, dir, "admin.token", "# the fleet's admin token\n"+testToken+"\n")
	addrs, stop := startBinary(t, "--stream", "tcp://127.0.0.1:0", "--admin", "127.0.0.1:0", "--mesh", "127.0.0.1:0",
		"--remote", "127.0.0.1:0", "--node-id", "solo", "--admin-token-file", tokenFile, "--pprof")
	stopped := false
	defer func() {
		if !stopped {
			_ = stop()
		}
	}()
	base := "http://" + addrs["admin"]
	for _, path := range []string{"/healthz", "/readyz", "/metrics", "/", "/dashboard/app.js"} {
		if code, body, _ := call(t, plainClient, "GET", base+path, ""); code != http.StatusOK {
			t.Fatalf("GET %s without a token: %d %s", path, code, body)
		}
	}
	refusals := map[string]string{
		"no_credentials": "",
		"wrong_token":    "Bearer not-the-token",
		"empty_token":    "Bearer ",
		"malformed":      "Basic dXNlcjpwYXNz",
	}
	for reason, authz := range refusals {
		for _, c := range protectedCalls {
			code, body, errCode := call(t, plainClient, c.method, base+c.path, authz)
			if code != http.StatusUnauthorized || errCode != "rejected" {
				t.Fatalf("%s %s (%s): %d %s, want 401 rejected", c.method, c.path, reason, code, body)
			}
		}
	}
	// Nothing changed: the node did not drain.
	if code, body, _ := call(t, plainClient, "GET", base+"/readyz", ""); code != http.StatusOK {
		t.Fatalf("after the refused calls /readyz: %d %s", code, body)
	}
	_, text, _ := call(t, plainClient, "GET", base+"/metrics", "")
	for reason := range refusals {
		if got := proc.Sum(text, "meshnode_admin_refused_total", "reason="+reason); got != float64(len(protectedCalls)) {
			t.Errorf("meshnode_admin_refused_total{reason=%q} = %v, want %d", reason, got, len(protectedCalls))
		}
	}
	for _, c := range protectedCalls[2:] {
		if code, body, _ := call(t, plainClient, c.method, base+c.path, "Bearer "+testToken); code/100 != 2 && code != http.StatusNotFound {
			t.Fatalf("%s %s with the token: %d %s", c.method, c.path, code, body)
		}
	}

	var out, errb bytes.Buffer
	err := run(context.Background(), []string{"members", "--admin", addrs["admin"]}, &out, &errb)
	if err == nil || !strings.Contains(err.Error(), "rejected") {
		t.Fatalf("members without a token: %v", err)
	}
	if err := run(context.Background(), []string{"members", "--admin", addrs["admin"], "--token-file", tokenFile}, &out, &errb); err != nil || !strings.Contains(out.String(), "solo") {
		t.Fatalf("members --token-file: %v %s", err, out.String())
	}
	out.Reset()
	t.Setenv("MESHNODE_ADMIN_TOKEN", testToken)
	if err := run(context.Background(), []string{"sessions", "--admin", addrs["admin"]}, &out, &errb); err != nil {
		t.Fatalf("sessions with MESHNODE_ADMIN_TOKEN: %v", err)
	}
	if err := run(context.Background(), []string{"drain", "--admin", addrs["admin"], "--wait", "30s"}, &out, &errb); err != nil {
		t.Fatalf("drain with MESHNODE_ADMIN_TOKEN: %v", err)
	}
	// The node drained and stopped (alone, it may report Actors it had nowhere to move).
	stopped = true
	_ = stop()
}

// The credential check alone: a request over plain HTTP to a node that takes
// credentials over TLS only is refused as plaintext (saying the token crossed the
// network in clear when one was sent), whatever its source address; the open paths
// pass.
func TestAdmin_PlaintextCredentialsAreRefusedUnderAdminTLS(t *testing.T) {
	dir := t.TempDir()
	toks, err := loadTokens(writeFile(t, dir, "t", testToken+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	var log testkit.LockedBuffer
	a := &adminAuth{tokens: toks, tlsOn: true, log: slogTo(&log)}
	h := a.wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) }))
	for _, remote := range []string{"10.1.2.3:5555", "127.0.0.1:5555"} {
		req := httptest.NewRequest("POST", "/v1/drain", nil)
		req.RemoteAddr = remote
		req.Header.Set("Authorization", "Bearer "+testToken)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusUnauthorized || !strings.Contains(rec.Body.String(), "crossed the network in clear") {
			t.Fatalf("plain HTTP with the token from %s: %d %s", remote, rec.Code, rec.Body.String())
		}
	}
	req := httptest.NewRequest("GET", "/readyz", nil)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusTeapot {
		t.Fatalf("/readyz over plain HTTP: %d", rec.Code)
	}
	if got := a.refused()["plaintext"]; got != 2 {
		t.Fatalf("plaintext refusals counted: %d, want 2", got)
	}
	// Logged once per reason and host per interval: two hosts, two lines.
	for range 5 {
		req := httptest.NewRequest("GET", "/v1/sessions", nil)
		req.RemoteAddr = "10.1.2.3:6000"
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
	if got := strings.Count(log.String(), "admin: refused"); got != 2 {
		t.Fatalf("logged %d times, want 2:\n%s", got, log.String())
	}
}

// With --admin-tls the admin port speaks TLS with the node's certificate: a client
// certificate of the fleet CA is enough, the token works over TLS, plain HTTP still
// serves the probes but takes no credentials, and a client certificate of another CA
// ends the handshake (counted). The commands reach it over TLS with --ca-file.
func TestAdmin_TLSWithFleetClientCertificateOrToken(t *testing.T) {
	dir := t.TempDir()
	p, err := testkit.NewFleetPKI("fleet")
	if err != nil {
		t.Fatal(err)
	}
	f, err := p.IssueFiles(dir, "solo")
	if err != nil {
		t.Fatal(err)
	}
	operator, err := p.IssueFiles(t.TempDir(), "operator")
	if err != nil {
		t.Fatal(err)
	}
	tokenFile := writeFile(t, dir, "admin.token", testToken+"\n")
	addrs, stop := startBinary(t, "--stream", "tcp://127.0.0.1:0", "--admin", "127.0.0.1:0", "--mesh", "127.0.0.1:0",
		"--remote", "127.0.0.1:0", "--node-id", "solo", "--mesh-tls-cert", f.Cert, "--mesh-tls-key", f.Key, "--mesh-tls-ca", f.CA,
		"--admin-token-file", tokenFile, "--admin-tls")
	defer func() { _ = stop() }()
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(p.CACert)
	tlsClient := func(cert *tls.Certificate) *http.Client {
		cfg := &tls.Config{RootCAs: roots, ServerName: "solo"}
		if cert != nil {
			cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert, nil }
		}
		return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true}}
	}
	opCert, err := tls.LoadX509KeyPair(operator.Cert, operator.Key)
	if err != nil {
		t.Fatal(err)
	}
	https, http_ := "https://"+addrs["admin"], "http://"+addrs["admin"]
	if code, body, _ := call(t, tlsClient(&opCert), "GET", https+"/v1/members", ""); code != http.StatusOK || !strings.Contains(body, "solo") {
		t.Fatalf("a fleet client certificate: %d %s", code, body)
	}
	if code, body, _ := call(t, tlsClient(nil), "GET", https+"/v1/members", "Bearer "+testToken); code != http.StatusOK {
		t.Fatalf("the token over TLS: %d %s", code, body)
	}
	if code, body, _ := call(t, tlsClient(nil), "GET", https+"/v1/members", ""); code != http.StatusUnauthorized {
		t.Fatalf("TLS without credentials: %d %s", code, body)
	}
	if code, body, _ := call(t, plainClient, "GET", http_+"/v1/members", "Bearer "+testToken); code != http.StatusUnauthorized || !strings.Contains(body, "TLS") {
		t.Fatalf("the token over plain HTTP: %d %s", code, body)
	}
	for _, path := range []string{"/readyz", "/healthz", "/metrics"} {
		if code, _, _ := call(t, plainClient, "GET", http_+path, ""); code != http.StatusOK {
			t.Fatalf("plain %s: %d", path, code)
		}
	}
	strangerCert, strangerKey, err := testkit.SelfSigned("solo")
	if err != nil {
		t.Fatal(err)
	}
	stranger, err := tls.X509KeyPair(strangerCert, strangerKey)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("GET", https+"/v1/members", nil)
	if resp, err := tlsClient(&stranger).Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("a self-signed client certificate: %s", resp.Status)
	}
	testkit.Eventually(t, 10*time.Second, "the refused handshake counted", func() bool {
		_, text, _ := call(t, plainClient, "GET", http_+"/metrics", "")
		return proc.Sum(text, "meshnode_admin_refused_total", "reason=bad_certificate") == 1
	})

	var out, errb bytes.Buffer
	if err := run(context.Background(), []string{"members", "--admin", addrs["admin"], "--ca-file", f.CA, "--server-name", "solo",
		"--cert-file", operator.Cert, "--key-file", operator.Key}, &out, &errb); err != nil || !strings.Contains(out.String(), "solo") {
		t.Fatalf("members over TLS with a client certificate: %v %s", err, out.String())
	}
	t.Setenv("MESHNODE_NODE_ID", "solo") // the default server name, as in a pod
	if err := run(context.Background(), []string{"sessions", "--admin", "https://" + addrs["admin"], "--ca-file", f.CA, "--token-file", tokenFile}, &out, &errb); err != nil {
		t.Fatalf("sessions over TLS with the token: %v", err)
	}
	if err := run(context.Background(), []string{"sessions", "--admin", addrs["admin"], "--token-file", tokenFile}, &out, &errb); err == nil || !strings.Contains(err.Error(), "TLS") {
		t.Fatalf("sessions over plain HTTP with the token: %v", err)
	}
}

// Bad security settings fail the start naming the flag (and never print a key).
func TestBinary_SecurityFlagsFailTheStartNamingTheFlag(t *testing.T) {
	dir := t.TempDir()
	p, err := testkit.NewFleetPKI("fleet")
	if err != nil {
		t.Fatal(err)
	}
	f, err := p.IssueFiles(dir, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	garbage := writeFile(t, dir, "garbage.pem", "not PEM\n")
	empty := writeFile(t, dir, "empty", "# nothing\n")
	shortKey := "c2hvcnQta2V5"
	tls := []string{"--node-id", "node-a", "--mesh-tls-cert", f.Cert, "--mesh-tls-key", f.Key, "--mesh-tls-ca", f.CA}
	base := []string{"--admin", "", "--mesh", "127.0.0.1:0", "--remote", "127.0.0.1:0"}
	cases := []struct {
		name string
		args []string
		want []string
	}{
		{"certificate not PEM", []string{"--node-id", "node-a", "--mesh-tls-cert", garbage, "--mesh-tls-key", f.Key, "--mesh-tls-ca", f.CA}, []string{"flag --mesh-tls-cert", garbage}},
		{"key of another certificate", []string{"--node-id", "node-a", "--mesh-tls-cert", f.Cert, "--mesh-tls-key", garbage, "--mesh-tls-ca", f.CA}, []string{"flag --mesh-tls-key"}},
		{"CA not PEM", []string{"--node-id", "node-a", "--mesh-tls-cert", f.Cert, "--mesh-tls-key", f.Key, "--mesh-tls-ca", garbage}, []string{"flag --mesh-tls-ca"}},
		{"half a set", []string{"--node-id", "node-a", "--mesh-tls-cert", f.Cert}, []string{"flag --mesh-tls-key"}},
		{"no node id", []string{"--mesh-tls-cert", f.Cert, "--mesh-tls-key", f.Key, "--mesh-tls-ca", f.CA}, []string{"flag --node-id"}},
		{"another node's certificate", append(append([]string{}, tls...), "--node-id", "node-b"), []string{"flag --node-id", "node-b"}},
		{"gossip key not base64", []string{"--gossip-key", "!!!"}, []string{"flag --gossip-key", "value 1 of 1"}},
		{"gossip key too short", []string{"--gossip-key", shortKey}, []string{"flag --gossip-key", "want 16, 24 or 32"}},
		{"empty gossip key file", []string{"--gossip-key-file", empty}, []string{"flag --gossip-key-file", "holds no key"}},
		{"missing token file", []string{"--admin-token-file", filepath.Join(dir, "absent")}, []string{"flag --admin-token-file"}},
		{"empty token file", []string{"--admin-token-file", empty}, []string{"flag --admin-token-file", "holds no token"}},
		{"admin TLS without mesh TLS", []string{"--admin-tls"}, []string{"flag --admin-tls"}},
		{"mesh beyond loopback", []string{"--mesh", "0.0.0.0:0", "--remote", "0.0.0.0:0", "--advertise-host", "10.0.0.5"}, []string{"flag --mesh", "--mesh-tls-cert", "--gossip-key-file", "--insecure-mesh"}},
		{"admin beyond loopback", []string{"--admin", "0.0.0.0:0"}, []string{"flag --admin", "--admin-token-file", "--insecure-mesh"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, cmd := range []string{"serve", "config"} {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				err := run(ctx, append(append([]string{cmd}, base...), tc.args...), io.Discard, io.Discard)
				cancel()
				if err == nil {
					t.Fatalf("%s %v: no error", cmd, tc.args)
				}
				for _, w := range tc.want {
					if !strings.Contains(err.Error(), w) {
						t.Fatalf("%s: %v: does not say %q", cmd, err, w)
					}
				}
				if strings.Contains(err.Error(), shortKey) {
					t.Fatalf("the error shows the key: %v", err)
				}
			}
		})
	}
	// --insecure-mesh lets both through (config checks only; nothing binds).
	var out bytes.Buffer
	if err := run(context.Background(), append(append([]string{"config"}, base...), "--mesh", "0.0.0.0:0", "--remote", "0.0.0.0:0",
		"--advertise-host", "10.0.0.5", "--admin", "0.0.0.0:9464", "--insecure-mesh"), &out, io.Discard); err != nil {
		t.Fatalf("--insecure-mesh: %v", err)
	}
	if !strings.Contains(out.String(), "beyond loopback without") {
		t.Fatalf("config does not say the node is exposed:\n%s", out.String())
	}
}

// meshnode config shows which protections are on and never a gossip key.
func TestBinaryConfig_ShowsProtectionsAndHidesKeys(t *testing.T) {
	dir := t.TempDir()
	p, err := testkit.NewFleetPKI("fleet")
	if err != nil {
		t.Fatal(err)
	}
	f, err := p.IssueFiles(dir, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	key := "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="
	var out bytes.Buffer
	if err := run(context.Background(), []string{"config", "--node-id", "node-a", "--mesh-tls-cert", f.Cert, "--mesh-tls-key", f.Key,
		"--mesh-tls-ca", f.CA, "--gossip-key", key, "--cluster-label", "prod", "--admin-token-file", writeFile(t, dir, "t", testToken)}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	if strings.Contains(text, key) || strings.Contains(text, testToken) {
		t.Fatalf("config shows a secret:\n%s", text)
	}
	for _, want := range []string{"mesh TLS              on", "names node-a", "gossip encryption     on", `cluster label "prod"`, "admin authentication  on", "loopback only"} {
		if !strings.Contains(text, want) {
			t.Fatalf("config does not say %q:\n%s", want, text)
		}
	}
	out.Reset()
	if err := run(context.Background(), []string{"config"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"mesh TLS              off", "gossip encryption     off", "admin authentication  off"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("config does not say %q:\n%s", want, out.String())
		}
	}
}

// A certificate that expires soon shows on /readyz while the node stays ready.
func TestReadyz_ShowsACertificateThatExpiresSoon(t *testing.T) {
	dir := t.TempDir()
	p, err := testkit.NewFleetPKI("fleet")
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := p.NodeWith("solo", testkit.NodeCertOptions{NotBefore: time.Now().Add(-47 * time.Hour), NotAfter: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	f, err := p.WriteNode(dir, "solo", cert, key)
	if err != nil {
		t.Fatal(err)
	}
	addrs, stop := startBinary(t, "--stream", "tcp://127.0.0.1:0", "--admin", "127.0.0.1:0", "--mesh", "127.0.0.1:0",
		"--remote", "127.0.0.1:0", "--node-id", "solo", "--mesh-tls-cert", f.Cert, "--mesh-tls-key", f.Key, "--mesh-tls-ca", f.CA)
	defer func() { _ = stop() }()
	code, body, _ := call(t, plainClient, "GET", "http://"+addrs["admin"]+"/readyz", "")
	if code != http.StatusOK || !strings.Contains(body, "warning: mesh TLS certificate") || !strings.Contains(body, "expires in") {
		t.Fatalf("/readyz: %d %q", code, body)
	}
	_, text, _ := call(t, plainClient, "GET", "http://"+addrs["admin"]+"/metrics", "")
	if v := proc.Sum(text, "meshnode_mesh_tls_cert_expiry_seconds"); v <= 0 || v > 3600 {
		t.Fatalf("meshnode_mesh_tls_cert_expiry_seconds = %v, want (0, 3600]", v)
	}
}

// A node whose certificate expires while it runs answers 503 on /readyz from then on,
// naming the certificate and when it expired, and its expiry gauge goes negative
// (docs/security.md, "Rotation without a restart"); once a renewed certificate is
// written over its files the node picks it up by itself and is ready again.
func TestReadyz_ExpiredCertificateIs503UntilARenewedOneIsLoaded(t *testing.T) {
	dir := t.TempDir()
	p, err := testkit.NewFleetPKI("fleet")
	if err != nil {
		t.Fatal(err)
	}
	// Valid long enough for the node to start (the start refuses an expired one) on
	// two loaded cores: NotAfter is cut to the second, and the binary starts with mesh
	// TLS meanwhile.
	cert, key, err := p.NodeWith("solo", testkit.NodeCertOptions{NotAfter: time.Now().Add(10 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(mustDER(t, cert))
	if err != nil {
		t.Fatal(err)
	}
	f, err := p.WriteNode(dir, "solo", cert, key)
	if err != nil {
		t.Fatal(err)
	}
	var log testkit.LockedBuffer
	addrs, stop := startBinaryLogging(t, &log, "--stream", "tcp://127.0.0.1:0", "--admin", "127.0.0.1:0", "--mesh", "127.0.0.1:0",
		"--remote", "127.0.0.1:0", "--node-id", "solo", "--mesh-tls-cert", f.Cert, "--mesh-tls-key", f.Key, "--mesh-tls-ca", f.CA)
	defer func() { _ = stop() }()
	readyz := "http://" + addrs["admin"] + "/readyz"

	// Before it expires: ready, with the warning (ten seconds is under a third of its
	// lifetime). An answer that arrived before NotAfter was decided before it.
	code, body, _ := call(t, plainClient, "GET", readyz, "")
	if time.Now().Before(leaf.NotAfter) && (code != http.StatusOK || !strings.Contains(body, "expires in")) {
		t.Fatalf("/readyz before the certificate expired: %d %q", code, body)
	}

	testkit.Eventually(t, 30*time.Second, "the certificate's NotAfter to pass", func() bool { return !time.Now().Before(leaf.NotAfter) })
	code, body, _ = call(t, plainClient, "GET", readyz, "")
	want := fmt.Sprintf("not ready: mesh TLS certificate %s expired at %s: peers refuse it; install a renewed one (docs/security.md)\n",
		f.Cert, leaf.NotAfter.UTC().Format(time.RFC3339))
	if code != http.StatusServiceUnavailable || body != want {
		t.Fatalf("/readyz once the certificate expired: %d %q, want 503 %q", code, body, want)
	}
	// GET /v1/node's health says what /readyz says (the dashboard shows it).
	var nv struct {
		Health struct {
			Ready    bool   `json:"ready"`
			NotReady string `json:"notReady"`
		} `json:"health"`
	}
	if code, body, _ := call(t, plainClient, "GET", "http://"+addrs["admin"]+"/v1/node", ""); code != http.StatusOK || json.Unmarshal([]byte(body), &nv) != nil ||
		nv.Health.Ready || "not ready: "+nv.Health.NotReady+"\n" != want {
		t.Fatalf("/v1/node once the certificate expired: %d health %+v, want not ready as /readyz says", code, nv.Health)
	}
	_, text, _ := call(t, plainClient, "GET", "http://"+addrs["admin"]+"/metrics", "")
	if v := proc.Sum(text, "meshnode_mesh_tls_cert_expiry_seconds"); v >= 0 {
		t.Fatalf("meshnode_mesh_tls_cert_expiry_seconds = %v once expired, want < 0", v)
	}

	// A renewal, key first: the node polls its files (every DefaultReloadInterval).
	renewed, renewedKey, err := p.Node("solo")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f.Key, renewedKey, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f.Cert, renewed, 0o600); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, "the node to reload the renewed certificate", func() bool {
		return strings.Contains(log.String(), "mesh TLS certificate reloaded")
	})
	if code, body, _ := call(t, plainClient, "GET", readyz, ""); code != http.StatusOK || body != "ready\n" {
		t.Fatalf("/readyz with the renewed certificate: %d %q, want 200 %q", code, body, "ready\n")
	}
}

// mustDER is the DER of the first PEM block of b.
func mustDER(t *testing.T, b []byte) []byte {
	t.Helper()
	block, _ := pem.Decode(b)
	if block == nil {
		t.Fatal("no PEM block")
	}
	return block.Bytes
}

func slogTo(w io.Writer) *slog.Logger { return slog.New(slog.NewTextHandler(w, nil)) }

// On a node's host a command needs no credential flag: given the node's config file it
// takes the node's token and, with admin-tls, its certificate, CA and node id.
func TestAdmin_CommandsTakeTheNodesOwnCredentialsFromItsConfigFile(t *testing.T) {
	dir := t.TempDir()
	p, err := testkit.NewFleetPKI("fleet")
	if err != nil {
		t.Fatal(err)
	}
	f, err := p.IssueFiles(dir, "solo")
	if err != nil {
		t.Fatal(err)
	}
	tokenFile := writeFile(t, dir, "admin.token", testToken+"\n")
	admin := fmt.Sprintf("127.0.0.1:%d", proc.FreePort(t))
	cfgFile := writeFile(t, dir, "meshnode.toml", fmt.Sprintf(`node-id = "solo"
admin = %q
mesh = "127.0.0.1:0"
remote = "127.0.0.1:0"
stream = ["tcp://127.0.0.1:0"]
mesh-tls-cert = %q
mesh-tls-key = %q
mesh-tls-ca = %q
admin-token-file = %q
admin-tls = true
`, admin, f.Cert, f.Key, f.CA, tokenFile))
	_, stop := startBinary(t, "--config", cfgFile)
	defer func() { _ = stop() }()
	var out bytes.Buffer
	if err := run(context.Background(), []string{"members", "--config", cfgFile}, &out, io.Discard); err != nil || !strings.Contains(out.String(), "solo") {
		t.Fatalf("members --config: %v\n%s", err, out.String())
	}
	// The same without the file: no credentials, refused.
	err = run(context.Background(), []string{"members", "--admin", admin}, &out, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "rejected") {
		t.Fatalf("members without credentials: %v", err)
	}
}
