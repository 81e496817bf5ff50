package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

// The commands that talk to a node's admin API (members, actors, sessions, relocate,
// drain) present the credentials it asks for (docs/admin.md, docs/security.md): a
// bearer token, and over TLS a client certificate of the fleet CA. Each comes from the
// command's flag, else its MESHNODE_ADMIN_* variable, else the node's own settings as
// serve reads them (the config file, MESHNODE_* variables: --admin-token-file,
// --admin-tls with the mesh certificate), so that a command run on the node's host
// needs no flag.

// adminCreds are a command's credentials and how it reaches the admin API.
type adminCreds struct {
	token  string
	tls    *tls.Config // nil: plain HTTP
	client *http.Client
}

// commandEnv are the MESHNODE_* variables of the commands, not settings of serve
// (parseSources accepts them in the environment of a node).
var commandEnv = []string{"MESHNODE_ADMIN_TOKEN", "MESHNODE_ADMIN_CA"}

// credFlags declares the credential flags on fs; resolve, called after fs.Parse with
// the target and the node's own settings, returns the credentials.
func credFlags(fs *flag.FlagSet) (resolve func(t adminTarget, node serveConfig) (*adminCreds, error)) {
	tokenFile := fs.String("token-file", "", "file holding the admin bearer token, its first line (default: the token in MESHNODE_ADMIN_TOKEN, else the node's --admin-token-file)")
	caFile := fs.String("ca-file", "", "PEM CA of the admin API's certificate (the fleet CA): talk to it over TLS (default: MESHNODE_ADMIN_CA, else with the node's --admin-tls its --mesh-tls-ca; an https:// --admin also means TLS)")
	certFile := fs.String("cert-file", "", "PEM client certificate of the fleet CA to authenticate with over TLS (with --key-file; default with the node's --admin-tls: its --mesh-tls-cert)")
	keyFile := fs.String("key-file", "", "PEM key of --cert-file")
	serverName := fs.String("server-name", "", "the node id the admin API's certificate must name (default: the node's --node-id or MESHNODE_NODE_ID, else the --admin host)")
	return func(t adminTarget, node serveConfig) (*adminCreds, error) {
		c := &adminCreds{}
		var err error
		switch {
		case *tokenFile != "":
			if c.token, err = firstToken("flag --token-file", *tokenFile); err != nil {
				return nil, err
			}
		case strings.TrimSpace(os.Getenv("MESHNODE_ADMIN_TOKEN")) != "":
			c.token = strings.TrimSpace(os.Getenv("MESHNODE_ADMIN_TOKEN"))
		case node.adminTokenFile != "":
			if c.token, err = firstToken("the node's --admin-token-file", node.adminTokenFile); err != nil {
				return nil, err
			}
		}
		ca, caWhere := *caFile, "flag --ca-file"
		if ca == "" {
			ca, caWhere = os.Getenv("MESHNODE_ADMIN_CA"), "environment variable MESHNODE_ADMIN_CA"
		}
		if ca == "" && node.adminTLS {
			ca, caWhere = node.meshTLSCA, "the node's --mesh-tls-ca"
		}
		cert, key := *certFile, *keyFile
		if cert == "" && key == "" && node.adminTLS {
			cert, key = node.meshTLSCert, node.meshTLSKey
		}
		// No idle connections: a command makes a few requests and ends.
		c.client = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		if !t.https && ca == "" && *certFile == "" && !node.adminTLS {
			return c, nil
		}
		cfg := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}}
		if ca != "" {
			b, err := os.ReadFile(ca)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", caWhere, err)
			}
			cfg.RootCAs = x509.NewCertPool()
			if !cfg.RootCAs.AppendCertsFromPEM(b) {
				return nil, fmt.Errorf("%s: %s holds no PEM certificate", caWhere, ca)
			}
		}
		if (cert == "") != (key == "") {
			return nil, errors.New("flags --cert-file and --key-file go together")
		}
		if cert != "" {
			pair, err := tls.LoadX509KeyPair(cert, key)
			if err != nil {
				return nil, fmt.Errorf("client certificate %s and key %s: %w", cert, key, err)
			}
			cfg.Certificates = []tls.Certificate{pair}
		}
		cfg.ServerName = *serverName
		if cfg.ServerName == "" {
			cfg.ServerName = node.nodeID // --node-id of the config file, or MESHNODE_NODE_ID
		}
		if cfg.ServerName == "" {
			cfg.ServerName, _, _ = net.SplitHostPort(t.addr)
		}
		c.tls = cfg
		c.client.Transport = &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true}
		return c, nil
	}
}

// firstToken reads the first token of a token file (blank lines and # comments
// skipped).
func firstToken(where, path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("%s: %w", where, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			return line, nil
		}
	}
	return "", fmt.Errorf("%s: %s holds no token", where, path)
}

// url is the admin URL of path at addr.
func (c *adminCreds) url(addr, path string) string {
	if c != nil && c.tls != nil {
		return "https://" + addr + path
	}
	return "http://" + addr + path
}

// authorize adds the token to req.
func (c *adminCreds) authorize(req *http.Request) {
	if c != nil && c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
}

// httpClient is the client of c (the commands' plain one without credentials).
func (c *adminCreds) httpClient() *http.Client {
	if c == nil || c.client == nil {
		return adminClient
	}
	return c.client
}
