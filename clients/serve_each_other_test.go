package clients_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/rpc"
)

// TestAgentsServeEachOther starts three node processes on loopback, B and
// C bootstrapped to A. A Python agent serves summarize-py through A and a
// Node.js agent serves summarize-js through B; a Go caller (meshagent
// call, through C) uses both, and each agent calls the other's
// capability through its own node's local API, once naming the provider
// and once letting its node choose it.
func TestAgentsServeEachOther(t *testing.T) {
	needPython(t)
	js := jsDir(t)
	bin := meshagent(t)
	dir := t.TempDir()
	a := startNode(t, bin, "a", "--data", filepath.Join(dir, "a"))
	b := startNode(t, bin, "b", "--data", filepath.Join(dir, "b"), "--bootstrap", a.Addrs[0])
	c := startNode(t, bin, "c", "--data", filepath.Join(dir, "c"), "--bootstrap", a.Addrs[0])

	py := startAgent(t, python, filepath.Join("python", "tests", "e2e_serve_agent.py"), "ws://"+a.API+"/", "summarize-py")
	jsAgent := startAgent(t, "node", filepath.Join(js, "test", "e2e", "serve-agent.js"), "ws://"+b.API+"/", "summarize-js")
	waitLine(t, py, "serving")
	waitLine(t, jsAgent, "serving")

	// Every caller's node sees the provider it will call offer it.
	for _, w := range []struct {
		api, provider, capability string
	}{
		{c.API, a.AgentID, "summarize-py"}, {c.API, b.AgentID, "summarize-js"},
		{a.API, b.AgentID, "summarize-js"}, {b.API, a.AgentID, "summarize-py"},
	} {
		waitOffers(t, w.api, w.provider, w.capability, true)
	}

	// The Go caller, through C.
	for _, want := range []struct{ provider, capability, by string }{
		{a.AgentID, "summarize-py", "python"}, {b.AgentID, "summarize-js", "js"},
	} {
		out, errOut, err := cliRun(t, bin, "call", "--api", c.API, "--params", `{"text":"hello from go"}`, want.provider, want.capability)
		if err != nil {
			t.Fatalf("call %s: %v\n%s%s", want.capability, err, out, errOut)
		}
		var res struct{ Summary, By string }
		if err := json.Unmarshal([]byte(out), &res); err != nil || res.Summary != "hello from" || res.By != want.by {
			t.Errorf("call %s through C answered %s (%v), want the %s handler's summary", want.capability, out, err, want.by)
		}
	}

	// Each agent calls the other through its own node: naming the
	// provider, then letting the node choose (the only provider).
	for _, w := range []struct {
		caller           *process
		callerBy, by     string
		capability, peer string
	}{
		{py, "python", "js", "summarize-js", b.AgentID},
		{jsAgent, "js", "python", "summarize-py", a.AgentID},
	} {
		for _, target := range []string{w.peer, ""} {
			answer := agentCall(t, w.caller, w.capability, target)
			// The response names the provider only when the node chose it.
			from := answer.AgentID
			if target != "" && from == "" {
				from = target
			}
			if from != w.peer || answer.Result.Summary != "hello from" || answer.Result.By != w.by {
				t.Errorf("the %s agent calling %s (agentId %q) got %+v, want the %s handler's answer from %s",
					w.callerBy, w.capability, target, answer, w.by, w.peer)
			}
		}
	}

	// Each handler saw the Go caller's request and the other agent's two.
	for _, w := range []struct {
		agent *process
		from  string
	}{{py, "js"}, {jsAgent, "python"}} {
		out := w.agent.String()
		if n := strings.Count(out, "handled hello from go\n"); n != 1 {
			t.Errorf("the handler saw the Go caller's request %d times:\n%s", n, out)
		}
		if n := strings.Count(out, "handled hello from "+w.from+"\n"); n != 2 {
			t.Errorf("the handler saw the %s agent's requests %d times, want 2:\n%s", w.from, n, out)
		}
	}
}

// agentAnswer is what a serve-agent script prints for one of its calls.
type agentAnswer struct {
	AgentID string `json:"agentId"`
	Result  struct {
		Summary string `json:"summary"`
		By      string `json:"by"`
	} `json:"result"`
}

// agentCall asks a serve-agent script to call capability (through its
// own node; provider "" lets the node choose) and returns its answer.
func agentCall(t *testing.T, agent *process, capability, provider string) agentAnswer {
	t.Helper()
	target := provider
	if target == "" {
		target = "any"
	}
	if _, err := fmt.Fprintf(agent.in, "call %s %s\n", capability, provider); err != nil {
		t.Fatalf("asking the agent to call %s: %v", capability, err)
	}
	prefix := "called " + capability + " " + target + " "
	failed := "call failed " + capability + " " + target + " "
	var answer agentAnswer
	wait.For(t, serveWait, func() error {
		for line := range strings.Lines(agent.String()) {
			if strings.HasPrefix(line, failed) {
				t.Fatalf("the agent's call failed: %s", line)
			}
			if rest, ok := strings.CutPrefix(line, prefix); ok {
				return json.Unmarshal([]byte(rest), &answer)
			}
		}
		return fmt.Errorf("the agent has not printed %q yet:\n%s", prefix, agent.String())
	})
	return answer
}

// startAgent starts an agent script with a pipe to its standard input;
// it is killed when the test ends.
func startAgent(t *testing.T, name string, args ...string) *process {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(childEnv(t), "PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := start(t, cmd)
	p.in = in
	return p
}

// waitOffers waits until the node at api sees agent's hello offer
// capability (or not).
func waitOffers(t *testing.T, api, agent, capability string, offered bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), serveWait)
	defer cancel()
	cl, err := rpc.Dial(ctx, api)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	wait.For(t, serveWait, func() error {
		peers, err := cl.Peers(ctx)
		if err != nil {
			return err
		}
		for _, p := range peers {
			if p.AgentID != agent {
				continue
			}
			has := slices.ContainsFunc(p.Capabilities, func(c protocol.Capability) bool { return c.Name == capability })
			if has != offered {
				return fmt.Errorf("%s sees %s offer %s: %v, want %v", api, agent, capability, has, offered)
			}
			return nil
		}
		return errors.New(api + " does not know " + agent + " yet")
	})
}
