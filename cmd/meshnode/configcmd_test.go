package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// configLine returns the VALUE and SOURCE columns of name in meshnode config's table.
func configLine(t *testing.T, table, name string) (string, string) {
	t.Helper()
	for _, line := range strings.Split(table, "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && f[0] == name {
			if len(f) == 2 { // empty value
				return "", f[1]
			}
			return f[1], strings.Join(f[2:], " ")
		}
	}
	t.Fatalf("no %s in\n%s", name, table)
	return "", ""
}

// Every flag can also come from MESHNODE_<NAME> and from a TOML file; precedence flag >
// env > file > default, and meshnode config says where each value came from.
func TestBinaryConfig_FlagEnvFilePrecedenceAndSources(t *testing.T) {
	file := filepath.Join(t.TempDir(), "meshnode.toml")
	if err := os.WriteFile(file, []byte(`node-id = "from-file"
max-relayed-requests = 64
relay-timeout = "5s"
join = ["127.0.0.1:7000", "127.0.0.1:7001"]
`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("MESHNODE_MAX_RELAYED_REQUESTS", "32")
	t.Setenv("MESHNODE_RELAY_TIMEOUT", "7s")
	t.Setenv("MESHNODE_WS_ORIGIN", "a.example,b.example")
	var out, errb bytes.Buffer
	if err := run(context.Background(), []string{"config", "--config", file, "--relay-timeout", "9s"}, &out, &errb); err != nil {
		t.Fatalf("meshnode config: %v (%s)", err, errb.String())
	}
	table := out.String()
	for _, tc := range []struct{ name, value, source string }{
		{"node-id", "from-file", "file " + file},
		{"join", "127.0.0.1:7000,127.0.0.1:7001", "file " + file},
		{"max-relayed-requests", "32", "env MESHNODE_MAX_RELAYED_REQUESTS"},
		{"ws-origin", "a.example,b.example", "env MESHNODE_WS_ORIGIN"},
		{"relay-timeout", "9s", "flag"},
		{"mesh-timing", "lan", "default"},
	} {
		if v, src := configLine(t, table, tc.name); v != tc.value || src != tc.source {
			t.Errorf("%s = %q from %q, want %q from %q", tc.name, v, src, tc.value, tc.source)
		}
	}
}

// The configuration file may be YAML (.yaml or .yml) instead of TOML: the same keys,
// a repeatable flag as a sequence, the same precedence and sources.
func TestBinaryConfig_YAMLFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "meshnode.yaml")
	if err := os.WriteFile(file, []byte(`node-id: from-yaml
max-relayed-requests: 64
relay-timeout: 5s
join:
  - 127.0.0.1:7000
  - 127.0.0.1:7001
`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("MESHNODE_MAX_RELAYED_REQUESTS", "32")
	var out, errb bytes.Buffer
	if err := run(context.Background(), []string{"config", "--config", file}, &out, &errb); err != nil {
		t.Fatalf("meshnode config: %v (%s)", err, errb.String())
	}
	table := out.String()
	for _, tc := range []struct{ name, value, source string }{
		{"node-id", "from-yaml", "file " + file},
		{"join", "127.0.0.1:7000,127.0.0.1:7001", "file " + file},
		{"relay-timeout", "5s", "file " + file},
		{"max-relayed-requests", "32", "env MESHNODE_MAX_RELAYED_REQUESTS"},
		{"config", file, "flag"},
	} {
		if v, src := configLine(t, table, tc.name); v != tc.value || src != tc.source {
			t.Errorf("%s = %q from %q, want %q from %q", tc.name, v, src, tc.value, tc.source)
		}
	}
}

// A bad key or value names the key and its source, and serve fails the same way.
func TestBinaryConfig_BadKeyOrValueNamesItsSource(t *testing.T) {
	dir := t.TempDir()
	unknown := filepath.Join(dir, "unknown.toml")
	badValue := filepath.Join(dir, "bad.toml")
	unknownYAML := filepath.Join(dir, "unknown.yml")
	badYAML := filepath.Join(dir, "bad.yaml")
	_ = os.WriteFile(unknown, []byte("no-such-key = 1\n"), 0o600)
	_ = os.WriteFile(badValue, []byte("mesh-timing = \"wan\"\n"), 0o600)
	_ = os.WriteFile(unknownYAML, []byte("no-such-key: 1\n"), 0o600)
	_ = os.WriteFile(badYAML, []byte("mesh-timing: wan\n"), 0o600)
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want []string
	}{
		{"unknown key in the file", nil, []string{"--config", unknown}, []string{unknown, `"no-such-key"`}},
		{"bad value in the file", nil, []string{"--config", badValue}, []string{"config file " + badValue + " key mesh-timing", "wan"}},
		{"unknown key in a YAML file", nil, []string{"--config", unknownYAML}, []string{unknownYAML, `"no-such-key"`}},
		{"bad value in a YAML file", nil, []string{"--config", badYAML}, []string{"config file " + badYAML + " key mesh-timing", "wan"}},
		{"bad value in the environment", map[string]string{"MESHNODE_MAX_CONNECTIONS": "lots"}, nil, []string{"MESHNODE_MAX_CONNECTIONS"}},
		{"bad value in the environment, checked", map[string]string{"MESHNODE_FRAME_TIMEOUT": "0s"}, nil, []string{"environment variable MESHNODE_FRAME_TIMEOUT"}},
		{"missing file", nil, []string{"--config", filepath.Join(dir, "absent.toml")}, []string{"absent.toml"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			for _, cmd := range [][]string{append([]string{"config"}, tc.args...), append([]string{"serve"}, tc.args...)} {
				var out, errb bytes.Buffer
				err := run(context.Background(), cmd, &out, &errb)
				if err == nil {
					t.Fatalf("%v: no error", cmd)
				}
				for _, w := range tc.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("%v: %q does not name %q", cmd, err, w)
					}
				}
			}
		})
	}
}

// Issue 27, item 7: meshnode config shows --store and --data-dir as serve applies them:
// by default the embedded store in ./meshnode-data/<node id>, else what was given.
func TestConfigShowsStoreAndDataDir(t *testing.T) {
	t.Setenv("MESHNODE_DATA_DIR", "")    // restored after the test: TestMain's, for nodes
	_ = os.Unsetenv("MESHNODE_DATA_DIR") // here the default is the point
	var out, errb bytes.Buffer
	if err := run(context.Background(), []string{"config", "--node-id", "node a/1"}, &out, &errb); err != nil {
		t.Fatal(err, errb.String())
	}
	if v, src := configLine(t, out.String(), "data-dir"); v != "meshnode-data/node_a_1" || src != "default" {
		t.Errorf("data-dir = %q from %q:\n%s", v, src, out.String())
	}
	if v, src := configLine(t, out.String(), "store"); v != "bolt:meshnode-data/node_a_1/state.db" || src != "default" {
		t.Errorf("store = %q from %q:\n%s", v, src, out.String())
	}
	out.Reset()
	if err := run(context.Background(), []string{"config", "--store", "postgres://app:pw@db:5432/app", "--data-dir", "/var/lib/mn"}, &out, &errb); err != nil {
		t.Fatal(err, errb.String())
	}
	for _, want := range []string{"postgres://app:xxxxx@db:5432/app", "/var/lib/mn"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("config output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), ":pw@") {
		t.Errorf("config shows the store's password:\n%s", out.String())
	}
	if err := run(context.Background(), []string{"config", "--store", "mysql://x"}, &out, &errb); err == nil || !strings.Contains(err.Error(), "flag --store") {
		t.Errorf("a bad --store: %v, want an error naming flag --store", err)
	}
}

// meshnode config shows the defaults serve applies (the two stream listeners, not an
// empty value) and the OpenTelemetry settings in force: off and why, or where spans
// go, with which sampler, and which variable said so.
func TestBinaryConfig_ShowsDefaultsAndOpenTelemetry(t *testing.T) {
	for _, k := range []string{"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
		"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG"} {
		t.Setenv(k, "")
	}
	var out bytes.Buffer
	if err := run(context.Background(), []string{"config"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if v, src := configLine(t, out.String(), "stream"); v != "tcp://127.0.0.1:7400,ws://127.0.0.1:7401/" || src != "default" {
		t.Errorf("stream = %q from %q, want the two default listeners", v, src)
	}
	if v, src := configLine(t, out.String(), "traces"); v != "off" || !strings.Contains(src, "neither OTEL_TRACES_EXPORTER nor an OTLP endpoint") {
		t.Errorf("traces = %q (%q), want off and why\n%s", v, src, out.String())
	}
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
	t.Setenv("OTEL_TRACES_SAMPLER", "traceidratio")
	t.Setenv("OTEL_TRACES_SAMPLER_ARG", "0.25")
	out.Reset()
	if err := run(context.Background(), []string{"config", "--stream", "tcp://127.0.0.1:0"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	table := out.String()
	for _, tc := range []struct{ name, value, source string }{
		{"stream", "tcp://127.0.0.1:0", "flag"},
		{"traces", "OTLP", "http/protobuf OTEL_EXPORTER_OTLP_ENDPOINT is set"},
		{"endpoint", "http://127.0.0.1:4318/v1/traces", "env OTEL_EXPORTER_OTLP_ENDPOINT"},
		{"sampler", "traceidratio:0.25", "env OTEL_TRACES_SAMPLER"},
	} {
		if v, src := configLine(t, table, tc.name); v != tc.value || src != tc.source {
			t.Errorf("%s = %q from %q, want %q from %q\n%s", tc.name, v, src, tc.value, tc.source, table)
		}
	}
}
