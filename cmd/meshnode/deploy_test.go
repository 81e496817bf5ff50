package main

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/meshnode/meshnode/internal/testkit"
)

// The deploy recipes (deploy/, docs/deploy.md) are checked here rather than by eye:
// their meshnode arguments parse and pass the same checks serve makes, and each recipe
// has what the docs promise (a non-root user, a drain before stop, readiness on
// /readyz, DNS join through a headless Service).

const deployDir = "../../deploy"

// secretDir writes what deploy/tls/issue.sh makes into a directory of the test's: the
// fleet CA, a certificate and key for each id, a gossip key file and an admin token
// (made here in Go, so the recipes' checks do not depend on openssl; the script has a
// test of its own).
func secretDir(t *testing.T, ids ...string) string {
	t.Helper()
	dir := t.TempDir()
	p, err := testkit.NewFleetPKI("meshnode fleet CA")
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		cert, key, err := p.Node(id)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.WriteNode(dir, id, cert, key); err != nil {
			t.Fatal(err)
		}
	}
	for name, body := range map[string]string{"gossip.keys": "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=\n", "admin.token": "a-test-token-of-some-length\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// withSecrets points the recipe's secret paths (prefix, e.g. /etc/meshnode/secret/) at
// dir, and expands $(MESHNODE_NODE_ID) as the kubelet does.
func withSecrets(args []string, prefix, dir, nodeID string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		a = strings.ReplaceAll(a, "$(MESHNODE_NODE_ID)", nodeID)
		if rest, ok := strings.CutPrefix(a, prefix); ok {
			a = filepath.Join(dir, rest)
		}
		out[i] = a
	}
	return out
}

// allProtectionsOn fails unless cfg turns every protection on.
func allProtectionsOn(t *testing.T, what string, cfg serveConfig) {
	t.Helper()
	if cfg.meshTLSCert == "" || cfg.meshTLSKey == "" || cfg.meshTLSCA == "" || cfg.gossipKeyFile == "" || cfg.clusterLabel == "" ||
		cfg.adminTokenFile == "" || !cfg.adminTLS || cfg.insecureMesh {
		t.Errorf("%s: not every protection is on: mesh TLS %q %q %q, gossip keys %q, label %q, admin token %q, admin TLS %v, insecure %v",
			what, cfg.meshTLSCert, cfg.meshTLSKey, cfg.meshTLSCA, cfg.gossipKeyFile, cfg.clusterLabel, cfg.adminTokenFile, cfg.adminTLS, cfg.insecureMesh)
	}
	for _, p := range protections(cfg) {
		if !p.On {
			t.Errorf("%s: %s is off: %s", what, p.Name, p.Detail)
		}
	}
}

// serveArgsOK checks args (after "serve") as meshnode serve would.
func serveArgsOK(t *testing.T, what string, args []string) serveConfig {
	t.Helper()
	cfg, _, err := parseServeConfig(args, io.Discard)
	if err != nil {
		t.Fatalf("%s: meshnode serve %v: %v", what, args, err)
	}
	return cfg
}

// unitFile reads a systemd unit: section -> key -> value.
func unitFile(t *testing.T, path string) map[string]map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]map[string]string{}
	section := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = strings.Trim(line, "[]")
			out[section] = map[string]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("%s: not a unit line: %q", path, line)
			}
			out[section][strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return out
}

func TestDeploy_SystemdUnit(t *testing.T) {
	u := unitFile(t, filepath.Join(deployDir, "systemd", "meshnode.service"))
	for _, req := range []struct{ section, key string }{
		{"Unit", "Description"}, {"Service", "ExecStart"}, {"Service", "User"}, {"Install", "WantedBy"},
	} {
		if u[req.section][req.key] == "" {
			t.Errorf("[%s] %s missing", req.section, req.key)
		}
	}
	if user := u["Service"]["User"]; user == "root" || user == "0" {
		t.Errorf("runs as %s", user)
	}
	if u["Service"]["KillSignal"] != "SIGTERM" {
		t.Errorf("KillSignal %q: SIGTERM drains", u["Service"]["KillSignal"])
	}
	exec := strings.Fields(u["Service"]["ExecStart"])
	if len(exec) < 2 || exec[1] != "serve" {
		t.Fatalf("ExecStart %q", exec)
	}
	if reload := u["Service"]["ExecReload"]; !strings.Contains(reload, "-HUP") {
		t.Errorf("ExecReload %q: systemctl reload must send SIGHUP (reloads certificates, keys, tokens)", reload)
	}
	// The example file, its secret paths pointed at files of the test's.
	toml, err := os.ReadFile(filepath.Join(deployDir, "systemd", "meshnode.toml"))
	if err != nil {
		t.Fatal(err)
	}
	example := filepath.Join(t.TempDir(), "meshnode.toml")
	if err := os.WriteFile(example, []byte(strings.ReplaceAll(string(toml), "/etc/meshnode/tls/", secretDir(t, "node-a")+"/")), 0o600); err != nil {
		t.Fatal(err)
	}
	args := exec[2:]
	for i, a := range args {
		if a == "/etc/meshnode/meshnode.toml" {
			args[i] = example
		}
	}
	cfg := serveArgsOK(t, "systemd ExecStart", args)
	allProtectionsOn(t, "systemd", cfg)
	stop, err := strconv.Atoi(u["Service"]["TimeoutStopSec"])
	if err != nil || time.Duration(stop)*time.Second <= cfg.drainTimeout || !cfg.drainActors {
		t.Errorf("TimeoutStopSec %q must exceed --drain-timeout %s, and SIGTERM must move the Actors (--drain-actors %v)", u["Service"]["TimeoutStopSec"], cfg.drainTimeout, cfg.drainActors)
	}
	if cfg.nodeID != "node-a" || len(cfg.join) != 2 {
		t.Errorf("the example configuration file was not read: %+v", cfg)
	}
}

func TestDeploy_Dockerfile(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(deployDir, "docker", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	var froms, runs []string
	var user, entry, cmd string
	for _, line := range strings.Split(string(b), "\n") {
		word, rest, _ := strings.Cut(strings.TrimSpace(line), " ")
		switch word {
		case "FROM":
			froms = append(froms, rest)
		case "RUN":
			runs = append(runs, rest)
		case "USER":
			user = rest
		case "ENTRYPOINT":
			entry = rest
		case "CMD":
			cmd = rest
		}
	}
	if len(froms) < 2 || !strings.Contains(froms[0], " AS build") {
		t.Errorf("not a multi-stage build: FROM %q", froms)
	}
	static := false
	for _, r := range runs {
		if strings.Contains(r, "CGO_ENABLED=0") && strings.Contains(r, "go build") {
			static = true
		}
	}
	if !static {
		t.Error("the binary is not built static (CGO_ENABLED=0 go build)")
	}
	if user == "" || strings.HasPrefix(user, "root") || strings.HasPrefix(user, "0") {
		t.Errorf("USER %q: must be non-root", user)
	}
	var ep, args []string
	if err := json.Unmarshal([]byte(entry), &ep); err != nil || len(ep) != 1 {
		t.Fatalf("ENTRYPOINT %q: want the binary, exec form", entry)
	}
	if err := json.Unmarshal([]byte(cmd), &args); err != nil || len(args) == 0 || args[0] != "serve" {
		t.Fatalf("CMD %q: want serve ..., exec form", cmd)
	}
	// What the comments tell the operator to set, the mounted directory the test's.
	dir := secretDir(t, "node-a")
	t.Setenv("MESHNODE_ADVERTISE_HOST", "172.17.0.2")
	t.Setenv("MESHNODE_NODE_ID", "node-a")
	t.Setenv("MESHNODE_MESH_TLS_CERT", filepath.Join(dir, "node-a.crt"))
	t.Setenv("MESHNODE_MESH_TLS_KEY", filepath.Join(dir, "node-a.key"))
	cfg := serveArgsOK(t, "Dockerfile CMD", withSecrets(args[1:], "/etc/meshnode/secret/", dir, "node-a"))
	allProtectionsOn(t, "Dockerfile", cfg)
}

func TestDeploy_KubernetesStatefulSetWithHeadlessService(t *testing.T) {
	f, err := os.Open(filepath.Join(deployDir, "k8s", "meshnode.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	type container struct {
		Args []string
		Env  []struct {
			Name      string
			Value     string
			ValueFrom struct {
				FieldRef struct {
					FieldPath string `yaml:"fieldPath"`
				} `yaml:"fieldRef"`
			} `yaml:"valueFrom"`
		}
		Ports []struct {
			Name          string
			ContainerPort int `yaml:"containerPort"`
		}
		ReadinessProbe struct {
			HTTPGet struct{ Path, Port string } `yaml:"httpGet"`
		} `yaml:"readinessProbe"`
		Lifecycle struct {
			PreStop struct{ Exec struct{ Command []string } } `yaml:"preStop"`
		}
		VolumeMounts []struct {
			Name      string
			MountPath string `yaml:"mountPath"`
			ReadOnly  bool   `yaml:"readOnly"`
		} `yaml:"volumeMounts"`
	}
	type object struct {
		APIVersion string `yaml:"apiVersion"`
		Kind       string
		Metadata   struct{ Name string }
		Spec       struct {
			ClusterIP                string `yaml:"clusterIP"`
			PublishNotReadyAddresses bool   `yaml:"publishNotReadyAddresses"`
			ServiceName              string `yaml:"serviceName"`
			Replicas                 int
			Template                 struct {
				Spec struct {
					TerminationGracePeriodSeconds int `yaml:"terminationGracePeriodSeconds"`
					SecurityContext               struct {
						RunAsNonRoot bool `yaml:"runAsNonRoot"`
					} `yaml:"securityContext"`
					Containers []container
					Volumes    []struct {
						Name   string
						Secret struct {
							SecretName string `yaml:"secretName"`
						}
					}
				}
			}
		}
	}
	dec := yaml.NewDecoder(f)
	var services = map[string]object{}
	var sts *object
	for {
		var o object
		err := dec.Decode(&o)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("manifest: %v", err)
		}
		switch {
		case o.Kind == "Service" && o.APIVersion == "v1":
			services[o.Metadata.Name] = o
		case o.Kind == "StatefulSet" && o.APIVersion == "apps/v1":
			sts = &o
		default:
			t.Fatalf("unexpected object %s %s", o.APIVersion, o.Kind)
		}
	}
	if sts == nil {
		t.Fatal("no StatefulSet")
	}
	headless, ok := services[sts.Spec.ServiceName]
	if !ok || headless.Spec.ClusterIP != "None" || !headless.Spec.PublishNotReadyAddresses {
		t.Fatalf("the StatefulSet's service %q must be headless and publish not-ready addresses: %+v", sts.Spec.ServiceName, headless.Spec)
	}
	if sts.Spec.Replicas < 3 || !sts.Spec.Template.Spec.SecurityContext.RunAsNonRoot {
		t.Errorf("replicas %d, runAsNonRoot %v", sts.Spec.Replicas, sts.Spec.Template.Spec.SecurityContext.RunAsNonRoot)
	}
	c := sts.Spec.Template.Spec.Containers[0]
	fromPod := map[string]string{}
	for _, e := range c.Env {
		fromPod[e.Name] = e.ValueFrom.FieldRef.FieldPath
	}
	if fromPod["MESHNODE_ADVERTISE_HOST"] != "status.podIP" {
		t.Errorf("the advertised host must be the pod IP: %v", fromPod)
	}
	t.Setenv("MESHNODE_ADVERTISE_HOST", "10.244.1.7")
	t.Setenv("MESHNODE_NODE_ID", "meshnode-0")
	if len(c.Args) == 0 || c.Args[0] != "serve" {
		t.Fatalf("args %q", c.Args)
	}
	// Every protection on, from the Secret mounted read-only where the args look.
	secretMount := ""
	for _, v := range sts.Spec.Template.Spec.Volumes {
		for _, m := range c.VolumeMounts {
			if m.Name == v.Name && v.Secret.SecretName == "meshnode-security" && m.ReadOnly {
				secretMount = m.MountPath
			}
		}
	}
	if secretMount == "" {
		t.Fatal("the Secret meshnode-security is not mounted read-only")
	}
	dir := secretDir(t, "meshnode-0")
	cfg := serveArgsOK(t, "StatefulSet args", withSecrets(c.Args[1:], secretMount+"/", dir, "meshnode-0"))
	allProtectionsOn(t, "StatefulSet", cfg)
	if len(cfg.join) != 1 || !strings.HasPrefix(cfg.join[0], sts.Spec.ServiceName+":") {
		t.Errorf("join %v: want the headless service's DNS name", cfg.join)
	}
	adminPort := strings.TrimPrefix(cfg.admin, "0.0.0.0:")
	var probePort string
	for _, p := range c.Ports {
		if p.Name == c.ReadinessProbe.HTTPGet.Port {
			probePort = strconv.Itoa(p.ContainerPort)
		}
	}
	if c.ReadinessProbe.HTTPGet.Path != "/readyz" || probePort != adminPort {
		t.Errorf("readiness probe %+v on port %s, want /readyz on the admin port %s", c.ReadinessProbe.HTTPGet, probePort, adminPort)
	}
	pre := c.Lifecycle.PreStop.Exec.Command
	if len(pre) < 2 || pre[1] != "drain" {
		t.Errorf("preStop %q: want meshnode drain", pre)
	}
	// The drain goes over TLS with the token (plain HTTP credentials are refused under
	// --admin-tls): its flags parse as the command takes them.
	preArgs := strings.Join(pre, " ")
	for _, want := range []string{"https://127.0.0.1:" + adminPort, "--token-file " + secretMount + "/admin.token", "--ca-file " + secretMount + "/ca.crt"} {
		if !strings.Contains(preArgs, want) {
			t.Errorf("preStop %q: want %s", pre, want)
		}
	}
	if time.Duration(sts.Spec.Template.Spec.TerminationGracePeriodSeconds)*time.Second <= cfg.drainTimeout {
		t.Errorf("terminationGracePeriodSeconds %d must exceed --drain-timeout %s", sts.Spec.Template.Spec.TerminationGracePeriodSeconds, cfg.drainTimeout)
	}
}

// deploy/tls/issue.sh, the openssl recipe of docs/security.md, makes certificates and
// keys that serve accepts for the ids it was given (and only for those), a gossip key
// file and a token; run again with RENEW=1 it issues new certificates.
func TestDeploy_IssueScriptMakesWhatServeAccepts(t *testing.T) {
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Fatal("deploy/tls/issue.sh needs openssl on PATH (Debian: apt-get install openssl)")
	}
	dir := t.TempDir()
	run := func(env ...string) {
		t.Helper()
		cmd := exec.Command("sh", filepath.Join(deployDir, "tls", "issue.sh"), dir, "node-a", "node-b")
		cmd.Env = append(os.Environ(), env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("issue.sh: %v: %s", err, out)
		}
	}
	run()
	secret := filepath.Join(dir, "secret")
	if _, err := os.Stat(filepath.Join(secret, "ca.key")); err == nil {
		t.Error("the CA's key is in the directory that goes to the nodes")
	}
	args := func(id string) []string {
		return []string{"--node-id", id, "--mesh-tls-cert", filepath.Join(secret, id+".crt"), "--mesh-tls-key", filepath.Join(secret, id+".key"),
			"--mesh-tls-ca", filepath.Join(secret, "ca.crt"), "--gossip-key-file", filepath.Join(secret, "gossip.keys"),
			"--admin-token-file", filepath.Join(secret, "admin.token"), "--admin-tls", "--cluster-label", "x"}
	}
	serveArgsOK(t, "node-a", args("node-a"))
	cfg := serveArgsOK(t, "node-b", args("node-b"))
	allProtectionsOn(t, "issue.sh", cfg)
	wrong := args("node-a")
	wrong[1] = "node-b" // node-a's certificate claimed by node-b
	if _, _, err := parseServeConfig(wrong, io.Discard); err == nil || !strings.Contains(err.Error(), "--node-id") {
		t.Fatalf("node-a's certificate as node-b: %v", err)
	}
	before, err := os.ReadFile(filepath.Join(secret, "node-a.crt"))
	if err != nil {
		t.Fatal(err)
	}
	run("RENEW=1")
	after, _ := os.ReadFile(filepath.Join(secret, "node-a.crt"))
	if string(after) == string(before) {
		t.Fatal("RENEW=1 kept the old certificate")
	}
	serveArgsOK(t, "node-a renewed", args("node-a"))
}
