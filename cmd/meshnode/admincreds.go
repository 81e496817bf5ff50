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
// drain) present credentials when it asks for them (docs/admin.md): a bearer token from
// --token-file or MESHNODE_ADMIN_TOKEN, and over TLS (an https:// --admin, or
// --ca-file) a client certificate of the fleet CA (--cert-file, --key-file).

// adminCreds are a command's credentials and how it reaches the admin API.
type adminCreds struct {
	token  string
	tls    *tls.Config // nil: plain HTTP
	client *http.Client
}

// credFlags declares the credential flags on fs; resolve, called after fs.Parse with
// the --admin value, returns the credentials.
func credFlags(fs *flag.FlagSet) (resolve func(admin string) (*adminCreds, string, error)) {
	tokenFile := fs.String("token-file", "", "file holding the admin bearer token (its first line; default: the token in MESHNODE_ADMIN_TOKEN)")
	caFile := fs.String("ca-file", "", "PEM CA of the admin API's certificate (the fleet CA): talk to it over TLS (default: MESHNODE_ADMIN_CA; an https:// --admin also means TLS)")
	certFile := fs.String("cert-file", "", "PEM client certificate of the fleet CA to authenticate with, instead of a token (with --key-file; TLS)")
	keyFile := fs.String("key-file", "", "PEM key of --cert-file")
	serverName := fs.String("server-name", "", "the node id the admin API's certificate must name (default: MESHNODE_NODE_ID, else the host of --admin)")
	return func(admin string) (*adminCreds, string, error) {
		c := &adminCreds{}
		addr, useTLS := strings.CutPrefix(admin, "https://")
		addr = strings.TrimPrefix(addr, "http://")
		switch {
		case *tokenFile != "":
			b, err := os.ReadFile(*tokenFile)
			if err != nil {
				return nil, "", fmt.Errorf("flag --token-file: %w", err)
			}
			for _, line := range strings.Split(string(b), "\n") {
				if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
					c.token = line
					break
				}
			}
			if c.token == "" {
				return nil, "", fmt.Errorf("flag --token-file: %s holds no token", *tokenFile)
			}
		default:
			c.token = strings.TrimSpace(os.Getenv("MESHNODE_ADMIN_TOKEN"))
		}
		ca := *caFile
		if ca == "" {
			ca = os.Getenv("MESHNODE_ADMIN_CA")
		}
		if ca != "" || *certFile != "" {
			useTLS = true
		}
		// No idle connections: a command makes a few requests and ends.
		c.client = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		if !useTLS {
			return c, addr, nil
		}
		cfg := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}}
		if ca != "" {
			b, err := os.ReadFile(ca)
			if err != nil {
				return nil, "", fmt.Errorf("flag --ca-file: %w", err)
			}
			cfg.RootCAs = x509.NewCertPool()
			if !cfg.RootCAs.AppendCertsFromPEM(b) {
				return nil, "", fmt.Errorf("flag --ca-file: %s holds no PEM certificate", ca)
			}
		}
		if (*certFile == "") != (*keyFile == "") {
			return nil, "", errors.New("flags --cert-file and --key-file go together")
		}
		if *certFile != "" {
			pair, err := tls.LoadX509KeyPair(*certFile, *keyFile)
			if err != nil {
				return nil, "", fmt.Errorf("flags --cert-file %s and --key-file %s: %w", *certFile, *keyFile, err)
			}
			cfg.Certificates = []tls.Certificate{pair}
		}
		cfg.ServerName = *serverName
		if cfg.ServerName == "" {
			cfg.ServerName = os.Getenv("MESHNODE_NODE_ID")
		}
		if cfg.ServerName == "" {
			cfg.ServerName, _, _ = net.SplitHostPort(addr)
		}
		c.tls = cfg
		c.client.Transport = &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true}
		return c, addr, nil
	}
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

// httpClient is the client of c (a plain one without credentials).
func (c *adminCreds) httpClient() *http.Client {
	if c == nil || c.client == nil {
		return http.DefaultClient
	}
	return c.client
}
