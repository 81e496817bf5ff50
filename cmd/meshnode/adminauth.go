package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/meshnode/meshnode/fault"
	"github.com/meshnode/meshnode/internal/ratelog"
	"github.com/meshnode/meshnode/meshtls"
)

// The admin API split by trust (docs/admin.md, docs/security.md): /healthz, /readyz
// and /metrics (probes and scrapers) and the dashboard's page and files (which show
// nothing by themselves) are open; every other endpoint (what changes something or
// shows client data: drain, relocate, sessions, bindings, pprof, the dashboard's data,
// the fleet figures) needs a bearer token of --admin-token-file or, with --admin-tls, a
// client certificate of the fleet CA. A refusal is 401 with a JSON error, counted
// (meshnode.admin.refused{reason}) and logged once per reason, remote host and minute.

// errUnauthenticated is the class of every refusal (kind Rejected: code "rejected").
var errUnauthenticated = fault.New(fault.Rejected, "admin: not authenticated")

// openPath reports whether path is open to anyone.
func openPath(path string) bool {
	switch path {
	case "/healthz", "/readyz", "/metrics", "/":
		return true
	}
	return strings.HasPrefix(path, "/dashboard/")
}

// adminAuth checks the credentials of admin requests.
type adminAuth struct {
	tokens *tokens // nil: no token is accepted
	tlsOn  bool    // --admin-tls: credentials over TLS only; fleet client certificates accepted
	log    *slog.Logger

	limiter ratelog.Limiter
	counts  sync.Map // reason -> *atomic.Int64
	reg     metric.Registration
}

func newAdminAuth(cfg serveConfig, log *slog.Logger, mp metric.MeterProvider) (*adminAuth, error) {
	a := &adminAuth{tlsOn: cfg.adminTLS, log: log}
	if cfg.adminTokenFile != "" {
		t, err := loadTokens(cfg.adminTokenFile)
		if err != nil {
			return nil, err
		}
		a.tokens = t
		if t.count() > 0 && len(t.ownToken()) < 16 {
			log.Warn("admin: a token shorter than 16 characters is easy to guess; make it long and random (openssl rand -base64 32)", "file", cfg.adminTokenFile)
		}
	}
	if mp != nil {
		m := mp.Meter("github.com/meshnode/meshnode/cmd/meshnode")
		refused, err := m.Int64ObservableCounter("meshnode.admin.refused", metric.WithUnit("{request}"),
			metric.WithDescription("Admin requests and connections refused, by reason (no_credentials, empty_token, wrong_token, malformed, plaintext, bad_certificate)."))
		if err != nil {
			return nil, err
		}
		a.reg, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
			a.counts.Range(func(k, v any) bool {
				o.ObserveInt64(refused, v.(*atomic.Int64).Load(), metric.WithAttributes(attribute.String("reason", k.(string))))
				return true
			})
			return nil
		}, refused)
		if err != nil {
			return nil, err
		}
	}
	return a, nil
}

func (a *adminAuth) close() {
	if a.reg != nil {
		_ = a.reg.Unregister()
	}
}

// on reports whether the admin API asks for credentials at all.
func (a *adminAuth) on() bool { return a.tokens != nil || a.tlsOn }

// refused returns the refusals so far, by reason.
func (a *adminAuth) refused() map[string]int64 {
	out := map[string]int64{}
	a.counts.Range(func(k, v any) bool {
		out[k.(string)] = v.(*atomic.Int64).Load()
		return true
	})
	return out
}

func (a *adminAuth) count(reason, remote, detail string) {
	v, ok := a.counts.Load(reason)
	if !ok {
		v, _ = a.counts.LoadOrStore(reason, new(atomic.Int64))
	}
	v.(*atomic.Int64).Add(1)
	host := remote
	if h, _, err := net.SplitHostPort(remote); err == nil {
		host = h
	}
	a.limiter.Log(a.log, slog.LevelWarn, reason+"|"+host, "admin: refused", "reason", reason, "remote", remote, "detail", detail)
}

// wrap puts the credential check in front of h.
func (a *adminAuth) wrap(h http.Handler) http.Handler {
	if !a.on() {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if openPath(r.URL.Path) {
			h.ServeHTTP(w, r)
			return
		}
		if reason, msg := a.check(r); reason != "" {
			a.count(reason, r.RemoteAddr, r.Method+" "+r.URL.Path+": "+msg)
			w.Header().Set("WWW-Authenticate", `Bearer realm="meshnode admin"`)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_ = json.NewEncoder(w).Encode(errorJSON{Error: fault.Code(errUnauthenticated), Message: msg})
			return
		}
		h.ServeHTTP(w, r)
	})
}

// check returns why r is refused (reason and a message for the caller), or "" when it
// may pass.
func (a *adminAuth) check(r *http.Request) (reason, msg string) {
	authz, hasAuthz := r.Header["Authorization"]
	if a.tlsOn && r.TLS == nil {
		msg = "this node takes admin credentials over TLS only (--admin-tls): use https://"
		if hasAuthz {
			msg += "; the credentials you sent crossed the network in clear: rotate the token"
		}
		return "plaintext", msg
	}
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 {
		return "", "" // a client certificate of the fleet CA
	}
	want := "a bearer token (Authorization: Bearer TOKEN, one of --admin-token-file)"
	if a.tokens == nil {
		want = "a client certificate of the fleet CA"
	} else if a.tlsOn {
		want += " or a client certificate of the fleet CA"
	}
	if !hasAuthz {
		return "no_credentials", "this endpoint needs " + want
	}
	scheme, token, _ := strings.Cut(strings.TrimSpace(authz[0]), " ")
	if len(authz) != 1 || !strings.EqualFold(scheme, "Bearer") {
		return "malformed", "the Authorization header must be \"Bearer TOKEN\""
	}
	token = strings.TrimSpace(token)
	switch {
	case token == "":
		return "empty_token", "the bearer token is empty; this endpoint needs " + want
	case a.tokens == nil:
		return "wrong_token", "this node takes no bearer token; it needs " + want
	case !a.tokens.match(token):
		return "wrong_token", "the bearer token is not one of this node's"
	}
	return "", ""
}

// handshakeTimeout bounds how long a connection to the admin port may take to say
// whether it speaks TLS and to finish its handshake.
const handshakeTimeout = 10 * time.Second

// tlsSniffer serves TLS and plain HTTP on one admin port: it reads the first byte of
// each connection (a TLS handshake starts with 0x16), completes the TLS handshake
// itself (so that a refused certificate is counted and logged here), and hands
// http.Server a *tls.Conn or the plain connection. Probes and scrapers keep plain
// HTTP; credentials need TLS (adminAuth).
type tlsSniffer struct {
	net.Listener
	config func() *tls.Config
	failed func(remote string, err error)

	conns  chan net.Conn
	done   chan struct{}
	once   sync.Once
	wg     sync.WaitGroup
	mu     sync.Mutex
	raw    map[net.Conn]struct{} // connections being sniffed, closed on Close
	accErr error
}

func newTLSSniffer(ln net.Listener, config func() *tls.Config, failed func(string, error)) *tlsSniffer {
	s := &tlsSniffer{Listener: ln, config: config, failed: failed, conns: make(chan net.Conn), done: make(chan struct{}), raw: map[net.Conn]struct{}{}}
	s.wg.Add(1)
	go s.acceptLoop()
	return s
}

func (s *tlsSniffer) acceptLoop() {
	defer s.wg.Done()
	for {
		c, err := s.Listener.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			s.mu.Lock()
			s.accErr = err
			s.mu.Unlock()
			s.once.Do(func() { close(s.done) })
			return
		}
		s.mu.Lock()
		select {
		case <-s.done:
			s.mu.Unlock()
			_ = c.Close()
			continue
		default:
		}
		s.raw[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.sniff(c)
	}
}

func (s *tlsSniffer) sniff(c net.Conn) {
	defer s.wg.Done()
	release := func() {
		s.mu.Lock()
		delete(s.raw, c)
		s.mu.Unlock()
	}
	_ = c.SetDeadline(time.Now().Add(handshakeTimeout))
	br := bufio.NewReader(c)
	first, err := br.Peek(1)
	if err != nil {
		release()
		_ = c.Close()
		return
	}
	var out net.Conn = &peekedConn{Conn: c, r: br}
	if first[0] == 0x16 {
		tc := tls.Server(out, s.config())
		if err := tc.Handshake(); err != nil {
			release()
			s.failed(c.RemoteAddr().String(), err)
			_ = c.Close()
			return
		}
		out = tc
	}
	_ = c.SetDeadline(time.Time{})
	release()
	select {
	case s.conns <- out:
	case <-s.done:
		_ = out.Close()
	}
}

func (s *tlsSniffer) Accept() (net.Conn, error) {
	select {
	case c := <-s.conns:
		return c, nil
	case <-s.done:
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.accErr != nil && !errors.Is(s.accErr, net.ErrClosed) {
			return nil, s.accErr
		}
		return nil, net.ErrClosed
	}
}

// Close stops accepting, closes the connections still being sniffed and waits for its
// goroutines.
func (s *tlsSniffer) Close() error {
	s.once.Do(func() { close(s.done) })
	err := s.Listener.Close()
	s.mu.Lock()
	for c := range s.raw {
		_ = c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return err
}

// peekedConn is a connection whose first bytes were read into r.
type peekedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *peekedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// adminTLSConfig is one admin handshake's configuration: the node's certificate, and a
// client certificate of the fleet CA checked when one is given.
func adminTLSConfig(certs *meshtls.Certs) func() *tls.Config {
	return func() *tls.Config {
		c := certs.ServerTLS(tls.VerifyClientCertIfGiven)
		c.NextProtos = []string{"http/1.1"}
		return c
	}
}
