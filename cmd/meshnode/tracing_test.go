package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshnode/meshnode/internal/testkit"
	"github.com/meshnode/meshnode/test/proc"
)

// otelVars are the variables that decide tracing; every case sets them all.
var otelVars = []string{"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
	"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG", "OTEL_BSP_SCHEDULE_DELAY"}

// The node says at start where traces go, or that they are off. A collector that
// refuses every batch is reported through the node's own log (its format, not the
// OpenTelemetry SDK's line on stderr), once however many batches fail, and the spans
// are counted failed on /metrics.
func TestBinaryTracingSaysWhereAndReportsExportErrorsThroughItsLog(t *testing.T) {
	for _, k := range otelVars {
		t.Setenv(k, "")
	}
	base := []string{"--stream", "tcp://127.0.0.1:0", "--admin", "127.0.0.1:0", "--mesh", "127.0.0.1:0", "--remote", "127.0.0.1:0", "--node-id", "solo"}
	off, stop := startBinary(t, base...)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(off["traces"], "off (set OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_TRACES_EXPORTER=otlp") {
		t.Errorf("with nothing set the node says traces: %q", off["traces"])
	}

	var batches atomic.Int64
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	collector := &http.Server{ReadHeaderTimeout: time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		batches.Add(1)
		http.Error(w, "refused by the test", http.StatusBadRequest) // not retried
	})}
	served := make(chan struct{})
	go func() { defer close(served); _ = collector.Serve(ln) }()
	defer func() { _ = collector.Close(); <-served }()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+ln.Addr().String())
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "20") // ms: a batch goes out soon after its spans

	var log testkit.LockedBuffer
	a, stop := startBinaryLogging(t, &log, base...)
	defer func() {
		if err := stop(); err != nil {
			t.Errorf("stop: %v", err)
		}
	}()
	want := "OTLP http/protobuf to http://" + ln.Addr().String() + "/v1/traces, sampler parentbased_always_on (OTEL_EXPORTER_OTLP_ENDPOINT is set)"
	if a["traces"] != want {
		t.Errorf("the node says traces: %q, want %q", a["traces"], want)
	}
	c := testkit.DialConnector(t, a["tcp"], 10*time.Second)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	echo := func() {
		t.Helper()
		if err := c.Request(ctx, "echo", map[string]int{"n": 1}, nil); err != nil {
			t.Fatal(err)
		}
	}
	echo()
	testkit.Eventually(t, 10*time.Second, "a first batch refused", func() bool { return batches.Load() >= 1 })
	echo()
	testkit.Eventually(t, 10*time.Second, "a second batch refused", func() bool { return batches.Load() >= 2 })
	testkit.Eventually(t, 10*time.Second, "the refused spans counted", func() bool {
		text, err := scrapeText("http://" + a["admin"] + "/metrics")
		return err == nil && proc.Sum(text, "meshnode_trace_spans_total", "outcome=failed") >= 2 &&
			proc.Sum(text, "meshnode_trace_spans_total", "outcome=exported") == 0 && proc.Sum(text, "meshnode_trace_spans_total", "outcome=dropped") == 0
	})
	lines := regexp.MustCompile(`(?m)^time=\S+ level=WARN msg="opentelemetry error" err=.*400 Bad Request.*$`).FindAllString(log.String(), -1)
	if len(lines) != 1 {
		t.Errorf("%d log lines of the refused batches, want 1 (one a minute):\n%s", len(lines), log.String())
	}
	if other := regexp.MustCompile(`(?m)^\d{4}/\d\d/\d\d \d\d:\d\d:\d\d `).FindString(log.String()); other != "" {
		t.Errorf("a line in another format than the node's log: %q", other)
	}
}

func scrapeText(url string) (string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}
