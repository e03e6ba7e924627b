package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/rpc"
)

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
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

// TestHealthAndMetrics drives /healthz, /readyz and /metrics on the local
// API of running nodes: a node without bootstrap peers is ready; one whose
// only bootstrap peer does not exist answers 503 naming it; one
// bootstrapped to the first becomes ready. "/" stays the WebSocket API.
func TestHealthAndMetrics(t *testing.T) {
	dir := t.TempDir()
	a := startNode(t, "alice", "--data", filepath.Join(dir, "a"), "--key", filepath.Join(dir, "a.key"))
	base := "http://" + a.started.API
	if code, body := httpGet(t, base+"/healthz"); code != http.StatusOK || strings.TrimSpace(body) != `{"status":"ok"}` {
		t.Fatalf("/healthz: %d %s", code, body)
	}
	if code, body := httpGet(t, base+"/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz of a node without bootstrap peers: %d %s", code, body)
	}
	if code, _ := httpGet(t, base+"/"); code != http.StatusUpgradeRequired {
		t.Fatalf("GET / answered %d, want 426 (the WebSocket API)", code)
	}

	var ghost struct {
		AgentID string `json:"agentId"`
	}
	if err := json.Unmarshal([]byte(meshagent(t, "id", "--key", filepath.Join(dir, "ghost.key"), "--json").must(t, 0).stdout), &ghost); err != nil {
		t.Fatal(err)
	}
	lonely := startNode(t, "lonely", "--data", filepath.Join(dir, "l"), "--key", filepath.Join(dir, "l.key"),
		"--bootstrap", fmt.Sprintf("/ip4/127.0.0.1/tcp/1/p2p/%s", ghost.AgentID))
	code, body := httpGet(t, "http://"+lonely.started.API+"/readyz")
	var nr struct {
		Status  string            `json:"status"`
		Failing map[string]string `json:"failing"`
	}
	if err := json.Unmarshal([]byte(body), &nr); err != nil {
		t.Fatalf("/readyz body %q: %v", body, err)
	}
	if code != http.StatusServiceUnavailable || nr.Status != "not ready" || !strings.Contains(nr.Failing["bootstrap"], "bootstrap") {
		t.Fatalf("/readyz with an unreachable bootstrap peer: %d %s", code, body)
	}
	if _, ok := nr.Failing["store"]; ok {
		t.Fatalf("store reported not ready: %s", body)
	}

	b := startNode(t, "bob", "--data", filepath.Join(dir, "b"), "--key", filepath.Join(dir, "b.key"), "--bootstrap", a.started.Addrs[0])
	wait.For(t, 20*time.Second, func() error {
		if code, body := httpGet(t, "http://"+b.started.API+"/readyz"); code != http.StatusOK {
			return fmt.Errorf("/readyz: %d %s", code, body)
		}
		return nil
	})
	cl, err := rpc.Dial(context.Background(), a.started.API)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	wait.For(t, 20*time.Second, func() error {
		_, body := httpGet(t, base+"/metrics")
		for _, want := range []string{"meshagent_peers_connected 1\n", "meshagent_bus_clients 1\n", `meshagent_refusals_total{reason="signature"} 0`, "go_goroutines "} {
			if !strings.Contains(body, want) {
				return fmt.Errorf("/metrics lacks %q", want)
			}
		}
		return nil
	})
}

// TestMetricsListener checks --metrics ADDR: a separate listener with
// /metrics, /healthz and /readyz and nothing of the API.
func TestMetricsListener(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	dir := t.TempDir()
	startNode(t, "carol", "--data", filepath.Join(dir, "c"), "--key", filepath.Join(dir, "c.key"), "--metrics", addr)
	base := "http://" + addr
	if code, body := httpGet(t, base+"/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz on --metrics: %d %s", code, body)
	}
	if code, body := httpGet(t, base+"/metrics"); code != http.StatusOK || !strings.Contains(body, "meshagent_peers_connected 0\n") {
		t.Fatalf("/metrics on --metrics: %d %.300s", code, body)
	}
	if path, err := exec.LookPath("promtool"); err != nil {
		t.Log("promtool not installed (Debian package prometheus); skipping its check of the scrape")
	} else {
		_, body := httpGet(t, base+"/metrics")
		cmd := exec.Command(path, "check", "metrics")
		cmd.Stdin = strings.NewReader(body)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool check metrics: %v\n%s", err, out)
		}
	}
	if code, _ := httpGet(t, base+"/"); code != http.StatusNotFound {
		t.Fatalf("GET / on --metrics answered %d, want 404 (no API there)", code)
	}
	if r := meshagent(t, "node", "--metrics", "nonsense", "--data", filepath.Join(dir, "d")); r.code == 0 || !strings.Contains(r.stderr, "--metrics") {
		t.Fatalf("--metrics nonsense: exit %d, stderr %s", r.code, r.stderr)
	}
}
