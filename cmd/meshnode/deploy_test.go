package main

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// The deploy recipes (deploy/, docs/deploy.md) are checked here rather than by eye:
// their meshnode arguments parse and pass the same checks serve makes, and each recipe
// has what the docs promise (a non-root user, a drain before stop, readiness on
// /readyz, DNS join through a headless Service).

const deployDir = "../../deploy"

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
	args := exec[2:]
	for i, a := range args {
		if a == "/etc/meshnode/meshnode.toml" {
			args[i] = filepath.Join(deployDir, "systemd", "meshnode.toml") // the example file
		}
	}
	cfg := serveArgsOK(t, "systemd ExecStart", args)
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
	t.Setenv("MESHNODE_ADVERTISE_HOST", "172.17.0.2") // what the comment tells the operator to set
	serveArgsOK(t, "Dockerfile CMD", args[1:])
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
	cfg := serveArgsOK(t, "StatefulSet args", c.Args[1:])
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
	if time.Duration(sts.Spec.Template.Spec.TerminationGracePeriodSeconds)*time.Second <= cfg.drainTimeout {
		t.Errorf("terminationGracePeriodSeconds %d must exceed --drain-timeout %s", sts.Spec.Template.Spec.TerminationGracePeriodSeconds, cfg.drainTimeout)
	}
}
