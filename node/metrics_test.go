package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/meshagent/meshagent/internal/meshtest"
	"github.com/meshagent/meshagent/metrics"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
)

func scrape(t *testing.T, m *metrics.Metrics) string {
	t.Helper()
	srv := httptest.NewServer(metrics.Handler(m, nil))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d %v", resp.StatusCode, err)
	}
	return string(b)
}

// TestMetrics scrapes a provider that served a success, a handler error,
// a schema refusal, an ACL refusal, an unknown capability and a forged
// request, and a caller that sent them.
func TestMetrics(t *testing.T) {
	schema := json.RawMessage(`{"type":"object","required":["text"]}`)
	pm, cm := metrics.New(), metrics.New()
	p := meshtest.Node(t, 2, node.WithMetrics(pm), node.WithServices(
		echoService("echo"),
		node.Service{Capability: protocol.Capability{Name: "strict", InputSchema: schema}, Handler: node.EchoHandler()},
		node.Service{Capability: protocol.Capability{Name: "private", AuthorizedRequesterIDs: []string{meshtest.ID(t, 3).String()}}, Handler: node.EchoHandler()},
		node.Service{Capability: protocol.Capability{Name: "fails"}, Handler: node.HandlerFunc(func(context.Context, *node.Call) (json.RawMessage, error) {
			return nil, errors.New("disk on fire")
		})},
	))
	a := meshtest.Node(t, 1, node.WithMetrics(cm))
	meshtest.Connect(t, a, p)

	for _, c := range []struct{ action, params string }{
		{"echo", `{"x":1}`}, {"echo", `{}`}, {"fails", `{}`}, {"strict", `{}`}, {"private", `{}`}, {"nope-1", `{}`}, {"nope-2", `{}`},
	} {
		_, _ = call(t, a, p, c.action, c.params)
	}
	s := rawStream(t, a, p)
	if _, err := s.Write(requestFrame(t, signer(t, 5), p.ID(), craft{})); err != nil {
		t.Fatal(err)
	}
	_, err := readAnswer(t, s, p.ID())
	wantCode(t, err, protocol.CodeInvalidSignature)

	got := scrape(t, pm)
	for _, want := range []string{
		`meshagent_calls_served_total{capability="echo",outcome="success"} 2`,
		`meshagent_calls_served_total{capability="fails",outcome="INTERNAL_ERROR"} 1`,
		`meshagent_calls_served_total{capability="strict",outcome="INVALID_MESSAGE"} 1`,
		`meshagent_calls_served_total{capability="private",outcome="UNAUTHORIZED"} 1`,
		`meshagent_calls_served_total{capability="other",outcome="CAPABILITY_NOT_SUPPORTED"} 2`,
		`meshagent_call_handler_seconds_count{capability="echo"} 2`,
		`meshagent_refusals_total{reason="signature"} 1`,
		`meshagent_refusals_total{reason="schema"} 1`,
		`meshagent_refusals_total{reason="acl"} 1`,
		`meshagent_refusals_total{reason="rate_limit"} 0`,
		"meshagent_peers_connected 1",
	} {
		if !strings.Contains(got, want+"\n") {
			t.Errorf("provider scrape lacks %q", want)
		}
	}
	// go-libp2p's resource manager reports into the node's registry.
	for _, want := range []string{"libp2p_rcmgr_limit{", "libp2p_rcmgr_connections{"} {
		if !strings.Contains(got, want) {
			t.Errorf("provider scrape lacks go-libp2p's %s…", want)
		}
	}
	if strings.Contains(got, "nope-") || strings.Contains(got, a.AgentID()) {
		t.Error("a caller-chosen capability name or an agent id became a label")
	}
	got = scrape(t, cm)
	for _, want := range []string{
		`meshagent_calls_sent_total{outcome="success"} 2`,
		`meshagent_calls_sent_total{outcome="INTERNAL_ERROR"} 1`,
		`meshagent_calls_sent_total{outcome="CAPABILITY_NOT_SUPPORTED"} 2`,
		`meshagent_call_latency_seconds_count{outcome="success"} 2`,
	} {
		if !strings.Contains(got, want+"\n") {
			t.Errorf("caller scrape lacks %q", want)
		}
	}
}
