package mesh

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	"github.com/meshnode/meshnode/fault"
	"github.com/meshnode/meshnode/internal/protoactor/remote"
	"github.com/meshnode/meshnode/internal/ratelog"
	"github.com/meshnode/meshnode/mesh/meshpb"
	"github.com/meshnode/meshnode/meshtls"
)

// The mesh's two protections (docs/security.md):
//
//   - Mutual TLS on the record transport (Config.TLS): every gRPC connection between
//     nodes is TLS with a client certificate, both ends checked against the fleet CA;
//     a dialling node also checks that the peer's certificate names the RID of the
//     member it meant to reach, and a receiving node drops every message whose sender
//     RID is not a DNS SAN of the certificate its stream authenticated with (the
//     stream filter, protoactor patch 13). So a process without a fleet certificate
//     can send nothing, and a node cannot speak as another.
//   - Encrypted gossip (Config.GossipKeys, GossipKeyFile) through memberlist's own
//     keyring (AES-GCM), with an optional cluster label (Config.ClusterLabel, GCM
//     authenticated data): a process without a key cannot join, read or forge gossip,
//     and two fleets on one network never merge. The key file is re-read by
//     ReloadGossipKeys, so keys rotate without a restart.
//
// Refusals are counted by reason (meshnode.mesh.tls.refused, meshnode.mesh.gossip.refused,
// and zlink.mesh_node.messages.dropped{reason="identity"}) and logged once per cause
// and interval.

// DropIdentity is the drop reason of a message whose sender RID is not a name of the
// certificate its connection authenticated with (a forged RID).
const DropIdentity = "identity"

// ErrGossipKey: a gossip key or key file that cannot be used (kind NotConfigured).
var ErrGossipKey = fault.New(fault.NotConfigured, "mesh: unusable gossip key")

// ParseGossipKey decodes one gossip key: standard base64 of 16, 24 or 32 bytes
// (AES-128, -192, -256), as `openssl rand -base64 32` prints. Its errors never repeat
// the key.
func ParseGossipKey(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, fmt.Errorf("%w: empty", ErrGossipKey)
	}
	k, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("%w: not standard base64 (%d characters)", ErrGossipKey, len(s))
	}
	if err := memberlist.ValidateKey(k); err != nil {
		return nil, fmt.Errorf("%w: %d bytes; want 16, 24 or 32", ErrGossipKey, len(k))
	}
	return k, nil
}

// ReadGossipKeyFile reads a gossip key file: one base64 key per line, the first the
// primary (the one gossip is encrypted with; every key decrypts), blank lines and
// lines starting with # ignored. Rotation edits it in three steps, each on every node
// before the next: add the new key on a line of its own, move it to the first line,
// remove the old one (docs/security.md).
func ReadGossipKeyFile(path string) ([][]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrGossipKey, err)
	}
	var keys [][]byte
	sc := bufio.NewScanner(bytes.NewReader(b))
	line := 0
	for sc.Scan() {
		line++
		t := strings.TrimSpace(sc.Text())
		if t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		k, err := ParseGossipKey(t)
		if err != nil {
			return nil, fmt.Errorf("%s line %d: %w", path, line, err)
		}
		if !slices.ContainsFunc(keys, func(o []byte) bool { return bytes.Equal(o, k) }) {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%w: %s holds no key", ErrGossipKey, path)
	}
	return keys, nil
}

// KeyID names a gossip key without revealing it: the first 4 bytes of its SHA-256, in
// hex. Operators compare nodes' primary keys by it during a rotation.
func KeyID(k []byte) string {
	s := sha256.Sum256(k)
	return hex.EncodeToString(s[:4])
}

// SecurityStatus is what protects the node's mesh now.
type SecurityStatus struct {
	// TLS describes the node's certificate; nil without mesh TLS.
	TLS *meshtls.Status `json:"tls,omitempty"`
	// Gossip is the gossip encryption.
	Gossip GossipStatus `json:"gossip"`
	// Pending are member lifecycles not admitted: they have not proved their node id
	// with a fleet certificate (mesh TLS only).
	Pending []PendingMember `json:"pending,omitempty"`
	// Refused counts what the node refused since it started: "tls.in.<reason>" (a
	// peer's handshake), "tls.out.<reason>" (a handshake with a peer, or a joining
	// member that did not prove its node id), "gossip.<reason>", "identity" (messages
	// whose sender RID the peer's certificate does not name).
	Refused map[string]int64 `json:"refused"`
}

// GossipStatus describes the gossip encryption.
type GossipStatus struct {
	Encrypted bool `json:"encrypted"`
	// Keys installed; Primary the KeyID of the one gossip is encrypted with.
	Keys    int    `json:"keys"`
	Primary string `json:"primary,omitempty"`
	// KeyIDs of every installed key, the primary first.
	KeyIDs  []string `json:"keyIds,omitempty"`
	KeyFile string   `json:"keyFile,omitempty"`
	Label   string   `json:"label,omitempty"`
	// ReloadError is why the last reload of the key file failed (the keys stay as they
	// were), until one succeeds.
	ReloadError string `json:"reloadError,omitempty"`
}

// security is a node's share of the above: the certificates, the keyring, the
// refusal counts.
type security struct {
	certs   *meshtls.Certs      // nil: no mesh TLS
	keyring *memberlist.Keyring // nil: gossip in the clear
	keyFile string
	label   string
	log     *slog.Logger
	limiter ratelog.Limiter // refusals: once per cause and interval

	kmu       sync.Mutex // ReloadGossipKeys
	keyErr    error
	tlsCounts sync.Map // reason -> *atomic.Int64
	gosCounts sync.Map // reason -> *atomic.Int64
	reg       metric.Registration
}

func newSecurity(cfg Config, log *slog.Logger) (*security, error) {
	s := &security{certs: cfg.TLS, keyFile: cfg.GossipKeyFile, label: cfg.ClusterLabel, log: log}
	if len(cfg.GossipKeys) > 0 && cfg.GossipKeyFile != "" {
		return nil, fmt.Errorf("%w: GossipKeys and GossipKeyFile are both set; give the keys one way", ErrConfig)
	}
	if len(cfg.ClusterLabel) > memberlist.LabelMaxSize {
		return nil, fmt.Errorf("%w: ClusterLabel over %d bytes", ErrConfig, memberlist.LabelMaxSize)
	}
	keys := cfg.GossipKeys
	if cfg.GossipKeyFile != "" {
		var err error
		if keys, err = ReadGossipKeyFile(cfg.GossipKeyFile); err != nil {
			return nil, fmt.Errorf("GossipKeyFile: %w", err)
		}
	}
	if len(keys) > 0 {
		for i, k := range keys {
			if err := memberlist.ValidateKey(k); err != nil {
				return nil, fmt.Errorf("%w: GossipKeys[%d]: %d bytes; want 16, 24 or 32", ErrGossipKey, i, len(k))
			}
		}
		kr, err := memberlist.NewKeyring(keys[1:], keys[0])
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrGossipKey, err)
		}
		s.keyring = kr
	}
	return s, nil
}

// configure applies the gossip protections to memberlist's configuration.
func (s *security) configure(mlc *memberlist.Config) {
	mlc.Label = s.label
	if s.keyring != nil {
		mlc.Keyring = s.keyring
		// Refuse plaintext both ways (memberlist's defaults, said here on purpose: these
		// are the switches of an upgrade from clear gossip).
		mlc.GossipVerifyIncoming, mlc.GossipVerifyOutgoing = true, true
	}
}

// ReloadGossipKeys re-reads the gossip key file (Config.GossipKeyFile) and makes the
// keyring match it: keys new in the file are installed, its first key becomes the
// primary, keys no longer in it are removed, in that order. changed is false when the
// keyring already matched. On an error the keyring stays as it was. Without a key file
// it does nothing.
func (n *Node) ReloadGossipKeys() (changed bool, err error) {
	s := n.sec
	if s.keyFile == "" || s.keyring == nil {
		return false, nil
	}
	s.kmu.Lock()
	defer s.kmu.Unlock()
	keys, err := ReadGossipKeyFile(s.keyFile)
	if err != nil {
		s.keyErr = err
		return false, err
	}
	s.keyErr = nil
	kr := s.keyring
	has := func(set [][]byte, k []byte) bool {
		return slices.ContainsFunc(set, func(o []byte) bool { return bytes.Equal(o, k) })
	}
	for _, k := range keys {
		if !has(kr.GetKeys(), k) {
			if err := kr.AddKey(k); err != nil {
				return changed, fmt.Errorf("%w: %v", ErrGossipKey, err)
			}
			changed = true
		}
	}
	if !bytes.Equal(kr.GetPrimaryKey(), keys[0]) {
		if err := kr.UseKey(keys[0]); err != nil {
			return changed, fmt.Errorf("%w: %v", ErrGossipKey, err)
		}
		changed = true
	}
	for _, k := range kr.GetKeys() {
		if !has(keys, k) {
			if err := kr.RemoveKey(k); err != nil {
				return changed, fmt.Errorf("%w: %v", ErrGossipKey, err)
			}
			changed = true
		}
	}
	if changed {
		n.log.Info("mesh: gossip keys reloaded", "file", s.keyFile, "keys", len(keys), "primary", KeyID(keys[0]))
	}
	return changed, nil
}

// Security returns what protects the node's mesh now.
func (n *Node) Security() SecurityStatus {
	s := n.sec
	out := SecurityStatus{Refused: map[string]int64{}}
	if s.certs != nil {
		st := s.certs.Status()
		out.TLS = &st
	}
	out.Gossip = GossipStatus{KeyFile: s.keyFile, Label: s.label}
	if s.keyring != nil {
		out.Gossip.Encrypted = true
		keys := s.keyring.GetKeys() // the primary first
		out.Gossip.Keys = len(keys)
		out.Gossip.Primary = KeyID(s.keyring.GetPrimaryKey())
		for _, k := range keys {
			out.Gossip.KeyIDs = append(out.Gossip.KeyIDs, KeyID(k))
		}
		s.kmu.Lock()
		if s.keyErr != nil {
			out.Gossip.ReloadError = s.keyErr.Error()
		}
		s.kmu.Unlock()
	}
	for prefix, m := range map[string]*sync.Map{"tls.": &s.tlsCounts, "gossip.": &s.gosCounts} {
		m.Range(func(k, v any) bool {
			out.Refused[prefix+k.(string)] = v.(*atomic.Int64).Load()
			return true
		})
	}
	out.Pending = n.membershipView.PendingMembers()
	if d := n.metrics.dropCount(DropIdentity); d > 0 {
		out.Refused[DropIdentity] = d
	}
	return out
}

func count(m *sync.Map, reason string) {
	v, ok := m.Load(reason)
	if !ok {
		v, _ = m.LoadOrStore(reason, new(atomic.Int64))
	}
	v.(*atomic.Int64).Add(1)
}

// registerMetrics exports the refusals, the certificate's remaining validity and the
// gossip keys.
func (s *security) registerMetrics(mp metric.MeterProvider) error {
	mm := mp.Meter("github.com/meshnode/meshnode/mesh")
	tlsRefused, err := mm.Int64ObservableCounter("meshnode.mesh.tls.refused", metric.WithUnit("{handshake}"),
		metric.WithDescription("TLS handshakes of the record transport that failed, by direction (in: a peer dialled this node; out: this node dialled a peer, or checked a joining member's node id) and reason (no_certificate, unknown_authority, expired, name_mismatch, not_tls, peer_refused, ...)."))
	if err != nil {
		return err
	}
	gossipRefused, err := mm.Int64ObservableCounter("meshnode.mesh.gossip.refused", metric.WithUnit("{message}"),
		metric.WithDescription("Gossip packets and streams refused, by reason (wrong_key, unencrypted, encrypted, label)."))
	if err != nil {
		return err
	}
	expiry, err := mm.Float64ObservableGauge("meshnode.mesh.tls.cert_expiry", metric.WithUnit("s"),
		metric.WithDescription("Seconds until the node's mesh certificate expires (negative once it has)."))
	if err != nil {
		return err
	}
	keys, err := mm.Int64ObservableGauge("meshnode.mesh.gossip.keys", metric.WithUnit("{key}"),
		metric.WithDescription("Gossip encryption keys installed (0: gossip in the clear)."))
	if err != nil {
		return err
	}
	s.reg, err = mm.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		s.tlsCounts.Range(func(k, v any) bool {
			dir, reason, _ := strings.Cut(k.(string), ".")
			o.ObserveInt64(tlsRefused, v.(*atomic.Int64).Load(), metric.WithAttributes(attribute.String("direction", dir), attribute.String("reason", reason)))
			return true
		})
		s.gosCounts.Range(func(k, v any) bool {
			o.ObserveInt64(gossipRefused, v.(*atomic.Int64).Load(), metric.WithAttributes(attribute.String("reason", k.(string))))
			return true
		})
		if s.certs != nil {
			o.ObserveFloat64(expiry, time.Until(s.certs.Leaf().NotAfter).Seconds())
		}
		n := 0
		if s.keyring != nil {
			n = len(s.keyring.GetKeys())
		}
		o.ObserveInt64(keys, int64(n))
		return nil
	}, tlsRefused, gossipRefused, expiry, keys)
	return err
}

func (s *security) unregister() {
	if s.reg != nil {
		_ = s.reg.Unregister()
	}
}

// tlsRefusal counts and logs (once per reason, peer host and interval) a handshake
// that failed; side is "from" for a peer that dialled this node, "to" for one it
// dialled.
func (s *security) tlsRefusal(side, addr, rid string, err error) {
	reason := TLSRefusalReason(err)
	dir := "in"
	if side == "to" {
		dir = "out"
	}
	count(&s.tlsCounts, dir+"."+reason)
	host := addr
	if h, _, e := net.SplitHostPort(addr); e == nil {
		host = h
	}
	msg := "mesh: TLS handshake refused"
	if side == "to" {
		msg = "mesh: TLS handshake with a peer failed"
	}
	args := []any{"reason", reason, side, addr, "err", err}
	if rid != "" {
		args = append(args, "rid", rid)
	}
	s.limiter.Log(s.log, slog.LevelWarn, "tls|"+side+"|"+reason+"|"+host, msg, args...)
}

// TLSRefusalReason classifies a failed handshake for the refusal counts and logs.
func TLSRefusalReason(err error) string {
	var ua x509.UnknownAuthorityError
	var ci x509.CertificateInvalidError
	var hn x509.HostnameError
	var rh tls.RecordHeaderError
	msg := err.Error()
	switch {
	case errors.As(err, &ua):
		return "unknown_authority" // self-signed, or signed by another CA
	case errors.As(err, &ci) && ci.Reason == x509.Expired:
		return "expired" // or not yet valid
	case errors.As(err, &ci) && ci.Reason == x509.IncompatibleUsage:
		return "wrong_usage"
	case errors.As(err, &hn), strings.Contains(msg, "does not name"):
		return "name_mismatch"
	case errors.As(err, &rh):
		return "not_tls"
	case strings.Contains(msg, "didn't provide a certificate"), strings.Contains(msg, "certificate required"):
		return "no_certificate"
	case strings.Contains(msg, "remote error: tls:"):
		return "peer_refused" // the peer refused this node's certificate or handshake
	case errors.Is(err, errNoSuchPeer):
		return "unknown_peer"
	case errors.Is(err, io.EOF), errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, context.DeadlineExceeded):
		return "aborted"
	case errors.Is(err, net.ErrClosed):
		return "aborted"
	}
	var ce *tls.CertificateVerificationError
	if errors.As(err, &ce) {
		return "bad_certificate"
	}
	return "handshake_failed"
}

// errNoSuchPeer: a dial to a remote address no live member has.
var errNoSuchPeer = errors.New("no live member has this remote address")

// tlsCreds are the gRPC transport credentials of the record transport: each
// handshake takes the current certificates (a reload applies to the next one), and a
// client handshake checks that the server's certificate names the RID of the member
// at the dialled address.
type tlsCreds struct{ n *Node }

func (c tlsCreds) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	s := c.n.sec
	mem, ok := c.n.members.liveAt(authority)
	if !ok {
		err := fmt.Errorf("mesh TLS: %w: %s", errNoSuchPeer, authority)
		s.tlsRefusal("to", authority, "", err)
		return nil, nil, err
	}
	conn, info, err := credentials.NewTLS(s.certs.ClientTLS(mem.ID.RID)).ClientHandshake(ctx, authority, raw)
	if err != nil {
		s.tlsRefusal("to", authority, mem.ID.RID, err)
		return nil, nil, err
	}
	return conn, info, nil
}

func (c tlsCreds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	s := c.n.sec
	conn, info, err := credentials.NewTLS(s.certs.ServerTLS(tls.RequireAndVerifyClientCert)).ServerHandshake(raw)
	if err != nil {
		s.tlsRefusal("from", raw.RemoteAddr().String(), "", err)
		return nil, nil, err
	}
	return conn, info, nil
}

func (c tlsCreds) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "tls", SecurityVersion: "1.2"}
}
func (c tlsCreds) Clone() credentials.TransportCredentials { return c }

// OverrideServerName is part of gRPC's interface; the name checked is always the RID
// of the member dialled.
func (c tlsCreds) OverrideServerName(string) error { return nil }

// streamFilter is the record transport's stream filter (protoactor patch 13): the
// names of the certificate a stream authenticated with decide which sender RIDs its
// messages may carry.
func (n *Node) streamFilter(ctx context.Context) (remote.MessageFilter, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil, errors.New("mesh TLS: a stream without a peer")
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return nil, errors.New("mesh TLS: a stream without TLS")
	}
	names := meshtls.PeerNames(&info.State)
	if len(names) == 0 {
		err := errors.New("the client certificate has no DNS name: it cannot speak for any node")
		n.sec.tlsRefusal("from", p.Addr.String(), "", err)
		return nil, err
	}
	addr := p.Addr.String()
	return func(msg any) bool { return n.authorized(names, addr, msg) }, nil
}

// authorized reports whether a message a peer sent may carry the sender RID it
// carries: a record envelope's from_rid, a directory request's from_rid, a forwarded
// record's forwarder_rid must be a DNS SAN of the peer's certificate. Messages that
// carry no sender RID pass (the peer is still a fleet member: the CA vouched for it).
func (n *Node) authorized(names []string, addr string, msg any) bool {
	var claimed string
	switch m := msg.(type) {
	case *meshpb.Followed:
		claimed = m.GetForwarderRid()
	case interface{ GetFromRid() string }:
		claimed = m.GetFromRid()
	default:
		return true
	}
	if slices.Contains(names, claimed) {
		return true
	}
	var gen uint64
	if g, ok := msg.(interface{ GetFromGeneration() uint64 }); ok {
		gen = g.GetFromGeneration()
	}
	n.drop(DropIdentity, NodeID{RID: claimed, Generation: gen},
		fmt.Sprintf("sender RID %q is not a name of the certificate it connected with from %s (%s)", claimed, addr, strings.Join(names, ", ")), nil)
	return false
}

// gossipRefusal classifies a line memberlist logs when it refuses a gossip packet or
// stream (reason, and the address it came from); ok is false for other lines. These
// are memberlist v0.7.0's messages; TestGossip_* fail if an upgrade changes them.
func gossipRefusal(msg string) (reason, from string, ok bool) {
	if strings.Contains(msg, "failed to join") {
		return "", "", false // this node's own join, refused by its seed: not a refusal of this node's
	}
	switch {
	case strings.Contains(msg, "unacceptable label"):
		reason = "label"
	case strings.Contains(msg, "Decrypt packet failed"), strings.Contains(msg, "no installed keys could decrypt"):
		reason = "wrong_key"
	case strings.Contains(msg, "encryption is configured but remote state is not encrypted"):
		reason = "unencrypted"
	case strings.Contains(msg, "remote state is encrypted and encryption is not configured"):
		reason = "encrypted"
	default:
		return "", "", false
	}
	if m := fromAddr.FindStringSubmatch(msg); m != nil {
		from = m[1]
	}
	return reason, from, true
}

var fromAddr = regexp.MustCompile(`from=(\S+)`)

// gossipRefused counts a refused gossip message and logs it once per reason, source
// host and interval (memberlist itself logs every one).
func (s *security) gossipRefused(reason, from, line string) {
	count(&s.gosCounts, reason)
	host := from
	if h, _, err := net.SplitHostPort(from); err == nil {
		host = h
	}
	var why string
	switch reason {
	case "wrong_key":
		why = "not encrypted with any key of this node's keyring (another key, or none)"
	case "unencrypted":
		why = "sent in the clear to a node that requires encrypted gossip"
	case "encrypted":
		why = "encrypted, and this node has no gossip key"
	case "label":
		why = "labelled for another cluster (--cluster-label)"
	}
	s.limiter.Log(s.log, slog.LevelWarn, "gossip|"+reason+"|"+host, "mesh: gossip refused", "reason", reason, "from", from, "why", why, "memberlist", line)
}
