// Package meshtls holds a node's certificates: its own certificate and key and the
// fleet CA, loaded from PEM files, checked before they are used (the key matches the
// certificate, the CA signed it for server and client use, it is valid now, it names
// the node), reloaded when the files change, and handed out as tls.Configs that always
// carry the latest. A node proves its node id to its peers with a DNS SAN equal to that
// id in a certificate the fleet CA signed (docs/security.md).
//
// Certs has no goroutine of its own: its owner calls Reload when the files may have
// changed (meshnode's node polls them, and the binary reloads on SIGHUP).
package meshtls

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshnode/meshnode/fault"
)

// Errors. A *FileError names the file at fault and matches ErrBadFile.
var (
	// ErrBadFile: a certificate, key or CA file is missing, unreadable, malformed, or
	// holds a certificate that cannot be used (expired, not signed by the CA, the key
	// does not match). Kind NotConfigured.
	ErrBadFile = fault.New(fault.NotConfigured, "meshtls: unusable certificate file")
	// ErrIdentity: the certificate has no DNS SAN equal to the node id, or the node id
	// cannot be one. Kind NotConfigured.
	ErrIdentity = fault.New(fault.NotConfigured, "meshtls: the certificate does not name the node")
)

// Role says which of the three files an error is about.
type Role string

const (
	RoleCert Role = "certificate"
	RoleKey  Role = "key"
	RoleCA   Role = "CA"
)

// FileError is an unusable file: which one, where, and why.
type FileError struct {
	Role Role
	Path string
	Err  error
}

func (e *FileError) Error() string {
	return fmt.Sprintf("meshtls: %s file %s: %v", e.Role, e.Path, e.Err)
}

// Unwrap lets errors.Is find ErrBadFile (and its kind) and the cause.
func (e *FileError) Unwrap() []error { return []error{ErrBadFile, e.Err} }

// Files are the paths of a node's PEM files.
type Files struct {
	Cert string // the node's certificate (chain), leaf first
	Key  string // its private key
	CA   string // the fleet CA bundle: peers' certificates must chain to one of these
}

// Certs is a node's certificate material, replaced as a whole by a successful Reload.
// Its methods are safe for concurrent use.
type Certs struct {
	files Files
	id    string // the node id the certificate must name ("" : not checked)
	cur   atomic.Pointer[material]

	mu        sync.Mutex // Reload, and the fields below
	reloads   int
	lastErr   error
	lastErrAt time.Time
}

// material is one consistent load of the three files. Never changed once stored.
type material struct {
	pair   tls.Certificate
	leaf   *x509.Certificate
	pool   *x509.CertPool
	cas    []*x509.Certificate
	sum    [sha256.Size]byte // of the three files' bytes, to see a change
	loaded time.Time
}

// Load reads and checks the files. id, when not empty, is the node id the
// certificate must name with a DNS SAN (ErrIdentity otherwise).
func Load(files Files, id string) (*Certs, error) {
	if id != "" {
		if err := CheckNodeID(id); err != nil {
			return nil, err
		}
	}
	c := &Certs{files: files, id: id}
	m, err := c.load(time.Now())
	if err != nil {
		return nil, err
	}
	c.cur.Store(m)
	return c, nil
}

// CheckNodeID reports whether id can be a certificate's DNS SAN that TLS verification
// matches: labels of letters, digits, '-' and '_', joined by dots, not an IP address.
func CheckNodeID(id string) error {
	if net.ParseIP(id) != nil {
		return fmt.Errorf("%w: node id %q is an IP address; with mesh TLS a node id must be a DNS name", ErrIdentity, id)
	}
	if len(id) == 0 || len(id) > 253 {
		return fmt.Errorf("%w: node id %q: a DNS name has 1..253 bytes", ErrIdentity, id)
	}
	for _, label := range strings.Split(id, ".") {
		if len(label) == 0 || len(label) > 63 {
			return fmt.Errorf("%w: node id %q: a DNS name's labels have 1..63 bytes", ErrIdentity, id)
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
				return fmt.Errorf("%w: node id %q: %q cannot be in a DNS name", ErrIdentity, id, r)
			}
		}
	}
	return nil
}

func (c *Certs) load(now time.Time) (*material, error) {
	read := func(role Role, path string) ([]byte, error) {
		if path == "" {
			return nil, &FileError{Role: role, Path: path, Err: errors.New("no file given")}
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, &FileError{Role: role, Path: path, Err: err}
		}
		return b, nil
	}
	certPEM, err := read(RoleCert, c.files.Cert)
	if err != nil {
		return nil, err
	}
	keyPEM, err := read(RoleKey, c.files.Key)
	if err != nil {
		return nil, err
	}
	caPEM, err := read(RoleCA, c.files.CA)
	if err != nil {
		return nil, err
	}
	m := &material{loaded: now, sum: sum(certPEM, keyPEM, caPEM)}
	if m.cas, err = parseCerts(caPEM); err != nil {
		return nil, &FileError{Role: RoleCA, Path: c.files.CA, Err: err}
	}
	m.pool = x509.NewCertPool()
	for _, ca := range m.cas {
		m.pool.AddCert(ca)
	}
	chain, err := parseCerts(certPEM)
	if err != nil {
		return nil, &FileError{Role: RoleCert, Path: c.files.Cert, Err: err}
	}
	m.leaf = chain[0]
	if m.pair, err = tls.X509KeyPair(certPEM, keyPEM); err != nil {
		return nil, &FileError{Role: RoleKey, Path: c.files.Key, Err: fmt.Errorf("not the key of %s: %w", c.files.Cert, err)}
	}
	m.pair.Leaf = m.leaf
	if now.After(m.leaf.NotAfter) {
		return nil, &FileError{Role: RoleCert, Path: c.files.Cert, Err: fmt.Errorf("expired at %s", m.leaf.NotAfter.UTC().Format(time.RFC3339))}
	}
	if now.Before(m.leaf.NotBefore) {
		return nil, &FileError{Role: RoleCert, Path: c.files.Cert, Err: fmt.Errorf("not valid before %s", m.leaf.NotBefore.UTC().Format(time.RFC3339))}
	}
	inter := x509.NewCertPool()
	for _, ic := range chain[1:] {
		inter.AddCert(ic)
	}
	// A node is a server to the peers that dial it and a client of the peers it dials:
	// its certificate must be good for both, under the fleet CA.
	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if _, err := m.leaf.Verify(x509.VerifyOptions{Roots: m.pool, Intermediates: inter, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
			return nil, &FileError{Role: RoleCert, Path: c.files.Cert, Err: fmt.Errorf("not usable for %s under the CA in %s: %w", usageName(usage), c.files.CA, err)}
		}
	}
	if c.id != "" && !slices.Contains(m.leaf.DNSNames, c.id) {
		return nil, fmt.Errorf("%w: %s names %s, not the node id %q: issue it with a DNS SAN %q",
			ErrIdentity, c.files.Cert, namesText(m.leaf.DNSNames), c.id, c.id)
	}
	return m, nil
}

func usageName(u x509.ExtKeyUsage) string {
	if u == x509.ExtKeyUsageServerAuth {
		return "server authentication (TLS Web Server Authentication)"
	}
	return "client authentication (TLS Web Client Authentication)"
}

func namesText(names []string) string {
	if len(names) == 0 {
		return "no DNS name"
	}
	return "DNS " + strings.Join(names, ", ")
}

func sum(parts ...[]byte) [sha256.Size]byte {
	h := sha256.New()
	for _, p := range parts {
		h.Write(p)
		h.Write([]byte{0})
	}
	var out [sha256.Size]byte
	h.Sum(out[:0])
	return out
}

// parseCerts parses every CERTIFICATE block of a PEM bundle; it needs at least one.
func parseCerts(b []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d does not parse: %w", len(out)+1, err)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, errors.New("holds no PEM certificate")
	}
	return out, nil
}

// Reload reads the files again. When their bytes are unchanged it does nothing
// (changed false); when they changed and pass every check Load makes, the new
// material serves every handshake from now on (connections already up keep theirs);
// when they do not, the current material stays and the error is returned (and kept
// for Status until a reload succeeds).
func (c *Certs) Reload() (changed bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	old := c.cur.Load()
	m, err := c.load(now)
	if err != nil {
		// An unchanged set of files that no longer passes (its certificate expired):
		// nothing to reload, and Status says what expired.
		if c.unchanged(old) {
			return false, nil
		}
		c.lastErr, c.lastErrAt = err, now
		return false, err
	}
	c.lastErr = nil
	if m.sum == old.sum {
		return false, nil
	}
	c.cur.Store(m)
	c.reloads++
	return true, nil
}

// unchanged reports whether the files still hold the bytes m was loaded from.
func (c *Certs) unchanged(m *material) bool {
	var parts [][]byte
	for _, p := range []string{c.files.Cert, c.files.Key, c.files.CA} {
		b, err := os.ReadFile(p)
		if err != nil {
			return false
		}
		parts = append(parts, b)
	}
	return sum(parts...) == m.sum
}

// Files returns the paths the certificates are loaded from.
func (c *Certs) Files() Files { return c.files }

// Leaf returns the node's current certificate.
func (c *Certs) Leaf() *x509.Certificate { return c.cur.Load().leaf }

// ServerTLS returns a configuration for one server handshake with the current
// material: the node's certificate, and client certificates checked against the fleet
// CA as clientAuth says (tls.RequireAndVerifyClientCert on the record transport,
// tls.VerifyClientCertIfGiven on the admin API). Take a new one per handshake, so that
// a reload applies to the next one.
func (c *Certs) ServerTLS(clientAuth tls.ClientAuthType) *tls.Config {
	m := c.cur.Load()
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{m.pair},
		ClientCAs:    m.pool,
		ClientAuth:   clientAuth,
	}
}

// ClientTLS returns a configuration for one client handshake with the current
// material: the node's certificate as its client certificate, and the server's
// checked against the fleet CA and required to carry serverName as a DNS SAN exactly
// (TLS's own name check ignores case; node ids do not).
func (c *Certs) ClientTLS(serverName string) *tls.Config {
	m := c.cur.Load()
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{m.pair},
		RootCAs:      m.pool,
		ServerName:   serverName,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 || !slices.Contains(cs.PeerCertificates[0].DNSNames, serverName) {
				return fmt.Errorf("meshtls: the peer's certificate does not name %q exactly", serverName)
			}
			return nil
		},
	}
}

// PeerNames returns the DNS SANs of the verified peer certificate of a TLS
// connection (nil when the peer presented none or it was not verified).
func PeerNames(cs *tls.ConnectionState) []string {
	if cs == nil || len(cs.VerifiedChains) == 0 || len(cs.PeerCertificates) == 0 {
		return nil
	}
	return cs.PeerCertificates[0].DNSNames
}

// Status is what the node's certificates are now, for operators.
type Status struct {
	Files Files `json:"files"`
	// Names are the certificate's DNS SANs; Serial its serial number (hex).
	Names     []string  `json:"names"`
	Serial    string    `json:"serial"`
	Issuer    string    `json:"issuer"`
	NotBefore time.Time `json:"notBefore"`
	NotAfter  time.Time `json:"notAfter"`
	// CAs are the subjects of the fleet CA bundle's certificates.
	CAs []string `json:"cas"`
	// Loaded is when the material in use was read; Reloads counts the reloads that
	// replaced it since start.
	Loaded  time.Time `json:"loaded"`
	Reloads int       `json:"reloads"`
	// ReloadError is why the last reload failed (the previous material stays), until
	// one succeeds.
	ReloadError   string    `json:"reloadError,omitempty"`
	ReloadErrorAt time.Time `json:"reloadErrorAt,omitzero"`
}

// Status returns the current material's description.
func (c *Certs) Status() Status {
	m := c.cur.Load()
	s := Status{Files: c.files, Names: m.leaf.DNSNames, Serial: fmt.Sprintf("%x", m.leaf.SerialNumber),
		Issuer: m.leaf.Issuer.String(), NotBefore: m.leaf.NotBefore.UTC(), NotAfter: m.leaf.NotAfter.UTC(), Loaded: m.loaded.UTC()}
	for _, ca := range m.cas {
		s.CAs = append(s.CAs, ca.Subject.String())
	}
	c.mu.Lock()
	s.Reloads = c.reloads
	if c.lastErr != nil {
		s.ReloadError, s.ReloadErrorAt = c.lastErr.Error(), c.lastErrAt.UTC()
	}
	c.mu.Unlock()
	return s
}

// ExpiryWarning is how long before NotAfter a certificate is said to expire soon: a
// third of its lifetime (when a renewal at two thirds, cert-manager's default, should
// have replaced it), at most 7 days.
func ExpiryWarning(notBefore, notAfter time.Time) time.Duration {
	return min(notAfter.Sub(notBefore)/3, 7*24*time.Hour)
}

// Expiry says where the certificate stands at now: expired, expiring soon (within
// ExpiryWarning), or fine; left is the time until NotAfter (negative once expired).
func (s Status) Expiry(now time.Time) (left time.Duration, soon, expired bool) {
	left = s.NotAfter.Sub(now)
	return left, left < ExpiryWarning(s.NotBefore, s.NotAfter), left <= 0
}
