package testkit

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"
)

// FleetPKI is a throw-away fleet CA that issues node certificates the way
// docs/security.md tells operators to: one DNS SAN equal to the node id, usable for
// both server and client authentication (a node is both on the record transport).
type FleetPKI struct {
	// CACert is the fleet CA's certificate (PEM).
	CACert []byte
	caKey  *ecdsa.PrivateKey
	ca     *x509.Certificate
}

// NodeCertOptions vary one issued certificate.
type NodeCertOptions struct {
	// NotBefore and NotAfter: default one hour ago and 24 hours from now.
	NotBefore, NotAfter time.Time
	// ExtraNames are more DNS SANs after the node id.
	ExtraNames []string
	// ServerOnly issues a certificate usable for server authentication only.
	ServerOnly bool
}

// NewFleetPKI makes a fleet CA (ECDSA P-256) named cn.
func NewFleetPKI(cn string) (*FleetPKI, error) {
	key, cert, pemCA, err := newCA(cn)
	if err != nil {
		return nil, err
	}
	return &FleetPKI{CACert: pemCA, caKey: key, ca: cert}, nil
}

// Node issues a certificate for node id with the default validity.
func (p *FleetPKI) Node(id string) (certPEM, keyPEM []byte, err error) {
	return p.NodeWith(id, NodeCertOptions{})
}

// NodeWith issues a certificate for node id.
func (p *FleetPKI) NodeWith(id string, o NodeCertOptions) (certPEM, keyPEM []byte, err error) {
	return issue(p.ca, p.caKey, id, o)
}

// SelfSigned makes a certificate for id signed by its own key: no fleet CA vouches
// for it.
func SelfSigned(id string) (certPEM, keyPEM []byte, err error) {
	return issue(nil, nil, id, NodeCertOptions{})
}

func issue(ca *x509.Certificate, caKey *ecdsa.PrivateKey, id string, o NodeCertOptions) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	if o.NotBefore.IsZero() {
		o.NotBefore = time.Now().Add(-time.Hour)
	}
	if o.NotAfter.IsZero() {
		o.NotAfter = time.Now().Add(24 * time.Hour)
	}
	usage := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	if o.ServerOnly {
		usage = usage[:1]
	}
	tmpl := &x509.Certificate{
		SerialNumber: nextSerial(),
		Subject:      pkix.Name{CommonName: id},
		NotBefore:    o.NotBefore,
		NotAfter:     o.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  usage,
		DNSNames:     append([]string{id}, o.ExtraNames...),
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	parent, signer := ca, caKey
	if ca == nil {
		parent, signer = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, signer)
	if err != nil {
		return nil, nil, fmt.Errorf("testkit: issue %s: %w", id, err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), nil
}

// NodeFiles are the PEM files of one node: its certificate, its key and the CA.
type NodeFiles struct{ Cert, Key, CA string }

// WriteNode writes certPEM, keyPEM and the fleet CA into dir as id.crt, id.key and
// ca.crt, and returns their paths.
func (p *FleetPKI) WriteNode(dir, id string, certPEM, keyPEM []byte) (NodeFiles, error) {
	f := NodeFiles{Cert: filepath.Join(dir, id+".crt"), Key: filepath.Join(dir, id+".key"), CA: filepath.Join(dir, "ca.crt")}
	for path, b := range map[string][]byte{f.Cert: certPEM, f.Key: keyPEM, f.CA: p.CACert} {
		if err := os.WriteFile(path, b, 0o600); err != nil {
			return NodeFiles{}, err
		}
	}
	return f, nil
}

// IssueFiles issues a certificate for id with the default validity and writes it
// with its key and the CA into dir (WriteNode).
func (p *FleetPKI) IssueFiles(dir, id string) (NodeFiles, error) {
	cert, key, err := p.Node(id)
	if err != nil {
		return NodeFiles{}, err
	}
	return p.WriteNode(dir, id, cert, key)
}
