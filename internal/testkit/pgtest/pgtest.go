// Package pgtest starts a throw-away PostgreSQL server for a test: Debian's server
// binaries (initdb, pg_ctl from /usr/lib/postgresql/N/bin) on a temporary directory,
// listening on a free port of 127.0.0.1 (and on the extra addresses asked for), with
// password authentication over TCP. It runs them as the postgres user when the test
// runs as root (initdb refuses root). A test that needs PostgreSQL fails, never skips,
// when the server cannot start: scripts/ensure-postgresql.sh installs it (make test and
// .ci/run call it).
package pgtest

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/meshnode/meshnode/internal/testkit/freeport"
)

// Server is one running PostgreSQL server.
type Server struct {
	// Port is the TCP port it listens on, on every address.
	Port     int
	Password string // of the user postgres
	bin      string
	dir      string // base directory: data/, sock/, log
	cred     *syscall.Credential
	listen   []string
	running  bool
}

// Options adjusts a server.
type Options struct {
	// Listen adds addresses to 127.0.0.1 (a partition test's namespaces reach the
	// server over their management links).
	Listen []string
}

// BinDir returns the directory of the PostgreSQL server binaries, or an error saying
// how to install them.
func BinDir() (string, error) {
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_ctl")
	if len(matches) == 0 {
		if p, err := exec.LookPath("pg_ctl"); err == nil {
			return filepath.Dir(p), nil
		}
		return "", fmt.Errorf("no PostgreSQL server binaries (pg_ctl, initdb) in /usr/lib/postgresql/*/bin or on PATH: " +
			"run scripts/ensure-postgresql.sh (Debian's postgresql package), as make test and .ci/run do")
	}
	sort.Strings(matches) // the newest major version last
	return filepath.Dir(matches[len(matches)-1]), nil
}

// Start starts a server and stops it (and removes its files) when the test ends.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	bin, err := BinDir()
	if err != nil {
		t.Fatal(err)
	}
	base, err := os.MkdirTemp("", "meshnode-pg-")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{bin: bin, dir: base, listen: append([]string{"127.0.0.1"}, opts.Listen...)}
	t.Cleanup(func() {
		s.stop("immediate")
		_ = os.RemoveAll(base)
	})
	var pw [12]byte
	_, _ = rand.Read(pw[:])
	s.Password = hex.EncodeToString(pw[:])
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("pgtest: running as root, and initdb refuses root; no postgres user to run it as: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		// MkdirTemp made base 0700 for root: the server's user must reach it.
		if err := os.Chmod(base, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"data", "sock"} {
		if err := os.Mkdir(filepath.Join(base, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	pwfile := filepath.Join(base, "pwfile")
	if err := os.WriteFile(pwfile, []byte(s.Password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if s.cred != nil {
		for _, p := range []string{filepath.Join(base, "data"), filepath.Join(base, "sock"), pwfile} {
			if err := os.Chown(p, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if out, err := s.run("initdb", "-D", filepath.Join(base, "data"), "-U", "postgres", "--pwfile", pwfile,
		"--auth-local", "trust", "--auth-host", "scram-sha-256", "--no-sync", "-E", "UTF8", "--locale", "C"); err != nil {
		t.Fatalf("pgtest: initdb: %v: %s", err, out)
	}
	_ = os.Remove(pwfile)
	// Every address a node may come from (the partition test's management links).
	hba := "local all all trust\nhost all all 127.0.0.1/32 scram-sha-256\n"
	for _, a := range opts.Listen {
		hba += "host all all " + subnet24(a) + " scram-sha-256\n"
	}
	if err := os.WriteFile(filepath.Join(base, "data", "pg_hba.conf"), []byte(hba), 0o600); err != nil {
		t.Fatal(err)
	}
	if s.cred != nil {
		_ = os.Chown(filepath.Join(base, "data", "pg_hba.conf"), int(s.cred.Uid), int(s.cred.Gid))
	}
	// A port below the ephemeral range, so that no test's outgoing connection takes
	// it between the choice and pg_ctl; should another server take it anyway, choose
	// again (the log says so) rather than fail the test.
	for attempt := 1; ; attempt++ {
		s.Port = freeport.Below(t)
		out, err := s.start()
		if err == nil {
			break
		}
		log, _ := os.ReadFile(filepath.Join(s.dir, "data", "server.log"))
		if attempt < 5 && bytes.Contains(log, []byte("Address already in use")) {
			continue
		}
		t.Fatalf("pgtest: pg_ctl start on port %d: %v: %s\n%s", s.Port, err, out, log)
	}
	return s
}

func subnet24(ip string) string {
	p := net.ParseIP(ip).To4()
	if p == nil {
		return ip + "/128"
	}
	return fmt.Sprintf("%d.%d.%d.0/24", p[0], p[1], p[2])
}

// URL is the connection URL for host (127.0.0.1 when empty), as user postgres.
func (s *Server) URL(host string) string {
	if host == "" {
		host = "127.0.0.1"
	}
	return fmt.Sprintf("postgres://postgres:%s@%s/postgres?sslmode=disable", s.Password, net.JoinHostPort(host, strconv.Itoa(s.Port)))
}

// StartAgain starts the server (after Stop), on the same port and data.
func (s *Server) StartAgain(t testing.TB) {
	t.Helper()
	if out, err := s.start(); err != nil {
		log, _ := os.ReadFile(filepath.Join(s.dir, "data", "server.log"))
		t.Fatalf("pgtest: pg_ctl start on port %d: %v: %s\n%s", s.Port, err, out, log)
	}
}

func (s *Server) start() ([]byte, error) {
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=%s", s.Port, filepath.Join(s.dir, "sock"), strings.Join(s.listen, ","))
	// A fresh log per attempt: the bind check reads this attempt's only.
	logPath := filepath.Join(s.dir, "data", "server.log")
	_ = os.Remove(logPath)
	out, err := s.run("pg_ctl", "-D", filepath.Join(s.dir, "data"), "-o", opts, "-l", logPath, "-w", "-t", "60", "start")
	if err == nil {
		s.running = true
	}
	return out, err
}

// Stop stops the server (fast shutdown: connections are cut, the data stays).
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	if out, err := s.stop("fast"); err != nil {
		t.Fatalf("pgtest: pg_ctl stop: %v: %s", err, out)
	}
}

func (s *Server) stop(mode string) ([]byte, error) {
	if !s.running {
		return nil, nil
	}
	s.running = false
	return s.run("pg_ctl", "-D", filepath.Join(s.dir, "data"), "-m", mode, "-w", "-t", "60", "stop")
}

// SQL runs statements through psql's -c on the server's socket, as postgres, and
// returns the output (unaligned, tuples only).
func (s *Server) SQL(t testing.TB, sql string) string {
	t.Helper()
	out, err := s.Exec(sql)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Exec is SQL for a goroutine other than the test's: it returns the error.
func (s *Server) Exec(sql string) (string, error) {
	out, err := s.run(filepath.Join(s.bin, "psql"), "-h", filepath.Join(s.dir, "sock"), "-p", strconv.Itoa(s.Port), "-U", "postgres",
		"-d", "postgres", "-v", "ON_ERROR_STOP=1", "-A", "-t", "-q", "-c", sql)
	if err != nil {
		return "", fmt.Errorf("pgtest: psql %q: %w: %s", sql, err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

func (s *Server) run(name string, args ...string) ([]byte, error) {
	if !filepath.IsAbs(name) {
		name = filepath.Join(s.bin, name)
	}
	if _, err := os.Stat(name); err != nil && filepath.Base(name) == "psql" {
		name = "psql" // the client may live elsewhere
	}
	cmd := exec.Command(name, args...)
	cmd.Dir = s.dir
	cmd.Env = append(os.Environ(), "LC_ALL=C", "PGTZ=UTC")
	if s.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
		cmd.Env = append(cmd.Env, "HOME="+s.dir)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.Bytes(), err
}
