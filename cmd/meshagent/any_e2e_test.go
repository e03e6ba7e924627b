//go:build unix

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meshagent/meshagent/cli"
	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/protocol"
)

// anyScript is the exec handler of the providers in TestCallAnyKill: it
// logs each run (capability, request id) to $1 and answers with the
// provider's name ($2). A request with "block" in its params blocks, and
// one with "blockOnce" blocks if it is the first such run among the
// providers (mkdir of $3 is atomic); a blocked run ends when its node
// dies, as the node's own child would.
const anyScript = `params=$(cat)
echo "$MESHAGENT_CAPABILITY $MESHAGENT_CORRELATION_ID" >> "$1"
case "$params" in
*blockOnce*) mkdir "$3" 2>/dev/null && block=1 ;;
*block*) block=1 ;;
esac
if [ -n "$block" ]; then
	while kill -0 $PPID 2>/dev/null; do sleep 0.1; done
	exit 1
fi
printf '{"by":"%s"}\n' "$2"`

type anyAnswer struct {
	AgentID       string `json:"agentId"`
	CorrelationID string `json:"correlationId"`
	Status        string `json:"status"`
	Result        struct {
		By string `json:"by"`
	} `json:"result"`
}

// anyProvider is a provider node of TestCallAnyKill and the log its
// handler writes.
type anyProvider struct {
	proc *nodeProc
	log  string
}

// anyFixture is a caller node and its providers.
type anyFixture struct {
	api   string
	provs []*anyProvider
	byID  map[string]*anyProvider
}

// runs returns the requests run so far, each with the providers that ran
// it (one entry per run).
func (f *anyFixture) runs() map[string][]string {
	out := map[string][]string{}
	for _, p := range f.provs {
		b, _ := os.ReadFile(p.log)
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if _, id, ok := strings.Cut(line, " "); ok {
				out[id] = append(out[id], p.proc.name)
			}
		}
	}
	return out
}

func (f *anyFixture) callAny(t *testing.T, capability string) anyAnswer {
	t.Helper()
	res := meshagent(t, "call", "--any", capability, "--api", f.api, "--json", "--timeout", "20s").must(t, 0)
	return f.answer(t, res.stdout)
}

func (f *anyFixture) answer(t *testing.T, stdout string) anyAnswer {
	t.Helper()
	var a anyAnswer
	if err := json.Unmarshal([]byte(strings.TrimSpace(stdout)), &a); err != nil || a.Status != "success" || f.byID[a.AgentID] == nil {
		t.Fatalf("call --any: %q (%v)", stdout, err)
	}
	if want := f.byID[a.AgentID].proc.name; a.Result.By != want {
		t.Fatalf("answered by %s, reported %s", a.Result.By, want)
	}
	return a
}

// killMidCall starts `call --any capability` with params, waits until a
// provider runs it, kills that provider with SIGKILL, and returns the
// call's outcome, the request's id and the provider killed.
func (f *anyFixture) killMidCall(t *testing.T, capability, params string) (res result, corrID string, victim *anyProvider) {
	t.Helper()
	before := f.runs()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "call", "--any", capability, "--params", params, "--api", f.api, "--json", "--timeout", "30s")
	cmd.Env = env(t)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	wait.For(t, 30*time.Second, func() error {
		for id, where := range f.runs() {
			if _, old := before[id]; !old {
				corrID = id
				for _, p := range f.provs {
					if p.proc.name == where[0] {
						victim = p
					}
				}
				return nil
			}
		}
		return errors.New("no provider runs the request yet")
	})
	victim.proc.signal(t, syscall.SIGKILL)
	<-victim.proc.exited
	<-done
	return result{code: cmd.ProcessState.ExitCode(), stdout: out.String(), stderr: errb.String()}, corrID, victim
}

// TestCallAnyKill runs three provider nodes behind `meshagent call --any`
// and kills two of them with SIGKILL: calls spread among them, later
// calls fail over, a request that was not idempotent and in flight on a
// killed provider fails and never runs elsewhere, and an idempotent one
// runs again on another provider.
func TestCallAnyKill(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "handler.sh")
	writeFile(t, script, anyScript)
	once := filepath.Join(dir, "blocked-once")
	caller := startNode(t, "caller", "--data", filepath.Join(dir, "caller"))
	f := &anyFixture{api: caller.started.API, byID: map[string]*anyProvider{}}
	for i := range 3 {
		name := fmt.Sprintf("p%d", i)
		p := &anyProvider{log: filepath.Join(dir, name+".log")}
		handler := fmt.Sprintf(`{"exec": ["sh", %q, %q, %q, %q], "timeout": "60s"}`, script, p.log, name, once)
		caps := filepath.Join(dir, name+".json")
		writeFile(t, caps, fmt.Sprintf(`[
			{"name": "work", "handler": %s},
			{"name": "lookup", "idempotent": true, "handler": %s}
		]`, handler, handler))
		p.proc = startNode(t, name, "--data", filepath.Join(dir, name), "--capabilities", caps, "--bootstrap", caller.started.Addrs[0])
		f.provs = append(f.provs, p)
		f.byID[p.proc.started.AgentID] = p
	}
	for _, p := range f.provs {
		wait.For(t, 30*time.Second, func() error {
			got, err := capabilitiesOf(t, f.api, p.proc.started.AgentID)
			if err != nil || !slices.Contains(got, "work") || !slices.Contains(got, "lookup") {
				return fmt.Errorf("the caller sees %s offering %v (%v)", p.proc.name, got, err)
			}
			return nil
		})
	}

	spread := map[string]int{}
	const calls = 24
	for range calls {
		spread[f.byID[f.callAny(t, "work").AgentID].proc.name]++
	}
	t.Logf("spread of %d calls over 3 providers: %v", calls, spread)
	if len(spread) < 2 {
		t.Errorf("every call went to one provider: %v", spread)
	}

	// Not idempotent: the caller gets an error; the request ran once.
	lost, corrID, victim := f.killMidCall(t, "work", `{"block":true}`)
	if lost.code != cli.ExitCodeFor(protocol.CodeUnknownAgent) || !strings.Contains(lost.stderr, "UNKNOWN_AGENT") {
		t.Fatalf("a non-idempotent request lost in flight: exit %d, stderr %q, stdout %q", lost.code, lost.stderr, lost.stdout)
	}
	if where := f.runs()[corrID]; len(where) != 1 {
		t.Fatalf("the lost request ran on %v, want once", where)
	}
	t.Logf("killed %s with request %s in flight: %s", victim.proc.name, corrID, strings.TrimSpace(lost.stderr))
	for range 10 { // later calls go to the living
		if a := f.callAny(t, "work"); f.byID[a.AgentID] == victim {
			t.Fatal("answered by the killed provider")
		}
	}

	// Idempotent: another provider runs it again and answers.
	again, corrID2, victim2 := f.killMidCall(t, "lookup", `{"blockOnce":true}`)
	if again.code != 0 {
		t.Fatalf("an idempotent request lost in flight: exit %d, stderr %q", again.code, again.stderr)
	}
	if a := f.answer(t, again.stdout); f.byID[a.AgentID] == victim || f.byID[a.AgentID] == victim2 {
		t.Fatalf("answered by a killed provider")
	}
	if where := f.runs()[corrID2]; len(where) != 2 || where[0] == where[1] {
		t.Fatalf("the idempotent request ran on %v, want on two providers", where)
	}
}
