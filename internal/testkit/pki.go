package testkit

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"
)

// PKI is a throw-away CA with a server certificate for 127.0.0.1 and a client
// certificate, all as PEM.
type PKI struct {
	CACert, ServerCert, ServerKey, ClientCert, ClientKey []byte
	// OtherCACert/OtherClient* are a second, unrelated CA and a client certificate it
	// signed: a client the server must reject.
	OtherClientCert, OtherClientKey []byte
}

// NewPKI generates a PKI with ECDSA P-256 keys.
func NewPKI() (*PKI, error) {
	caKey, caCert, caPEM, err := newCA("stream test CA")
	if err != nil {
		return nil, err
	}
	p := &PKI{CACert: caPEM}
	if p.ServerCert, p.ServerKey, err = newLeaf(caCert, caKey, "127.0.0.1", true); err != nil {
		return nil, err
	}
	if p.ClientCert, p.ClientKey, err = newLeaf(caCert, caKey, "stream test client", false); err != nil {
		return nil, err
	}
	otherKey, otherCert, _, err := newCA("unrelated CA")
	if err != nil {
		return nil, err
	}
	if p.OtherClientCert, p.OtherClientKey, err = newLeaf(otherCert, otherKey, "stranger", false); err != nil {
		return nil, err
	}
	return p, nil
}

// Files writes the PEM files into dir and returns their paths.
func (p *PKI) Files(dir string) (ca, cert, key string, err error) {
	ca, cert, key = filepath.Join(dir, "ca.pem"), filepath.Join(dir, "server.pem"), filepath.Join(dir, "server.key")
	for path, b := range map[string][]byte{ca: p.CACert, cert: p.ServerCert, key: p.ServerKey} {
		if err = os.WriteFile(path, b, 0o600); err != nil {
			return "", "", "", err
		}
	}
	return ca, cert, key, nil
}

var serial atomic.Int64

func nextSerial() *big.Int { return big.NewInt(serial.Add(1)) }

func newCA(cn string) (*ecdsa.PrivateKey, *x509.Certificate, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          nextSerial(),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, nil, err
	}
	return key, cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

func newLeaf(ca *x509.Certificate, caKey *ecdsa.PrivateKey, cn string, server bool) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: nextSerial(),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	} else {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), nil
}

// ServerTLS returns the server certificate as a tls.Certificate and a pool that trusts
// the CA, for servers and clients configured in code rather than from files.
func (p *PKI) ServerTLS() (tls.Certificate, *x509.CertPool, error) {
	cert, err := tls.X509KeyPair(p.ServerCert, p.ServerKey)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(p.CACert) {
		return tls.Certificate{}, nil, errors.New("testkit: the CA certificate does not parse")
	}
	return cert, pool, nil
}
