package main

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/meshnode/meshnode/internal/testkit"
)

// scrape reads and parses a node's /metrics.
func scrape(t *testing.T, admin string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics of %s: %v", admin, err)
	}
	return fams
}

// label returns the value of label name of m ("" when absent).
func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// /metrics follows what a Prometheus user expects: no otel_scope_* labels, HELP on
// every family, counters named _total and typed counter (and nothing else so named),
// the job queue's high-water mark and cumulative pause as a gauge and a counter of
// their own, quorum a 0/1 gauge, members by state, histograms of relayed request
// latency, Actor turn duration and record send latency with exactly the observations
// made, target_info naming the node, meshnode_build_info, and only the meshnode_ and
// zlink_ prefixes (docs/admin.md says why two) besides the Go and process collectors.
func TestBinaryMetricsFollowPrometheusConventions(t *testing.T) {
	base := []string{"--stream", "tcp://127.0.0.1:0", "--admin", "127.0.0.1:0", "--mesh", "127.0.0.1:0", "--remote", "127.0.0.1:0"}
	a, stopA := startBinary(t, append(base, "--node-id", "node-a")...)
	defer func() {
		if err := stopA(); err != nil {
			t.Errorf("stop node-a: %v", err)
		}
	}()
	b, stopB := startBinary(t, append(base, "--node-id", "node-b", "--join", a["mesh"])...)
	defer func() {
		if err := stopB(); err != nil {
			t.Errorf("stop node-b: %v", err)
		}
	}()
	testkit.Eventually(t, 10*time.Second, "both nodes see two members", func() bool {
		return countMembers(t, a["admin"]) == 2 && countMembers(t, b["admin"]) == 2
	})
	// A session on node-a bound to a room on node-b: relayed requests, Actor turns on
	// node-b, records from node-a to node-b.
	c := testkit.DialConnector(t, a["tcp"], 10*time.Second)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Request(ctx, "bind", map[string]string{"actor": "metrics-room"}, nil); err != nil {
		t.Fatalf("bind: %v", err)
	}
	var where actorJSON
	if code := getJSON(t, "http://"+a["admin"]+"/v1/actors/metrics-room", &where); code != http.StatusOK {
		t.Fatalf("GET /v1/actors/metrics-room: %d", code)
	}
	if where.Node != "node-b" {
		var moved actorJSON
		if code := doJSON(t, http.MethodPost, "http://"+a["admin"]+"/v1/actors/metrics-room/relocate?to=node-b", &moved); code != http.StatusOK || moved.Node != "node-b" {
			t.Fatalf("relocate to node-b: %d %+v", code, moved)
		}
	}
	const echoes = 7
	for range echoes {
		var out struct{ Node string }
		if err := c.Request(ctx, "room.echo", map[string]int{"n": 1}, &out); err != nil || out.Node != "node-b" {
			t.Fatalf("room.echo: %+v %v", out, err)
		}
	}

	fa, fb := scrape(t, a["admin"]), scrape(t, b["admin"])
	for node, fams := range map[string]map[string]*dto.MetricFamily{"node-a": fa, "node-b": fb} {
		for name, f := range fams {
			if f.GetHelp() == "" {
				t.Errorf("%s: %s has no HELP", node, name)
			}
			if !strings.HasPrefix(name, "meshnode_") && !strings.HasPrefix(name, "zlink_") && !strings.HasPrefix(name, "go_") &&
				!strings.HasPrefix(name, "process_") && name != "target_info" {
				t.Errorf("%s: %s has none of the prefixes meshnode_, zlink_, go_, process_", node, name)
			}
			isCounter := f.GetType() == dto.MetricType_COUNTER
			if isCounter != strings.HasSuffix(name, "_total") {
				t.Errorf("%s: %s is a %s: a counter and only a counter ends in _total", node, name, f.GetType())
			}
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					if strings.HasPrefix(l.GetName(), "otel_scope") {
						t.Errorf("%s: %s has label %s", node, name, l.GetName())
					}
					if l.GetName() == "state" && (l.GetValue() == "peak" || l.GetValue() == "cumulative") {
						t.Errorf("%s: %s has a series state=%q: a high-water mark or total among levels", node, name, l.GetValue())
					}
				}
			}
		}
		for name, typ := range map[string]dto.MetricType{
			"zlink_host_application_job_queue_jobs_peak":              dto.MetricType_GAUGE,
			"zlink_host_application_job_queue_paused_seconds_total":   dto.MetricType_COUNTER,
			"zlink_host_application_job_queue_pause_duration_seconds": dto.MetricType_GAUGE,
			"meshnode_actor_quorum":                                   dto.MetricType_GAUGE,
			"meshnode_mesh_members":                                   dto.MetricType_GAUGE,
			"meshnode_build_info":                                     dto.MetricType_GAUGE,
			"target_info":                                             dto.MetricType_GAUGE,
			"meshnode_actor_turn_duration_seconds":                    dto.MetricType_HISTOGRAM,
		} {
			if f := fams[name]; f == nil || f.GetType() != typ {
				t.Errorf("%s: %s is %v, want a %s", node, name, f.GetType(), typ)
			}
		}
		if f := fams["meshnode_actor_quorum"]; f != nil && f.GetMetric()[0].GetGauge().GetValue() != 1 {
			t.Errorf("%s: quorum %v, want 1", node, f.GetMetric()[0].GetGauge().GetValue())
		}
		if _, ok := fams["meshnode_actor_quorum_ratio"]; ok {
			t.Errorf("%s: the quorum gauge is still named a ratio", node)
		}
		if f := fams["meshnode_mesh_members"]; f != nil {
			got := map[string]float64{}
			for _, m := range f.GetMetric() {
				got[label(m, "state")] = m.GetGauge().GetValue()
			}
			if want := map[string]float64{"alive": 2, "suspect": 0, "dead": 0, "left": 0}; !equalMaps(got, want) {
				t.Errorf("%s: members by state %v, want %v", node, got, want)
			}
		}
		if f := fams["target_info"]; f != nil {
			m := f.GetMetric()[0]
			if label(m, "node_id") != node || label(m, "service_name") != "meshnode" || label(m, "service_instance_id") != node || label(m, "node_generation") == "" {
				t.Errorf("%s: target_info %v", node, m.GetLabel())
			}
		}
		if f := fams["meshnode_build_info"]; f != nil {
			m := f.GetMetric()[0]
			if label(m, "version") == "" || label(m, "stream_wire") != "1" || label(m, "service_wire") != "1" || label(m, "node_meta") != "3" || label(m, "state_snapshot") != "1" {
				t.Errorf("%s: meshnode_build_info %v", node, m.GetLabel())
			}
		}
	}
	// The histograms hold exactly what happened where: the session's node timed each
	// relayed request, the room's node its turns, the session's node its records to
	// node-b.
	hist := func(fams map[string]*dto.MetricFamily, name string) *dto.Histogram {
		f := fams[name]
		if f == nil || f.GetType() != dto.MetricType_HISTOGRAM || len(f.GetMetric()) != 1 {
			t.Errorf("%s: %v, want one histogram", name, f)
			return &dto.Histogram{}
		}
		return f.GetMetric()[0].GetHistogram()
	}
	if h := hist(fa, "meshnode_binding_relayed_request_duration_seconds"); h.GetSampleCount() != echoes || h.GetSampleSum() <= 0 || h.GetSampleSum() > 10 {
		t.Errorf("relayed request latency on node-a: %d samples summing to %vs, want %d", h.GetSampleCount(), h.GetSampleSum(), echoes)
	}
	if h := hist(fb, "meshnode_actor_turn_duration_seconds"); h.GetSampleCount() < 1 {
		t.Errorf("Actor turn duration on node-b: %d samples", h.GetSampleCount())
	}
	if h := hist(fa, "meshnode_mesh_record_send_latency_seconds"); h.GetSampleCount() < 1 {
		t.Errorf("record send latency on node-a: %d samples", h.GetSampleCount())
	}
}

func equalMaps(a, b map[string]float64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
