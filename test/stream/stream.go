package stream

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/meshnode/meshnode/session/wire"
)

// Frame is one frame read from the server.
type Frame struct {
	Header      wire.Header
	HeaderBytes []byte // the raw header, as it came off the wire
	Payload     []byte
}

// Encode returns prefix + header + payload for h, or panics: tests only encode valid
// headers with it (bad ones are built with RawFrame).
func Encode(h wire.Header, payload []byte) []byte {
	b, err := wire.AppendFrame(nil, &h, payload)
	if err != nil {
		panic(fmt.Sprintf("stream: encode %+v: %v", h, err))
	}
	return b
}

// RawFrame returns a frame whose header bytes are taken as they are, so a test can put
// any byte sequence on the wire with a consistent prefix.
func RawFrame(header, payload []byte) []byte {
	b := wire.AppendPrefix(nil, len(header), len(payload))
	b = append(b, header...)
	return append(b, payload...)
}

// HeaderBuilder builds a header byte by byte (big-endian, digest §2.3) without any
// validation.
type HeaderBuilder struct{ B []byte }

// NewHeader starts a header with marker, kind, codec and flags.
func NewHeader(marker, kind, codec, flags byte) *HeaderBuilder {
	return &HeaderBuilder{B: []byte{marker, kind, codec, flags}}
}

// Seq appends a u64 request_seq.
func (h *HeaderBuilder) Seq(seq uint64) *HeaderBuilder {
	h.B = binary.BigEndian.AppendUint64(h.B, seq)
	return h
}

// Name appends u8 length + name.
func (h *HeaderBuilder) Name(name string) *HeaderBuilder {
	h.B = append(h.B, byte(len(name)))
	h.B = append(h.B, name...)
	return h
}

// Metadata appends u16 length + count + entries exactly as given (duplicates allowed).
func (h *HeaderBuilder) Metadata(count byte, kv ...string) *HeaderBuilder {
	blk := []byte{count}
	for i := 0; i+1 < len(kv); i += 2 {
		blk = append(blk, byte(len(kv[i])))
		blk = append(blk, kv[i]...)
		blk = binary.BigEndian.AppendUint16(blk, uint16(len(kv[i+1])))
		blk = append(blk, kv[i+1]...)
	}
	h.B = binary.BigEndian.AppendUint16(h.B, uint16(len(blk)))
	h.B = append(h.B, blk...)
	return h
}

// Correlation appends u8 length + id.
func (h *HeaderBuilder) Correlation(id string) *HeaderBuilder {
	h.B = append(h.B, byte(len(id)))
	h.B = append(h.B, id...)
	return h
}

// Flow appends the 36 flow id bytes as given and the origin byte.
func (h *HeaderBuilder) Flow(id string, origin byte) *HeaderBuilder {
	h.B = append(h.B, id...)
	h.B = append(h.B, origin)
	return h
}

// Bytes returns the header.
func (h *HeaderBuilder) Bytes() []byte { return h.B }

// RawConn is a STREAM client that speaks the wire directly over one byte stream.
type RawConn struct {
	net.Conn
	br *bufio.Reader
}

// NewRawConn wraps an established byte stream (TCP, TLS, a WebSocket NetConn).
func NewRawConn(nc net.Conn) *RawConn {
	return &RawConn{Conn: nc, br: bufio.NewReaderSize(nc, 64<<10)}
}

// Dial connects over plain TCP with Nagle off, so small writes leave at once.
func Dial(addr string) (*RawConn, error) {
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	_ = nc.(*net.TCPConn).SetNoDelay(true)
	return NewRawConn(nc), nil
}

// WriteAll writes b with a deadline.
func (c *RawConn) WriteAll(b []byte, timeout time.Duration) error {
	_ = c.SetWriteDeadline(time.Now().Add(timeout))
	_, err := c.Write(b)
	return err
}

// ReadFrame reads one whole frame, waiting at most timeout. A header that does not
// decode is an error (the server must only send valid frames).
func (c *RawConn) ReadFrame(timeout time.Duration) (Frame, error) {
	_ = c.SetReadDeadline(time.Now().Add(timeout))
	return ReadFrameFrom(c.br)
}

// ReadFrameFrom reads one frame from r.
func ReadFrameFrom(r io.Reader) (Frame, error) {
	var pre [wire.PrefixSize]byte
	if _, err := io.ReadFull(r, pre[:]); err != nil {
		return Frame{}, err
	}
	hl, pl := wire.ParsePrefix(pre[:])
	body := make([]byte, hl+pl)
	if _, err := io.ReadFull(r, body); err != nil {
		return Frame{}, err
	}
	h, err := wire.DecodeHeader(body[:hl])
	if err != nil {
		return Frame{}, fmt.Errorf("server frame does not decode: %w", err)
	}
	return Frame{Header: h, HeaderBytes: body[:hl:hl], Payload: body[hl:]}, nil
}

// SplitFrames parses the whole frames at the start of buf and returns them with the
// bytes of an incomplete trailing frame.
func SplitFrames(buf []byte) ([]Frame, []byte, error) {
	var out []Frame
	for len(buf) >= wire.PrefixSize {
		hl, pl := wire.ParsePrefix(buf)
		n := wire.PrefixSize + hl + pl
		if len(buf) < n {
			break
		}
		h, err := wire.DecodeHeader(buf[wire.PrefixSize : wire.PrefixSize+hl])
		if err != nil {
			return out, buf, err
		}
		body := append([]byte(nil), buf[wire.PrefixSize:n]...)
		out = append(out, Frame{Header: h, HeaderBytes: body[:hl:hl], Payload: body[hl:]})
		buf = buf[n:]
	}
	return out, buf, nil
}

// IsClosed reports whether err is how a reader sees the peer closing the connection:
// end of stream or a reset.
func IsClosed(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// IsTimeout reports whether err is a deadline expiry.
func IsTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

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
