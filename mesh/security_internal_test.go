package mesh

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/fault"
	"github.com/meshnode/meshnode/internal/testkit"
	"github.com/meshnode/meshnode/meshtls"
)

// The lines memberlist v0.7.0 logs when it refuses gossip are classified (an upgrade
// that changes them fails here), with the address they came from.
func TestGossip_RefusalLinesOfMemberlistAreClassified(t *testing.T) {
	cases := map[string]string{
		"[ERR] memberlist: Decrypt packet failed: cipher: message authentication failed from=10.0.0.9:7946":               "wrong_key",
		"[ERR] memberlist: failed to receive: no installed keys could decrypt the message from=10.0.0.9:51234":            "wrong_key",
		"[ERR] memberlist: failed to receive: encryption is configured but remote state is not encrypted from=10.0.0.9:1": "unencrypted",
		"[ERR] memberlist: failed to receive: remote state is encrypted and encryption is not configured from=10.0.0.9:1": "encrypted",
		`[ERR] memberlist: discarding packet with unacceptable label "staging": from=10.0.0.9:7946`:                       "label",
		`[ERR] memberlist: discarding stream with unacceptable label "staging": from=10.0.0.9:7946`:                       "label",
	}
	for line, want := range cases {
		reason, from, ok := gossipRefusal(line)
		if !ok || reason != want || !strings.HasPrefix(from, "10.0.0.9:") {
			t.Errorf("%q: %q from %q (%v), want %q", line, reason, from, ok, want)
		}
	}
	for _, line := range []string{"[DEBUG] memberlist: Stream connection from=127.0.0.1:1",
		"[DEBUG] memberlist: failed to join 127.0.0.1:7946: no installed keys could decrypt the message"} {
		if _, _, ok := gossipRefusal(line); ok {
			t.Errorf("%q taken for a refusal of this node's", line)
		}
	}
}

// A refused gossip message is counted every time and logged once per reason and source
// host per interval.
func TestGossip_RefusalsAreCountedAndLoggedOncePerInterval(t *testing.T) {
	var buf testkit.LockedBuffer
	s := &security{log: slog.New(slog.NewTextHandler(&buf, nil))}
	w := slogWriter{log: s.log, sec: s}
	for range 50 {
		_, _ = w.Write([]byte("[ERR] memberlist: Decrypt packet failed: cipher: message authentication failed from=10.0.0.9:7946"))
	}
	_, _ = w.Write([]byte("[ERR] memberlist: Decrypt packet failed: cipher: message authentication failed from=10.0.0.8:7946"))
	v, _ := s.gosCounts.Load("wrong_key")
	if got := v.(interface{ Load() int64 }).Load(); got != 51 {
		t.Fatalf("counted %d, want 51", got)
	}
	if got := strings.Count(buf.String(), "mesh: gossip refused"); got != 2 {
		t.Fatalf("logged %d times, want 2 (once per source host): %s", got, buf.String())
	}
}

// Gossip keys: base64 of 16, 24 or 32 bytes; a key file needs one; errors never repeat
// a key.
func TestGossip_KeysAndKeyFilesAreChecked(t *testing.T) {
	for _, bad := range []string{"", "not base64!", "c2hvcnQ=", strings.Repeat("A", 60)} {
		_, err := ParseGossipKey(bad)
		if !errors.Is(err, ErrGossipKey) || !errors.Is(err, fault.NotConfigured) {
			t.Errorf("%q: %v", bad, err)
		}
		if bad != "" && strings.Contains(err.Error(), bad) {
			t.Errorf("the error repeats the key: %v", err)
		}
	}
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("# nothing yet\n\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadGossipKeyFile(empty); !errors.Is(err, ErrGossipKey) || !strings.Contains(err.Error(), "holds no key") {
		t.Fatalf("empty file: %v", err)
	}
	bad := filepath.Join(dir, "bad")
	if err := os.WriteFile(bad, []byte("MDEyMzQ1Njc4OWFiY2RlZg==\nc2hvcnQ=\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadGossipKeyFile(bad); !errors.Is(err, ErrGossipKey) || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("bad second line: %v", err)
	}
	good := filepath.Join(dir, "good")
	if err := os.WriteFile(good, []byte("# primary first\nMDEyMzQ1Njc4OWFiY2RlZg==\n\nZmVkY2JhOTg3NjU0MzIxMA==\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	keys, err := ReadGossipKeyFile(good)
	if err != nil || len(keys) != 2 || !bytes.Equal(keys[0], []byte("0123456789abcdef")) {
		t.Fatalf("good file: %q, %v", keys, err)
	}
}

// A member is admitted only if the certificate at its remote address names its RID: a
// node with a valid fleet certificate for mallory that gossips the RID node-9 is not.
func TestVerify_MemberMustPresentACertificateForItsRID(t *testing.T) {
	p, err := testkit.NewFleetPKI("fleet")
	if err != nil {
		t.Fatal(err)
	}
	load := func(id string) *meshtls.Certs {
		f, err := p.IssueFiles(t.TempDir(), id)
		if err != nil {
			t.Fatal(err)
		}
		c, err := meshtls.Load(meshtls.Files{Cert: f.Cert, Key: f.Key, CA: f.CA}, id)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	start := func(id string) *Node {
		n, err := Start(context.Background(), Config{RID: id, TLS: load(id), Preset: PresetTest})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(n.kill)
		return n
	}
	a, mallory := start("node-a"), start("mallory")
	ctx := context.Background()
	if err := a.verifyMember(ctx, Member{ID: NodeID{RID: "mallory"}, RemoteAddr: mallory.RemoteAddr()}); err != nil {
		t.Fatalf("mallory as mallory: %v", err)
	}
	err = a.verifyMember(ctx, Member{ID: NodeID{RID: "node-9"}, RemoteAddr: mallory.RemoteAddr()})
	if err == nil || TLSRefusalReason(err) != "name_mismatch" {
		t.Fatalf("mallory as node-9: %v (%s), want name_mismatch", err, TLSRefusalReason(err))
	}
}
