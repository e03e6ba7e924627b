package pyclient

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/meshagent/meshagent/bus"
	"github.com/meshagent/meshagent/internal/meshtest"
	"github.com/meshagent/meshagent/internal/testlog"
	"github.com/meshagent/meshagent/rpc"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// python is Debian's interpreter, the one that sees python3-websockets.
const python = "/usr/bin/python3"

// testTimeout bounds the whole exchange.
const testTimeout = 30 * time.Second

// TestClient runs client.py against a node's bus: the script's message on
// outbound:42 is processed by a Go subscriber whose ack the script prints,
// and a message the Go peer sends to the script's subscription is printed
// by the script, which acknowledges it and exits.
func TestClient(t *testing.T) {
	if out, err := exec.Command(python, "-c", "import websockets").CombinedOutput(); err != nil {
		t.Skipf("%s cannot import websockets (install python3-websockets): %v %s", python, err, out)
	}
	ctx := meshtest.Context(t, testTimeout)
	n := meshtest.Node(t, 0)
	srv, err := rpc.New(n, rpc.WithLogger(testlog.New(t)))
	if err != nil {
		t.Fatal(err)
	}
	b, err := bus.New(srv, n, bus.WithLogger(testlog.New(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close(); _ = b.Close() })
	if err := srv.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}

	// The Go peer subscribes to outbound:* and acknowledges what it gets.
	got := make(chan bus.ProcessParams, 1)
	peer, err := rpc.Dial(ctx, srv.URL(), rpc.WithClientID("go-peer"), rpc.WithClientInfo(rpc.ClientInfo{Name: "test"}), rpc.WithRequestHandler(func(_ context.Context, method string, params json.RawMessage) (any, error) {
		var p bus.ProcessParams
		if err := json.Unmarshal(params, &p); err != nil {
			return nil, err
		}
		var payload struct{ Text string }
		_ = json.Unmarshal(p.Payload, &payload)
		select {
		case got <- p:
		default:
		}
		return bus.ProcessResult{Processed: true, Message: "go-peer got " + payload.Text}, nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = peer.Close() })
	if err := peer.Call(ctx, bus.MethodSubscribe, map[string]string{"topic": "outbound:*"}, nil); err != nil {
		t.Fatal(err)
	}

	s := startScript(ctx, t, python, "client.py", "--url", srv.URL(), "--id", "py-client",
		"--subscribe", "inbound:py", "--send", "outbound:42", "--text", "hello from python", "--count", "1")
	ping := s.waitFor(t, "ping: ") // printed after subscribe and sendMessage
	if _, err := time.Parse(time.RFC3339Nano, strings.TrimPrefix(ping, "ping: ")); err != nil {
		t.Errorf("ping line %q: %v", ping, err)
	}
	select {
	case p := <-got:
		if p.Topic != "outbound:42" || !strings.Contains(string(p.Payload), `"text":"hello from python"`) || !strings.Contains(string(p.Payload), `"type":"plaintext_message"`) {
			t.Errorf("the Go peer got %s %s", p.Topic, p.Payload)
		}
	default:
		t.Error("the script printed its acks but the Go peer got no processMessage")
	}

	var res bus.SendResult
	err = peer.Call(ctx, bus.MethodSendMessage, map[string]any{"topic": "inbound:py",
		"payload": json.RawMessage(`{"type":"plaintext_message","text":"hello, script"}`)}, &res)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Success || !hasAck(res.Acks, bus.Ack{ClientID: "py-client", Processed: true, Message: "py-client got it"}) {
		t.Errorf("sendMessage to the script: %+v", res)
	}

	out := s.wait(t)
	t.Logf("client.py printed:\n%s", out)
	for _, want := range []string{
		"initialized: server " + n.AgentID(),
		"subscribed: inbound:py",
		"sent outbound:42: success=true messageId=",
		"  ack go-peer: processed=true go-peer got hello from python",
		`received inbound:py: {"type":"plaintext_message","text":"hello, script"}`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func hasAck(acks []bus.Ack, want bus.Ack) bool {
	for _, a := range acks {
		if a == want {
			return true
		}
	}
	return false
}

// script is a running client whose stdout is read line by line.
type script struct {
	cmd    *exec.Cmd
	lines  chan string
	mu     sync.Mutex
	out    strings.Builder
	stderr bytes.Buffer
	waited bool
}

func startScript(ctx context.Context, t *testing.T, name string, args ...string) *script {
	t.Helper()
	s := &script{cmd: exec.CommandContext(ctx, name, args...), lines: make(chan string, 64)}
	s.cmd.Stderr = &s.stderr
	// client.py imports meshagent_client from clients/python: write no
	// bytecode there.
	s.cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	s.cmd.WaitDelay = 5 * time.Second
	stdout, err := s.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(s.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			s.mu.Lock()
			fmt.Fprintln(&s.out, sc.Text())
			s.mu.Unlock()
			s.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		if !s.waited {
			_ = s.cmd.Process.Kill()
			_ = s.cmd.Wait()
		}
	})
	return s
}

// waitFor returns the first line starting with prefix, failing the test if
// the script ends (or the context expires) first.
func (s *script) waitFor(t *testing.T, prefix string) string {
	t.Helper()
	for line := range s.lines {
		if strings.HasPrefix(line, prefix) {
			return line
		}
	}
	t.Fatalf("the script ended without printing %q: %v\nstdout:\n%s\nstderr:\n%s", prefix, s.cmd.Wait(), s.output(), s.stderr.String())
	return ""
}

// wait waits for the script to exit 0 and returns its whole stdout.
func (s *script) wait(t *testing.T) string {
	t.Helper()
	for range s.lines { // drain to EOF before Wait closes the pipe
	}
	s.waited = true
	if err := s.cmd.Wait(); err != nil {
		t.Fatalf("script: %v\nstdout:\n%s\nstderr:\n%s", err, s.output(), s.stderr.String())
	}
	return s.output()
}

func (s *script) output() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.out.String()
}
