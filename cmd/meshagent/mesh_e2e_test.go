package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
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

// TestConsensusVote runs three voters (two vote yes through an exec
// handler, one never answers) and a caller, asks them with
// `meshagent consensus`, and verifies a signed vote with `meshagent verify`.
func TestConsensusVote(t *testing.T) {
	dir := t.TempDir()
	yes := filepath.Join(dir, "yes.json")
	writeFile(t, yes, `[{"name": "consensus.vote", "handler": {"exec": ["sh", "-c",
		"cat >/dev/null; echo '{\"vote\":\"yes\",\"rationale\":\"tech debt\",\"confidence\":0.85}'"]}}]`)
	silent := filepath.Join(dir, "silent.json")
	writeFile(t, silent, `[{"name": "consensus.vote", "handler": {"exec": ["sleep", "30"], "timeout": "60s"}}]`)
	caller := startNode(t, "pm", "--data", filepath.Join(dir, "pm"))
	var voters []*nodeProc
	for i, caps := range []string{yes, yes, silent} {
		voters = append(voters, startNode(t, fmt.Sprintf("v%d", i), "--data", filepath.Join(dir, fmt.Sprint(i)),
			"--bootstrap", caller.started.Addrs[0], "--capabilities", caps))
	}
	var ids []string
	for _, v := range voters {
		ids = append(ids, v.started.AgentID)
	}
	// Wait until the caller knows every voter.
	wait.For(t, 30*time.Second, func() error {
		for _, v := range voters {
			if _, err := capabilitiesOf(t, caller.started.API, v.started.AgentID); err != nil {
				return err
			}
		}
		return nil
	})
	res := meshagent(t, "consensus", "--agents", strings.Join(ids, ","), "--question", "Refactor auth?", "--options", "yes,no,defer",
		"--threshold", "0.66", "--deadline", "2s", "--json", "--api", caller.started.API).must(t, 0)
	var out struct {
		Outcome  string         `json:"outcome"`
		Decision string         `json:"decision"`
		Tally    map[string]int `json:"tally"`
		Votes    []struct {
			Agent  string          `json:"agent"`
			Vote   string          `json:"vote"`
			Error  string          `json:"error"`
			Signed json.RawMessage `json:"signed"`
		} `json:"votes"`
	}
	if err := json.Unmarshal([]byte(res.stdout), &out); err != nil {
		t.Fatalf("stdout %q: %v", res.stdout, err)
	}
	if out.Outcome != "reached" || out.Decision != "yes" || out.Tally["yes"] != 2 || len(out.Votes) != 3 || !strings.HasPrefix(out.Votes[2].Error, "TIMEOUT") {
		t.Fatalf("result %s", res.stdout)
	}
	vote := filepath.Join(dir, "vote.json")
	writeFile(t, vote, string(out.Votes[0].Signed))
	verify := func(file string) result {
		cmd := exec.Command(binary, "verify")
		cmd.Env = env(t)
		f, err := os.Open(file)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		cmd.Stdin = f
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		_ = cmd.Run()
		return result{code: cmd.ProcessState.ExitCode(), stdout: o.String(), stderr: e.String()}
	}
	verify(vote).must(t, 0)
	writeFile(t, vote, strings.Replace(string(out.Votes[0].Signed), "tech debt", "tech dept", 1))
	verify(vote).must(t, 4)

	// The table for people.
	res = meshagent(t, "consensus", "--agents", ids[0], "--question", "Ship?", "--options", "no,yes", "--threshold", "1",
		"--deadline", "5s", "--api", caller.started.API).must(t, 0)
	if !strings.HasPrefix(res.stdout, "reached: yes") || !strings.Contains(res.stdout, "tech debt") {
		t.Errorf("stdout %q", res.stdout)
	}
	// Only the silent voter: its vote could have decided it, so the vote
	// timed out (exit 7, TIMEOUT's status).
	res = meshagent(t, "consensus", "--agents", ids[2], "--question", "Ship?", "--deadline", "1s", "--api", caller.started.API).must(t, 7)
	if !strings.Contains(res.stderr, "timed out") {
		t.Errorf("stderr %q", res.stderr)
	}
}

// TestTaskStatusAndCancel: a long request sent with `meshagent call` is
// followed from another process with `meshagent task status` and
// cancelled with `meshagent task cancel`.
func TestTaskStatusAndCancel(t *testing.T) {
	dir := t.TempDir()
	caps := filepath.Join(dir, "caps.json")
	writeFile(t, caps, `[{"name": "approval", "handler": {"exec": ["sleep", "60"], "timeout": "120s"}}]`)
	provider := startNode(t, "librarian", "--data", filepath.Join(dir, "p"), "--capabilities", caps)
	requester := startNode(t, "agent", "--data", filepath.Join(dir, "r"), "--bootstrap", provider.started.Addrs[0])
	wait.For(t, 30*time.Second, func() error {
		_, err := capabilitiesOf(t, requester.started.API, provider.started.AgentID)
		return err
	})
	call := exec.Command(binary, "call", provider.started.AgentID, "approval", "--timeout", "100s", "--api", requester.started.API)
	call.Env = env(t)
	stderr := &syncBuffer{}
	call.Stderr = stderr
	if err := call.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- call.Wait() }()
	t.Cleanup(func() { _ = call.Process.Kill() })
	var taskID string
	wait.For(t, 20*time.Second, func() error {
		line, _, _ := strings.Cut(stderr.String(), "\n")
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "task" {
			taskID = f[1]
			return nil
		}
		return fmt.Errorf("call has not named its task: %q", stderr.String())
	})
	wait.For(t, 20*time.Second, func() error {
		res := meshagent(t, "task", "status", taskID, "--json", "--api", requester.started.API)
		if res.code != 0 || !strings.Contains(res.stdout, `"state":"APPROVED"`) {
			return fmt.Errorf("task status exited %d: %s %s", res.code, res.stdout, res.stderr)
		}
		return nil
	})
	res := meshagent(t, "task", "cancel", taskID, "--api", requester.started.API).must(t, 0)
	if !strings.HasPrefix(res.stdout, "task "+taskID+": ") {
		t.Errorf("cancel printed %q", res.stdout)
	}
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		t.Fatal("the cancelled call did not end")
	}
	if code := call.ProcessState.ExitCode(); code != 9 || !strings.Contains(stderr.String(), "cancelled by its requester") {
		t.Errorf("the cancelled call exited %d: %s", code, stderr.String())
	}
	res = meshagent(t, "task", "status", taskID, "--api", requester.started.API).must(t, 0)
	if !strings.Contains(res.stdout, "CANCELLED") {
		t.Errorf("status after cancel: %q", res.stdout)
	}
	meshagent(t, "task", "status", "no-such-task", "--api", requester.started.API).must(t, 3)
}
