package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/meshagent/meshagent/internal/wait"
)

// TestFiveNodesInALine runs five node processes, each bootstrapped only to
// the one before it and without mDNS, two of which offer translation, and
// drives them as a user would: discovery from the last node, a wildcard
// subscriber on the first node receiving what the last publishes, and
// peers with their heartbeats.
func TestFiveNodesInALine(t *testing.T) {
	dir := t.TempDir()
	byName := filepath.Join(dir, "translate.json")
	writeFile(t, byName, `[{"name": "translate", "description": "en to de", "keywords": ["language"],
		"input_schema": {"type": "object", "required": ["text"]}, "handler": "echo"}]`)
	byKeyword := filepath.Join(dir, "translate-fr.json")
	writeFile(t, byKeyword, `[{"name": "translate", "description": "en to fr",
		"keywords": ["language", "french"], "handler": "echo"}]`)

	var nodes []*nodeProc
	for i := range 5 {
		name := fmt.Sprintf("n%d", i)
		args := []string{"--data", filepath.Join(dir, name)}
		if i > 0 {
			args = append(args, "--bootstrap", nodes[i-1].started.Addrs[0])
		}
		switch i {
		case 1:
			args = append(args, "--capabilities", byName)
		case 3:
			args = append(args, "--capabilities", byKeyword)
		}
		nodes = append(nodes, startNode(t, name, args...))
	}
	first, last := nodes[0], nodes[4]

	discover := func(t *testing.T, want []string, args ...string) {
		t.Helper()
		sort.Strings(want)
		wait.For(t, 60*time.Second, func() error {
			res := meshagent(t, append([]string{"discover", "--api", last.started.API, "--timeout", "5s"}, args...)...)
			if res.code != 0 {
				return fmt.Errorf("discover exited %d: %s", res.code, res.stderr)
			}
			got := lines(res.stdout)
			sort.Strings(got)
			if !slices.Equal(got, want) {
				return fmt.Errorf("discover %v printed %q, want %q", args, got, want)
			}
			return nil
		})
	}
	t.Run("discover from the last node", func(t *testing.T) {
		discover(t, []string{
			nodes[1].started.AgentID + " n1: translate (en to de)",
			nodes[3].started.AgentID + " n3: translate (en to fr)",
		}, "translate")
	})
	t.Run("discover by keyword", func(t *testing.T) {
		discover(t, []string{nodes[3].started.AgentID + " n3: translate (en to fr)"}, "french", "--keyword")
	})
	t.Run("discover --json prints SERVICES_AVAILABLE", func(t *testing.T) {
		res := meshagent(t, "discover", "language", "--keyword", "--json", "--api", last.started.API, "--timeout", "5s").must(t, 0)
		var sa struct {
			ServicesFound []struct {
				AgentID              string `json:"agent_id"`
				RelevantCapabilities []struct {
					Name        string          `json:"name"`
					InputSchema json.RawMessage `json:"input_schema"`
				} `json:"relevant_capabilities"`
			} `json:"services_found"`
			DiscoveredFor string `json:"discovered_for_capability"`
		}
		if err := json.Unmarshal([]byte(res.stdout), &sa); err != nil {
			t.Fatalf("stdout %q: %v", res.stdout, err)
		}
		got := map[string]string{}
		for _, s := range sa.ServicesFound {
			for _, c := range s.RelevantCapabilities {
				got[s.AgentID] = c.Name
				if s.AgentID == nodes[1].started.AgentID && !strings.Contains(string(c.InputSchema), `"required"`) {
					t.Errorf("translate listed without its input schema: %s", c.InputSchema)
				}
			}
		}
		want := map[string]string{nodes[1].started.AgentID: "translate", nodes[3].started.AgentID: "translate"}
		if sa.DiscoveredFor != "language" || fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("SERVICES_AVAILABLE %s, want %v", res.stdout, want)
		}
	})

	t.Run("subscribe on the first node, publish from the last", func(t *testing.T) {
		sub := startSubscriber(t, first.started.API, "outbound:*", 2)
		// Publishing fails (exit 1, no subscriber) until the subscription
		// has reached the mesh; the first publish that reaches a
		// subscriber must be the first line the subscriber prints.
		var published string
		wait.For(t, 60*time.Second, func() error {
			res := meshagent(t, "publish", "outbound:42", "--payload", `{"text":"hi"}`, "--api", last.started.API, "--json")
			if res.code != 0 {
				return fmt.Errorf("publish exited %d: %s", res.code, res.stderr)
			}
			published = res.stdout
			return nil
		})
		var ack struct {
			Topic string `json:"topic"`
			Peers int    `json:"peers"`
		}
		if err := json.Unmarshal([]byte(published), &ack); err != nil || ack.Topic != "outbound:42" || ack.Peers < 1 {
			t.Fatalf("publish printed %q (%v)", published, err)
		}
		meshagent(t, "publish", "outbound:43", "--payload", `{"text":"again"}`, "--api", nodes[2].started.API).must(t, 0)
		msgs := sub.wait(t)
		for i, want := range []struct{ topic, payload string }{{"outbound:42", `{"text":"hi"}`}, {"outbound:43", `{"text":"again"}`}} {
			m := msgs[i]
			if m.Topic != want.topic || string(m.Payload) != want.payload || m.Time.IsZero() {
				t.Errorf("message %d: %+v, want topic %s payload %s", i, m, want.topic, want.payload)
			}
		}
		if msgs[0].From != last.started.AgentID || msgs[1].From != nodes[2].started.AgentID {
			t.Errorf("senders %s, %s; want %s, %s", msgs[0].From, msgs[1].From, last.started.AgentID, nodes[2].started.AgentID)
		}
	})

	t.Run("peers shows heartbeats from across the line", func(t *testing.T) {
		wait.For(t, 30*time.Second, func() error {
			res := meshagent(t, "peers", "--json", "--api", last.started.API)
			if res.code != 0 {
				return fmt.Errorf("peers exited %d: %s", res.code, res.stderr)
			}
			var peers []struct {
				AgentID       string    `json:"agentId"`
				Name          string    `json:"name"`
				Status        string    `json:"status"`
				LastHeartbeat time.Time `json:"lastHeartbeat"`
				Addrs         []string  `json:"addrs"`
			}
			if err := json.Unmarshal([]byte(res.stdout), &peers); err != nil {
				return err
			}
			seen := map[string]bool{}
			for _, p := range peers {
				if p.Status == "available" && !p.LastHeartbeat.IsZero() && len(p.Addrs) > 0 {
					seen[p.Name] = true
				}
			}
			for _, n := range nodes[:4] {
				if !seen[n.name] {
					return fmt.Errorf("the last node does not list %s as available with a heartbeat: %s", n.name, res.stdout)
				}
			}
			return nil
		})
	})

	t.Run("an edited capabilities file is advertised without a signal", func(t *testing.T) {
		// n1 stops offering translate and starts offering summarize.
		writeFile(t, byName, `[{"name": "summarize", "description": "tl;dr", "handler": "echo"}]`)
		discover(t, []string{nodes[3].started.AgentID + " n3: translate (en to fr)"}, "translate")
		discover(t, []string{nodes[1].started.AgentID + " n1: summarize (tl;dr)"}, "summarize")
		if !nodes[1].logged("capabilities reloaded") {
			t.Error("n1 did not log the reload")
		}
	})

	for _, n := range slices.Backward(nodes) {
		n.stop(t, 20*time.Second)
	}
}

type topicMessage struct {
	Topic   string          `json:"topic"`
	From    string          `json:"from"`
	Payload json.RawMessage `json:"payload"`
	Time    time.Time       `json:"time"`
	ID      string          `json:"id"`
}

// subscriber is a `meshagent subscribe --count N` process.
type subscriber struct {
	cmd    *exec.Cmd
	stderr *syncBuffer
	lines  chan string
	exited chan error
}

func startSubscriber(t *testing.T, api, pattern string, count int) *subscriber {
	t.Helper()
	s := &subscriber{stderr: &syncBuffer{}, lines: make(chan string, count+1), exited: make(chan error, 1)}
	s.cmd = exec.Command(binary, "subscribe", pattern, "--api", api, "--count", fmt.Sprint(count))
	s.cmd.Env = env(t)
	s.cmd.Stderr = s.stderr
	out, err := s.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			s.lines <- sc.Text()
		}
		close(s.lines)
		s.exited <- s.cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = s.cmd.Process.Kill()
		if t.Failed() {
			t.Logf("subscribe stderr:\n%s", s.stderr)
		}
	})
	return s
}

// wait returns the messages printed, one JSON object per line, once the
// subscriber has exited after --count of them.
func (s *subscriber) wait(t *testing.T) []topicMessage {
	t.Helper()
	var msgs []topicMessage
	timeout := time.After(30 * time.Second)
	for {
		select {
		case line, ok := <-s.lines:
			if !ok {
				if err := <-s.exited; err != nil {
					t.Fatalf("subscribe exited: %v", err)
				}
				return msgs
			}
			var m topicMessage
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				t.Fatalf("subscribe printed %q: %v", line, err)
			}
			msgs = append(msgs, m)
		case <-timeout:
			t.Fatalf("subscribe printed %d messages in 30s: %+v", len(msgs), msgs)
			return nil
		}
	}
}

func lines(s string) []string {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}
