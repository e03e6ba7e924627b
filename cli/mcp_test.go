package cli

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/meshagent/meshagent/internal/meshtest"
	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
)

func TestMCPCommandErrors(t *testing.T) {
	tests := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"mcp", "extra"}, ExitUsage, "extra"},
		{[]string{"mcp", "--poll", "1ms"}, ExitUsage, "below"},
		{[]string{"mcp", "--http", "nowhere"}, ExitUsage, "not host:port"},
		{[]string{"mcp", "--api", "127.0.0.1:1"}, ExitFailure, "no meshagent node is listening on 127.0.0.1:1"},
	}
	for _, tc := range tests {
		res := runCLI(t, "", tc.args...)
		res.wantCode(t, tc.code)
		res.wantStderr(t, tc.want)
		if res.stdout != "" {
			t.Errorf("%v: stdout %q; it carries MCP only", tc.args, res.stdout)
		}
	}
}

// TestMCPCommandStdio drives `meshagent mcp` on stdio: every stdout line
// is a JSON-RPC message, and the node's capability is a tool.
func TestMCPCommandStdio(t *testing.T) {
	n := meshtest.Node(t, 1, node.WithServices(node.Service{
		Capability: protocol.Capability{Name: "bar:upper", Description: "upper"},
		Handler:    node.EchoHandler(),
	}))
	api := serveAPI(t, n)
	inR, inW := io.Pipe()
	var out, errb syncBuffer
	app := NewApp(&out, &errb)
	app.Reader = inR
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() { done <- run(ctx, app, []string{"meshagent", "mcp", "--api", api}) }()
	send := func(s string) {
		if _, err := io.WriteString(inW, s+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	send(`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
	send(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"bar_upper","arguments":{"a":1}}}`)
	wait.For(t, 30*time.Second, func() error {
		if strings.Count(out.String(), "\n") < 3 {
			return errors.New("not all answers yet")
		}
		return nil
	})
	_ = inW.Close()
	if code := wait.Receive(t, 30*time.Second, done, "mcp to end with stdin"); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	byID := map[int]string{}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var m struct {
			JSONRPC string          `json:"jsonrpc"`
			ID      int             `json:"id"`
			Result  json.RawMessage `json:"result"`
		}
		if err := json.Unmarshal([]byte(line), &m); err != nil || m.JSONRPC != "2.0" {
			t.Fatalf("stdout line %q is not JSON-RPC: %v", line, err)
		}
		byID[m.ID] = string(m.Result)
	}
	if !strings.Contains(byID[1], `"listChanged":true`) {
		t.Errorf("initialize: %s", byID[1])
	}
	if !strings.Contains(byID[2], `"name":"bar_upper"`) || !strings.Contains(byID[2], `"description":"upper"`) {
		t.Errorf("tools/list: %s", byID[2])
	}
	if !strings.Contains(byID[3], `"structuredContent":{"a":1}`) {
		t.Errorf("tools/call: %s", byID[3])
	}
}
