package bus_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/meshagent/meshagent/bus"
	"github.com/meshagent/meshagent/internal/fakemesh"
	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/rpc"
)

// heldClients is how many idle initialized clients a server with the
// default limits must hold (issue 23 defect 8: it held 1,022).
const heldClients = 5000

// TestDefaultLimitsHoldIdleClients: a bus server with the default limits
// holds 5,000 idle initialized (and subscribed) clients, connected from a
// child process, and meanwhile serves fresh clients (dial, initialize,
// subscribe, sendMessage answered) within 2 s each.
func TestDefaultLimitsHoldIdleClients(t *testing.T) {
	if testing.Short() {
		t.Skip("connects 5,000 clients")
	}
	if rpc.DefaultLimits().MaxClients < heldClients {
		t.Errorf("the default MaxClients is %d, below %d", rpc.DefaultLimits().MaxClients, heldClients)
	}
	raiseFDLimit(t, 2*heldClients+512)
	srv, err := newStack(t, fakemesh.New())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	if err := srv.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestIdleClientsChild$", "-test.count", "1")
	cmd.Env = append(os.Environ(), idleEnvURL+"="+srv.URL(), idleEnvClients+"="+strconv.Itoa(heldClients))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = stdin.Close()
		if err := cmd.Wait(); err != nil {
			t.Errorf("client process: %v", err)
		}
	}()
	var out []string
	lines := bufio.NewScanner(stdout)
	ready := false
	for !ready && lines.Scan() {
		out = append(out, lines.Text())
		ready = lines.Text() == idleReady
	}
	if !ready {
		t.Fatalf("the client process ended before its %d clients were ready:\n%s", heldClients, strings.Join(out, "\n"))
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	wait.For(t, 30*time.Second, func() error {
		if c := srv.Clients(); c != heldClients {
			return fmt.Errorf("server holds %d clients, want %d", c, heldClients)
		}
		return nil
	})

	var slowest time.Duration
	for i := range 10 {
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		c, err := rpc.Dial(ctx, srv.URL(), rpc.WithoutInitialize())
		if err != nil {
			cancel()
			t.Fatalf("fresh client %d: %v", i, err)
		}
		id := fmt.Sprintf("fresh-%d", i)
		err = busJoin(ctx, c, id, "fresh:"+id)
		var res bus.SendResult
		if err == nil {
			err = c.Call(ctx, bus.MethodSendMessage, map[string]any{"topic": "fresh:" + id, "payload": map[string]string{"type": "plaintext_message", "text": "hi"}}, &res)
		}
		d := time.Since(start)
		_ = c.Close()
		cancel()
		if err != nil || !res.Success {
			t.Fatalf("fresh client %d with %d held: %+v %v", i, heldClients, res, err)
		}
		slowest = max(slowest, d)
	}
	if slowest > 2*time.Second {
		t.Errorf("the slowest fresh client took %s with %d idle clients held, want at most 2s", slowest, heldClients)
	}
	t.Logf("%d idle clients held; 10 fresh clients served, the slowest in %s", heldClients, slowest)
}
