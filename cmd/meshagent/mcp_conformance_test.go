package main

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// conformanceScenarios are the scenarios of @modelcontextprotocol/conformance
// a tools-only server can pass. The others need what meshagent mcp does
// not serve: resources-* and prompts-* (no resources or prompts),
// completion-complete and logging-set-level (no completions or logging),
// tools-call-image/-audio/-embedded-resource/-mixed-content (a mesh
// result is JSON, given as one text item), tools-call-with-logging,
// -sampling and -elicitation (the mesh has no way to ask the MCP client
// back), elicitation-* and server-sse-polling (no server-initiated
// requests; no event store to resume streams).
var conformanceScenarios = []string{
	"server-initialize", "ping", "tools-list", "tools-call-simple-text", "tools-call-error",
	"tools-call-with-progress", "json-schema-2020-12", "server-sse-multiple-streams", "dns-rebinding-protection",
}

// TestMCPConformance runs the MCP conformance suite against `meshagent mcp
// --http` over a node that serves the tools the scenarios call.
func TestMCPConformance(t *testing.T) {
	nodeBin := needNPM(t)
	dir := t.TempDir()
	everything, err := filepath.Abs(filepath.Join(npmDir, "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js"))
	if err != nil {
		t.Fatal(err)
	}
	server, _ := json.Marshal([]string{nodeBin, everything, "stdio"})
	caps := filepath.Join(dir, "caps.json")
	writeFile(t, caps, `[
		{"name": "test_simple_text", "handler": {"exec": ["sh", "-c", "echo '\"This is a simple text response for testing.\"'"]}},
		{"name": "test_error_handling", "handler": {"exec": ["sh", "-c", "echo 'This tool intentionally returns an error for testing' >&2; exit 1"]}},
		{"name": "test_tool_with_progress", "handler": {"mcp": {"command": `+string(server)+`, "tool": "trigger-long-running-operation"}}},
		{"name": "json_schema_2020_12_tool", "description": "Tool with JSON Schema 2020-12 features",
		 "input_schema": {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
		   "$defs": {"address": {"type": "object", "properties": {"street": {"type": "string"}, "city": {"type": "string"}}}},
		   "properties": {"name": {"type": "string"}, "address": {"$ref": "#/$defs/address"}}, "additionalProperties": false},
		 "handler": {"builtin": "echo"}}
	]`)
	a := startNode(t, "conformance", "--data", filepath.Join(dir, "a"), "--capabilities", caps)
	url := startMCPHTTP(t, a.started.API)
	conformance := filepath.Join("node_modules", "@modelcontextprotocol", "conformance", "dist", "index.js")
	for _, sc := range conformanceScenarios {
		t.Run(sc, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			// Node 20 lacks the fs.globSync the suite imports: the hook
			// supplies it.
			cmd := exec.CommandContext(ctx, nodeBin, "--import", "./globsync-hook.mjs", conformance,
				"server", "--url", url, "--scenario", sc, "--output-dir", t.TempDir())
			cmd.Dir = npmDir
			cmd.Env = env(t)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("conformance %s: %v\n%s", sc, err, out)
			}
			t.Logf("%s", out)
		})
	}
}
