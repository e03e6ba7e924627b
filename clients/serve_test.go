package clients_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/rpc"
)

// serveWait bounds each wait of the serving test: the mesh settling, a
// task changing state, a capability withdrawn after the node's grace.
const serveWait = 30 * time.Second

// TestServeRealNodes starts two node processes on loopback, A with no
// capabilities of its own and B bootstrapped to A. A Python agent and a
// Node.js agent each serve a capability through A's local API, and a Go
// caller (meshagent call, through B) uses them: the answer with its
// progress, ESCALATED seen in `meshagent task status`, a cancellation
// that reaches the handler, an input-schema refusal that never reaches
// it, a direct message (mesh.sendMessage through B) answered by the
// agent, and the capability withdrawn from A's hello once the agent is
// gone.
func TestServeRealNodes(t *testing.T) {
	bin := meshagent(t)
	dir := t.TempDir()
	a := startNode(t, bin, "a", "--data", filepath.Join(dir, "a"))
	b := startNode(t, bin, "b", "--data", filepath.Join(dir, "b"), "--bootstrap", a.Addrs[0])
	env := &serveEnv{t: t, bin: bin, a: a, b: b}

	t.Run("python", func(t *testing.T) {
		needPython(t)
		env.exercise(t, "summarize-py", "python", python, filepath.Join("python", "tests", "e2e_serve_agent.py"), "ws://"+a.API+"/", "summarize-py")
	})
	t.Run("js", func(t *testing.T) {
		js := jsDir(t)
		env.exercise(t, "summarize-js", "js", "node", filepath.Join(js, "test", "e2e", "serve-agent.js"), "ws://"+a.API+"/", "summarize-js")
	})
}

type serveEnv struct {
	t    *testing.T
	bin  string
	a, b started
}

// exercise runs one agent script serving capability through A and
// drives it from B.
func (e *serveEnv) exercise(t *testing.T, capability, by, name string, args ...string) {
	agent := startScript(t, name, args...)
	wait.For(t, serveWait, func() error {
		if !strings.Contains(agent.String(), "serving\n") {
			return fmt.Errorf("the agent has not said it serves yet:\n%s", agent.String())
		}
		return nil
	})
	e.waitOffered(t, capability, true)

	// A call: the answer, after the handler's progress.
	out, errOut, err := e.cli(t, "call", "--api", e.b.API, "--params", `{"text":"hello from go"}`, e.a.AgentID, capability)
	if err != nil {
		t.Fatalf("call: %v\n%s%s", err, out, errOut)
	}
	var res struct{ Summary, By string }
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.Summary != "hello from" || res.By != by {
		t.Errorf("call answered %s (%v), want the %s handler's summary", out, err, by)
	}
	if !strings.Contains(errOut, `in progress: {"done":0.5}`) {
		t.Errorf("call printed no progress:\n%s", errOut)
	}

	// A request the input schema refuses never reaches the handler.
	out, errOut, err = e.cli(t, "call", "--api", e.b.API, "--params", `{"txt":"refused-by-schema"}`, e.a.AgentID, capability)
	if err == nil || !strings.Contains(out+errOut, string(protocol.CodeInvalidMessage)) {
		t.Errorf("a request without text: %v\n%s%s", err, out, errOut)
	}

	// ESCALATED in the task's status, then a cancellation that reaches
	// the handler.
	call := startCLI(t, e.bin, "call", "--api", e.b.API, "--timeout", "2m", "--params", `{"text":"escalate"}`, e.a.AgentID, capability)
	taskID := call.taskID(t)
	wait.For(t, serveWait, func() error {
		out, errOut, err := e.cli(t, "task", "status", "--api", e.b.API, "--json", taskID)
		if err != nil {
			return fmt.Errorf("task status: %v %s%s", err, out, errOut)
		}
		var task protocol.Task
		if err := json.Unmarshal([]byte(out), &task); err != nil {
			return err
		}
		if task.State != protocol.TaskEscalated {
			return fmt.Errorf("task %s is %s", taskID, task.State)
		}
		return nil
	})
	if out, errOut, err := e.cli(t, "task", "cancel", "--api", e.b.API, taskID); err != nil {
		t.Fatalf("task cancel: %v\n%s%s", err, out, errOut)
	}
	wait.For(t, serveWait, func() error {
		if !strings.Contains(agent.String(), "cancelled\n") {
			return fmt.Errorf("the handler has not seen its cancellation:\n%s", agent.String())
		}
		return nil
	})
	if err := call.wait(t); err == nil {
		t.Error("the cancelled call succeeded")
	}
	handled := agent.String()
	if strings.Contains(handled, "refused-by-schema") || strings.Count(handled, "handled ") != 2 {
		t.Errorf("the handler saw other requests than the call and the escalated one:\n%s", handled)
	}

	// A direct message from B's client reaches the agent, which answers.
	e.directMessage(t, by)

	// A detached task the handler escalates: A's operator approves it,
	// the handler learns the decision and answers, and B's task wait
	// gets that answer; the handler knew the task by B's task id.
	e.escalation(t, agent, capability, by)

	// The agent gone: A withdraws the capability once its grace passed.
	agent.kill()
	e.waitOffered(t, capability, false)
}

// escalation submits a detached task that the agent escalates, resolves
// it on A, and checks the handler's answer reaches B.
func (e *serveEnv) escalation(t *testing.T, agent *process, capability, by string) {
	t.Helper()
	out, errOut, err := e.cli(t, "call", "--api", e.b.API, "--detach", "--json", "--params", `{"text":"approve-me"}`, e.a.AgentID, capability)
	if err != nil {
		t.Fatalf("call --detach: %v\n%s%s", err, out, errOut)
	}
	var sub protocol.Submitted
	if err := json.Unmarshal([]byte(out), &sub); err != nil || sub.TaskID == "" {
		t.Fatalf("call --detach printed %q (%v)", out, err)
	}
	wait.For(t, serveWait, func() error {
		out, errOut, err := e.cli(t, "task", "list", "--state", "ESCALATED", "--api", e.a.API)
		if err != nil || !strings.Contains(out, sub.TaskID) {
			return fmt.Errorf("A's escalated tasks: %v %s%s", err, out, errOut)
		}
		return nil
	})
	if !strings.Contains(agent.String(), "escalated "+sub.TaskID+"\n") {
		t.Errorf("the handler did not know the task by the requester's id %s:\n%s", sub.TaskID, agent.String())
	}
	if out, errOut, err := e.cli(t, "task", "resolve", sub.TaskID, "--approve", "--reason", "ok by "+by, "--api", e.a.API); err != nil {
		t.Fatalf("task resolve: %v\n%s%s", err, out, errOut)
	}
	out, errOut, err = e.cli(t, "task", "wait", sub.TaskID, "--timeout", "60s", "--json", "--api", e.b.API)
	if err != nil {
		t.Fatalf("task wait: %v\n%s%s", err, out, errOut)
	}
	want := fmt.Sprintf(`"result":{"approved":true,"by":%q,"reason":"ok by %s","task":%q}`, by, by, sub.TaskID)
	if !strings.Contains(out, want) {
		t.Errorf("task wait printed %s, want %s", out, want)
	}
}

// directMessage sends A a direct message through B's local API and
// checks the agent's answer.
func (e *serveEnv) directMessage(t *testing.T, by string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), serveWait)
	defer cancel()
	cl, err := rpc.Dial(ctx, e.b.API)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var res rpc.SendMessageResult
	msg := map[string]any{"subject": "hello " + by, "body": "from go", "requires_response": true}
	if err := cl.Call(ctx, rpc.MethodMeshSendMessage, map[string]any{"agentId": e.a.AgentID, "message": msg}, &res); err != nil {
		t.Fatalf("mesh.sendMessage: %v", err)
	}
	var answer struct{ Ack, By string }
	if err := json.Unmarshal(res.Response, &answer); err != nil || answer.Ack != "hello "+by || answer.By != by || res.Queued || res.MessageID == "" {
		t.Errorf("mesh.sendMessage answered %+v (response %s, %v)", res, res.Response, err)
	}
}

// waitOffered waits until B sees A's hello offer capability (or not).
func (e *serveEnv) waitOffered(t *testing.T, capability string, offered bool) {
	t.Helper()
	waitOffers(t, e.b.API, e.a.AgentID, capability, offered)
}

// cli runs a meshagent command to completion.
func (e *serveEnv) cli(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), scriptTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, e.bin, args...)
	cmd.Env = childEnv(t)
	var o, s lockedBuffer
	cmd.Stdout, cmd.Stderr = &o, &s
	err = cmd.Run()
	return o.String(), s.String(), err
}

// process is a child running in the background: its output, and a way
// to stop it.
type process struct {
	cmd    *exec.Cmd
	out    *lockedBuffer
	errOut *lockedBuffer
	exited chan error
	in     io.WriteCloser // its standard input, when started by startAgent
}

func (p *process) String() string { return p.out.String() }

func (p *process) kill() {
	_ = p.cmd.Process.Kill()
}

// wait waits for the process to exit and returns how it did.
func (p *process) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-p.exited:
		p.exited <- err
		return err
	case <-time.After(serveWait):
		t.Fatalf("%s did not exit:\n%s%s", p.cmd, p.out.String(), p.errOut.String())
		return nil
	}
}

var taskLine = regexp.MustCompile(`task (\S+) \(meshagent task status`)

// taskID returns the task id `meshagent call` prints first.
func (p *process) taskID(t *testing.T) string {
	t.Helper()
	var id string
	wait.For(t, serveWait, func() error {
		m := taskLine.FindStringSubmatch(p.errOut.String())
		if m == nil {
			return fmt.Errorf("no task id printed yet: %s", p.errOut.String())
		}
		id = m[1]
		return nil
	})
	return id
}

// startScript starts an agent script; it is killed when the test ends.
func startScript(t *testing.T, name string, args ...string) *process {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(childEnv(t), "PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1")
	return start(t, cmd)
}

// startCLI starts a meshagent command in the background.
func startCLI(t *testing.T, bin string, args ...string) *process {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = childEnv(t)
	return start(t, cmd)
}

func start(t *testing.T, cmd *exec.Cmd) *process {
	p := &process{cmd: cmd, out: &lockedBuffer{}, errOut: &lockedBuffer{}, exited: make(chan error, 1)}
	cmd.Stdout, cmd.Stderr = p.out, p.errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.exited <- cmd.Wait() }()
	t.Cleanup(func() {
		p.kill()
		<-p.exited
		if t.Failed() {
			t.Logf("%s:\n%s%s", cmd, p.out.String(), p.errOut.String())
		}
	})
	return p
}
