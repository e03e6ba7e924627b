package metrics

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func TestScrape(t *testing.T) {
	m := New()
	m.ObserveServed("echo", OutcomeSuccess, 2*time.Millisecond)
	m.ObserveServed("echo", "INVALID_MESSAGE", time.Millisecond)
	m.ObserveServed("echo", OutcomeSuccess, time.Millisecond)
	m.ObserveSent(OutcomeSuccess, 3*time.Millisecond)
	if err := m.Gauge("meshagent_peers_connected", "Connected peers.", func() float64 { return 2 }); err != nil {
		t.Fatal(err)
	}
	m.ObserveRefused(RefusedSignature)
	srv := httptest.NewServer(Handler(m, nil))
	defer srv.Close()
	code, body := get(t, srv.URL+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("GET /metrics: %d", code)
	}
	for _, want := range []string{
		`meshagent_calls_served_total{capability="echo",outcome="success"} 2`,
		`meshagent_calls_served_total{capability="echo",outcome="INVALID_MESSAGE"} 1`,
		`meshagent_call_handler_seconds_count{capability="echo"} 3`,
		`meshagent_calls_sent_total{outcome="success"} 1`,
		`meshagent_call_latency_seconds_count{outcome="success"} 1`,
		"meshagent_peers_connected 2",
		`meshagent_refusals_total{reason="signature"} 1`,
		`meshagent_refusals_total{reason="replay"} 0`,
		"go_goroutines ",
		"process_cpu_seconds_total ",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("scrape lacks %q", want)
		}
	}
	promtool(t, body)
}

// promtool runs `promtool check metrics` on a scrape when promtool is
// installed.
func promtool(t *testing.T, body string) {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		t.Log("promtool not installed (Debian package prometheus); skipping its check")
		return
	}
	cmd := exec.Command(path, "check", "metrics")
	cmd.Stdin = strings.NewReader(body)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}

func TestHealth(t *testing.T) {
	ready := errors.New("0 of 1 bootstrap peers connected")
	srv := httptest.NewServer(Handler(New(), map[string]Check{
		"store":     func() error { return nil },
		"bootstrap": func() error { return ready },
	}))
	defer srv.Close()
	if code, body := get(t, srv.URL+"/healthz"); code != http.StatusOK || strings.TrimSpace(body) != `{"status":"ok"}` {
		t.Fatalf("/healthz: %d %s", code, body)
	}
	code, body := get(t, srv.URL+"/readyz")
	if code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz while not ready: %d %s", code, body)
	}
	var got struct {
		Status  string            `json:"status"`
		Failing map[string]string `json:"failing"`
	}
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatal(err)
	}
	if got.Status != "not ready" || got.Failing["bootstrap"] != ready.Error() || len(got.Failing) != 1 {
		t.Fatalf("/readyz body: %s", body)
	}
	ready = nil
	if code, body := get(t, srv.URL+"/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz when ready: %d %s", code, body)
	}
	if code, _ := get(t, srv.URL+"/"); code != http.StatusNotFound {
		t.Fatalf("GET /: %d, want 404", code)
	}
}

func TestNilMetrics(t *testing.T) {
	var m *Metrics
	m.ObserveServed("x", OutcomeSuccess, 0)
	m.ObserveSent(OutcomeSuccess, 0)
	m.ObserveRefused(RefusedACL)
	if err := m.Gauge("x", "x", func() float64 { return 0 }); err != nil {
		t.Fatal(err)
	}
}
