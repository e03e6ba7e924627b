package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/rpc"
)

// runsOf counts the lines the test handler appended to its runs file.
func runsOf(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

// handlersEnded waits until every handler run that wrote its pid to the
// runs file has ended: a handler dies with its node, so that a restarted
// node re-offering a task never runs it beside an orphan.
func handlersEnded(t *testing.T, runs string) {
	t.Helper()
	b, err := os.ReadFile(runs)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Fields(string(b)) {
		pid, err := strconv.Atoi(line)
		if err != nil {
			t.Fatalf("runs file line %q", line)
		}
		wait.For(t, 10*time.Second, func() error { return wait.ProcessEnded(pid) })
	}
}

// TestDetachedTaskSurvivesProviderKill: a detached call returns once the
// provider accepted it; the provider is SIGKILLed while the handler runs
// and restarted on the same data directory: the task ends FAILED,
// interrupted, and its handler is not run again. A second detached task
// finishes, the provider is SIGKILLed and restarted after the answer:
// `task wait` from another process still answers it, and `task list`
// shows both, persisted.
func TestDetachedTaskSurvivesProviderKill(t *testing.T) {
	dir := t.TempDir()
	runs := filepath.Join(dir, "runs")
	release := filepath.Join(dir, "release")
	caps := filepath.Join(dir, "caps.json")
	script := fmt.Sprintf(`echo $$ >> %s; while [ ! -f %s ] && [ -d %s ]; do sleep 0.05; done; echo '{"verdict":"approved"}'`, runs, release, dir)
	capsJSON, _ := json.Marshal([]any{map[string]any{"name": "approval", "handler": map[string]any{"exec": []string{"sh", "-c", script}, "timeout": "300s"}}})
	writeFile(t, caps, string(capsJSON))
	pData := filepath.Join(dir, "p")
	provider := startNode(t, "librarian", "--data", pData, "--capabilities", caps)
	requester := startNode(t, "agent", "--data", filepath.Join(dir, "r"), "--bootstrap", provider.started.Addrs[0])
	api := requester.started.API
	wait.For(t, 30*time.Second, func() error {
		_, err := capabilitiesOf(t, api, provider.started.AgentID)
		return err
	})
	submit := func() string {
		t.Helper()
		res := meshagent(t, "call", provider.started.AgentID, "approval", "--detach", "--deadline", "24h", "--json", "--api", api).must(t, 0)
		var sub struct {
			TaskID  string `json:"taskId"`
			AgentID string `json:"agentId"`
			State   string `json:"state"`
		}
		if err := json.Unmarshal([]byte(res.stdout), &sub); err != nil || sub.TaskID == "" || sub.AgentID != provider.started.AgentID || sub.State != "APPROVED" {
			t.Fatalf("call --detach printed %q (%v)", res.stdout, err)
		}
		return sub.TaskID
	}
	restart := func() {
		t.Helper()
		provider.signal(t, syscall.SIGKILL)
		<-provider.exited
		handlersEnded(t, runs)
		provider = startNode(t, "librarian", "--data", pData, "--capabilities", caps, "--bootstrap", requester.started.Addrs[0])
	}

	first := submit()
	wait.For(t, 20*time.Second, func() error {
		if n := runsOf(t, runs); n != 1 {
			return fmt.Errorf("the handler ran %d times", n)
		}
		return nil
	})
	restart()
	res := meshagent(t, "task", "wait", first, "--timeout", "60s", "--api", api)
	if res.code == 0 || !strings.Contains(res.stderr+res.stdout, "interrupted by a restart") {
		t.Fatalf("task wait of the interrupted task exited %d: %s %s", res.code, res.stdout, res.stderr)
	}
	if n := runsOf(t, runs); n != 1 {
		t.Fatalf("the interrupted handler ran %d times, want once", n)
	}

	writeFile(t, release, "")
	second := submit()
	wait.For(t, 30*time.Second, func() error {
		res := meshagent(t, "task", "status", second, "--json", "--api", api)
		if !strings.Contains(res.stdout, `"state":"COMPLETED"`) {
			return fmt.Errorf("task status exited %d: %s %s", res.code, res.stdout, res.stderr)
		}
		return nil
	})
	restart()
	res = meshagent(t, "task", "wait", second, "--timeout", "60s", "--json", "--api", api).must(t, 0)
	if !strings.Contains(res.stdout, `"result":{"verdict":"approved"}`) || !strings.Contains(res.stdout, `"state":"COMPLETED"`) {
		t.Fatalf("task wait printed %q", res.stdout)
	}
	// The provider still answers for the finished task after its restart.
	wait.For(t, 30*time.Second, func() error {
		res := meshagent(t, "task", "status", second, "--agent", provider.started.AgentID, "--json", "--api", api)
		if res.code != 0 || !strings.Contains(res.stdout, `"state":"COMPLETED"`) {
			return fmt.Errorf("task status after the restart exited %d: %s %s", res.code, res.stdout, res.stderr)
		}
		return nil
	})
	if n := runsOf(t, runs); n != 2 {
		t.Fatalf("the handler ran %d times, want 2 (one per task)", n)
	}
	res = meshagent(t, "task", "list", "--json", "--api", provider.started.API).must(t, 0)
	if !strings.Contains(res.stdout, first) || !strings.Contains(res.stdout, second) || !strings.Contains(res.stdout, `"state":"FAILED"`) {
		t.Fatalf("the provider's task list: %s", res.stdout)
	}
	res = meshagent(t, "task", "list", "--state", "COMPLETED", "--api", api).must(t, 0)
	if !strings.Contains(res.stdout, second) || strings.Contains(res.stdout, first) {
		t.Fatalf("the requester's COMPLETED tasks: %s", res.stdout)
	}
}

// TestDetachedIdempotentTaskRunsAgainOnce: the handler of a detached task
// of an idempotent capability is running when its provider is SIGKILLed;
// the restarted provider offers the task to the handler again (once), and
// its answer reaches `task wait`. Killed again while that second run
// runs, the task ends FAILED: it is offered once more and only once.
// Every run dies with the node that started it, so no two ever run side by
// side.
func TestDetachedIdempotentTaskRunsAgainOnce(t *testing.T) {
	dir := t.TempDir()
	runs := filepath.Join(dir, "runs")
	release := filepath.Join(dir, "release")
	caps := filepath.Join(dir, "caps.json")
	script := fmt.Sprintf(`echo $$ >> %s; while [ ! -f %s ] && [ -d %s ]; do sleep 0.05; done; echo '{"indexed":true}'`, runs, release, dir)
	capsJSON, _ := json.Marshal([]any{map[string]any{"name": "reindex", "idempotent": true, "handler": map[string]any{"exec": []string{"sh", "-c", script}, "timeout": "300s"}}})
	writeFile(t, caps, string(capsJSON))
	pData := filepath.Join(dir, "p")
	provider := startNode(t, "indexer", "--data", pData, "--capabilities", caps)
	requester := startNode(t, "agent", "--data", filepath.Join(dir, "r"), "--bootstrap", provider.started.Addrs[0])
	api := requester.started.API
	wait.For(t, 30*time.Second, func() error {
		_, err := capabilitiesOf(t, api, provider.started.AgentID)
		return err
	})
	restart := func() {
		t.Helper()
		provider.signal(t, syscall.SIGKILL)
		<-provider.exited
		handlersEnded(t, runs)
		provider = startNode(t, "indexer", "--data", pData, "--capabilities", caps, "--bootstrap", requester.started.Addrs[0])
	}
	runsAre := func(want int) {
		t.Helper()
		wait.For(t, 30*time.Second, func() error {
			if n := runsOf(t, runs); n != want {
				return fmt.Errorf("the handler ran %d times, want %d", n, want)
			}
			return nil
		})
	}
	submit := func() string {
		t.Helper()
		res := meshagent(t, "call", provider.started.AgentID, "reindex", "--detach", "--json", "--api", api).must(t, 0)
		var sub struct {
			TaskID string `json:"taskId"`
		}
		if err := json.Unmarshal([]byte(res.stdout), &sub); err != nil || sub.TaskID == "" {
			t.Fatalf("call --detach printed %q (%v)", res.stdout, err)
		}
		return sub.TaskID
	}

	first := submit()
	runsAre(1)
	restart()
	runsAre(2) // offered again
	writeFile(t, release, "")
	res := meshagent(t, "task", "wait", first, "--timeout", "60s", "--json", "--api", api).must(t, 0)
	if !strings.Contains(res.stdout, `"result":{"indexed":true}`) {
		t.Fatalf("task wait printed %q", res.stdout)
	}
	if err := os.Remove(release); err != nil {
		t.Fatal(err)
	}

	second := submit()
	runsAre(3)
	restart()
	runsAre(4) // offered again, once
	restart()
	res = meshagent(t, "task", "wait", second, "--timeout", "60s", "--api", api)
	if res.code == 0 || !strings.Contains(res.stderr+res.stdout, "interrupted by a restart") {
		t.Fatalf("task wait of the task interrupted twice exited %d: %s %s", res.code, res.stdout, res.stderr)
	}
	if n := runsOf(t, runs); n != 4 {
		t.Fatalf("the handler ran %d times, want 4", n)
	}
}

// TestEscalatedTaskResolvedFromCLI: a provider's exec handler escalates
// (exit status 10, its stdout the reason); the requester submitted with
// --detach. `task list --state ESCALATED` shows the task on the
// provider; `task resolve` needs exactly one of --approve and --reject;
// the operator approves and the requester's `task wait` gets the
// decision as the answer. A second escalated task survives a SIGKILL of
// its provider: after the restart it is still ESCALATED, the operator
// rejects it, and `task wait` gets the rejection (REJECTED).
func TestEscalatedTaskResolvedFromCLI(t *testing.T) {
	dir := t.TempDir()
	caps := filepath.Join(dir, "caps.json")
	script := `echo "budget over the limit, a human must approve"; exit 10`
	capsJSON, _ := json.Marshal([]any{map[string]any{"name": "approval", "handler": map[string]any{"exec": []string{"sh", "-c", script}}}})
	writeFile(t, caps, string(capsJSON))
	pData := filepath.Join(dir, "p")
	provider := startNode(t, "librarian", "--data", pData, "--capabilities", caps)
	requester := startNode(t, "agent", "--data", filepath.Join(dir, "r"), "--bootstrap", provider.started.Addrs[0])
	api := requester.started.API
	wait.For(t, 30*time.Second, func() error {
		_, err := capabilitiesOf(t, api, provider.started.AgentID)
		return err
	})
	submit := func() string {
		t.Helper()
		res := meshagent(t, "call", provider.started.AgentID, "approval", "--detach", "--json", "--api", api).must(t, 0)
		var sub struct {
			TaskID string `json:"taskId"`
		}
		if err := json.Unmarshal([]byte(res.stdout), &sub); err != nil || sub.TaskID == "" {
			t.Fatalf("call --detach printed %q (%v)", res.stdout, err)
		}
		return sub.TaskID
	}
	escalated := func(id string) {
		t.Helper()
		wait.For(t, 30*time.Second, func() error {
			res := meshagent(t, "task", "list", "--state", "ESCALATED", "--api", provider.started.API)
			if res.code != 0 || !strings.Contains(res.stdout, id) {
				return fmt.Errorf("task list --state ESCALATED exited %d: %s %s", res.code, res.stdout, res.stderr)
			}
			return nil
		})
	}

	// The provider's operator follows the task events over the local API.
	events := make(chan rpc.TaskEventParams, 64)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	op, err := rpc.Dial(ctx, "ws://"+provider.started.API+"/", rpc.WithNotificationHandler(func(method string, params json.RawMessage) {
		var p rpc.TaskEventParams
		if method == rpc.MethodMeshTaskEvent && json.Unmarshal(params, &p) == nil {
			events <- p
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer op.Close()
	if err := op.Call(ctx, rpc.MethodMeshTaskEvents, nil, nil); err != nil {
		t.Fatal(err)
	}
	var re *rpc.Error
	if err := op.Call(ctx, rpc.MethodMeshTaskResolve, map[string]any{"taskId": "x", "approve": "yes"}, nil); !errors.As(err, &re) || re.Code != rpc.CodeInvalidParams {
		t.Fatalf("mesh.taskResolve with a string approve: %v", err)
	}

	first := submit()
	escalated(first)
	for _, args := range [][]string{{}, {"--approve", "--reject"}} {
		res := meshagent(t, append([]string{"task", "resolve", first, "--api", provider.started.API}, args...)...)
		if res.code != 2 || !strings.Contains(res.stderr, "exactly one of --approve and --reject") {
			t.Fatalf("task resolve %v exited %d: %s %s", args, res.code, res.stdout, res.stderr)
		}
	}
	res := meshagent(t, "task", "resolve", first, "--approve", "--reason", "signed off", "--json", "--api", provider.started.API).must(t, 0)
	if !strings.Contains(res.stdout, `"state":"COMPLETED"`) || !strings.Contains(res.stdout, "budget over the limit") {
		t.Fatalf("task resolve printed %q", res.stdout)
	}
	res = meshagent(t, "task", "wait", first, "--timeout", "60s", "--json", "--api", api).must(t, 0)
	if !strings.Contains(res.stdout, `"result":{"approved":true,"reason":"signed off"}`) {
		t.Fatalf("task wait printed %q", res.stdout)
	}
	var seen []string
	for len(seen) < 5 {
		select {
		case e := <-events:
			if e.Change.TaskID == first {
				seen = append(seen, e.Change.Event)
			}
		case <-ctx.Done():
			t.Fatalf("task events seen: %v", seen)
		}
	}
	if fmt.Sprint(seen) != "[request.submitted request.approved request.escalated request.approved request.completed]" {
		t.Fatalf("task events %v", seen)
	}
	// Resolved once: a second decision is refused.
	res = meshagent(t, "task", "resolve", first, "--reject", "--api", provider.started.API)
	if res.code == 0 || !strings.Contains(res.stderr, "not ESCALATED") {
		t.Fatalf("a second task resolve exited %d: %s %s", res.code, res.stdout, res.stderr)
	}

	second := submit()
	escalated(second)
	provider.signal(t, syscall.SIGKILL)
	<-provider.exited
	provider = startNode(t, "librarian", "--data", pData, "--capabilities", caps, "--bootstrap", requester.started.Addrs[0])
	escalated(second)
	meshagent(t, "task", "resolve", second, "--reject", "--reason", "not this quarter", "--api", provider.started.API).must(t, 0)
	res = meshagent(t, "task", "wait", second, "--timeout", "60s", "--json", "--api", api)
	if res.code == 0 || !strings.Contains(res.stdout+res.stderr, "not this quarter") {
		t.Fatalf("task wait of the rejected task exited %d: %s %s", res.code, res.stdout, res.stderr)
	}
	wait.For(t, 30*time.Second, func() error {
		res := meshagent(t, "task", "list", "--state", "REJECTED", "--api", api)
		if res.code != 0 || !strings.Contains(res.stdout, second) {
			return fmt.Errorf("the requester's REJECTED tasks (%d): %s %s", res.code, res.stdout, res.stderr)
		}
		return nil
	})
}
