package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/meshagent/meshagent/internal/wait"
)

// mcpServerEnv makes the test binary an MCP server on stdio (its name
// must not start with MESHAGENT_, which TestMain clears).
const mcpServerEnv = "CLITEST_MCP_SERVER"

// serveTestMCP serves one tool, "die", whose call ends the process.
func serveTestMCP() int {
	s := sdk.NewServer(&sdk.Implementation{Name: "cli-test"}, nil)
	s.AddTool(&sdk.Tool{Name: "die", InputSchema: json.RawMessage(`{"type":"object"}`)}, func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		os.Exit(3)
		return nil, nil
	})
	if err := s.Run(context.Background(), &sdk.StdioTransport{}); err != nil {
		return 2
	}
	return 0
}

// An MCP server behind a node's "mcp" handler that stops is reported in
// the node's log, so that an operator learns why its capability fails
// and when the server starts again.
func TestNodeLogsStoppedMCPServer(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(mcpServerEnv, "1")
	command, _ := json.Marshal([]string{exe, "-test.run=^$"})
	caps := filepath.Join(t.TempDir(), "caps.json")
	writeFile(t, caps, fmt.Sprintf(`[{"name":"die","handler":{"mcp":{"command":%s,"tool":"die"}}}]`, command))
	n := startNode(t, "--capabilities", caps, "--capabilities-poll", "0")

	res := runCLI(t, "", "call", n.started.AgentID, "die", "--params", "{}", "--api", n.started.API, "--timeout", "10s")
	if res.code == ExitOK {
		t.Fatalf("die answered: %s", res.stdout)
	}
	wait.For(t, 20*time.Second, func() error {
		for l := range strings.SplitSeq(n.stderr.String(), "\n") {
			if strings.Contains(l, "the MCP server stopped") && strings.Contains(l, "component=mcp") {
				return nil
			}
		}
		return fmt.Errorf("no warning from component=mcp that the MCP server stopped in the node's log:\n%s", n.stderr)
	})
}
