package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/protocol"
)

// TestMain doubles as an MCP server on stdio when MESHAGENT_TEST_MCP_SERVER
// is set: the test binary is the command the "mcp" handler starts.
func TestMain(m *testing.M) {
	if os.Getenv("MESHAGENT_TEST_MCP_SERVER") == "1" {
		if f := os.Getenv(stuckServerPIDFile); f != "" {
			// A server that does not end when its stdin closes, as one
			// stuck in a tool's work would not.
			if err := os.WriteFile(f, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o600); err != nil {
				os.Exit(2)
			}
			go func() { _ = testMCPServer().Run(context.Background(), &sdk.StdioTransport{}) }()
			// A pending timer, not select{}, so that the runtime does not
			// end the process as deadlocked once Run returns.
			<-time.After(time.Hour)
			os.Exit(3)
		}
		_ = testMCPServer().Run(context.Background(), &sdk.StdioTransport{})
		os.Exit(0)
	}
	if os.Getenv(serverOwnerEnv) == "1" {
		os.Exit(runServerOwner())
	}
	os.Exit(m.Run())
}

type addIn struct {
	A float64 `json:"a"`
	B float64 `json:"b"`
}

type addOut struct {
	Sum float64 `json:"sum"`
}

// progressSeen, when set (in-process servers only), is closed by a test
// once its progress callback has seen add's progress: add answers only
// then. A client may dispatch a notification after the response that
// follows it, and a progress arriving after the call has ended is
// dropped (it no longer has a mesh task to go to), so without the wait a
// test of progress would race.
var progressSeen chan struct{}

// testMCPServer has the tools add (structured), hello (text only), fail
// (isError) and die (the process exits).
func testMCPServer() *sdk.Server {
	s := sdk.NewServer(&sdk.Implementation{Name: "t"}, nil)
	sdk.AddTool(s, &sdk.Tool{Name: "add", Description: "add two numbers"}, func(ctx context.Context, req *sdk.CallToolRequest, in addIn) (*sdk.CallToolResult, addOut, error) {
		if tok := req.Params.GetProgressToken(); tok != nil {
			_ = req.Session.NotifyProgress(ctx, &sdk.ProgressNotificationParams{ProgressToken: tok, Progress: 1, Total: 2, Message: "half"})
			if seen := progressSeen; seen != nil {
				select {
				case <-seen:
				case <-ctx.Done():
					return nil, addOut{}, ctx.Err()
				}
			}
		}
		return nil, addOut{Sum: in.A + in.B}, nil
	})
	s.AddTool(&sdk.Tool{Name: "hello", InputSchema: json.RawMessage(`{"type":"object"}`)}, func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "hi"}}}, nil
	})
	s.AddTool(&sdk.Tool{Name: "fail", InputSchema: json.RawMessage(`{"type":"object"}`)}, func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: "it broke"}}}, nil
	})
	s.AddTool(&sdk.Tool{Name: "die", InputSchema: json.RawMessage(`{"type":"object"}`)}, func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		os.Exit(3)
		return nil, nil
	})
	return s
}

func TestHandlerURL(t *testing.T) {
	seen := make(chan struct{})
	progressSeen = seen
	t.Cleanup(func() { progressSeen = nil })
	var seenOnce sync.Once
	srv := testMCPServer()
	ts := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil))
	t.Cleanup(ts.Close)
	p := NewPool()
	t.Cleanup(func() { _ = p.Close() })
	ctx := context.Background()

	c := protocol.Capability{Name: "sum"}
	h, err := p.Handler(ctx, &c, json.RawMessage(`{"url":"`+ts.URL+`","tool":"add"}`))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(c.InputSchema), `"a"`) || c.Description != "add two numbers" {
		t.Fatalf("capability not completed from the tool: %+v %s", c, c.InputSchema)
	}
	var mu sync.Mutex
	var prog []string
	out, err := h.Call(ctx, json.RawMessage(`{"a":2,"b":3}`), func(b json.RawMessage) error {
		mu.Lock()
		defer mu.Unlock()
		prog = append(prog, string(b))
		seenOnce.Do(func() { close(seen) })
		return nil
	})
	if err != nil || string(out) != `{"sum":5}` {
		t.Fatalf("add = %s, %v", out, err)
	}
	wait.For(t, 10*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(prog) != 1 || prog[0] != `{"message":"half","progress":1,"total":2}` {
			return fmt.Errorf("progress %v", prog)
		}
		return nil
	})

	own := protocol.Capability{Name: "x", InputSchema: json.RawMessage(`{"type":"object"}`)}
	h2, err := p.Handler(ctx, &own, json.RawMessage(`{"url":"`+ts.URL+`","tool":"hello"}`))
	if err != nil || string(own.InputSchema) != `{"type":"object"}` {
		t.Fatalf("%v %s", err, own.InputSchema)
	}
	out, err = h2.Call(ctx, nil, nil)
	if err != nil || string(out) != `{"content":[{"type":"text","text":"hi"}]}` {
		t.Fatalf("hello = %s, %v", out, err)
	}
	h3, err := p.Handler(ctx, &protocol.Capability{Name: "f"}, json.RawMessage(`{"url":"`+ts.URL+`","tool":"fail"}`))
	if err != nil {
		t.Fatal(err)
	}
	_, err = h3.Call(ctx, nil, nil)
	if pe := protocol.AsError(err); pe == nil || pe.Code != protocol.CodeInternalError || pe.Message != "it broke" {
		t.Fatalf("fail: %v", err)
	}
}

func TestHandlerSpecErrors(t *testing.T) {
	p := NewPool()
	t.Cleanup(func() { _ = p.Close() })
	for spec, want := range map[string]string{
		`{"tool":"x"}`: `set "command"`,
		`{"command":["a"],"url":"http://x","tool":"x"}`:      "not both",
		`{"command":[""],"tool":"x"}`:                        "empty",
		`{"command":["a"]}`:                                  `"tool" is required`,
		`{"url":"ftp://x","tool":"x"}`:                       "not an http(s) URL",
		`{"command":"a","tool":"x"}`:                         "command",
		`{"command":["a"],"tool":"x","extra":1}`:             "extra",
		`{"command":["/nonexistent/mcp-server"],"tool":"x"}`: "start the MCP server",
	} {
		_, err := p.Handler(context.Background(), &protocol.Capability{Name: "c"}, json.RawMessage(spec))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v, want %q", spec, err, want)
		}
	}
}

// TestHandlerCommandRestart runs the MCP server as a process, kills it
// through its die tool, and checks that a later call starts it again.
func TestHandlerCommandRestart(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("MESHAGENT_TEST_MCP_SERVER", "1")
	p := NewPool()
	t.Cleanup(func() { _ = p.Close() })
	ctx := context.Background()
	spec := func(tool string) json.RawMessage {
		b, _ := json.Marshal(HandlerSpec{Command: []string{exe, "-test.run=^$"}, Tool: tool})
		return b
	}
	add, err := p.Handler(ctx, &protocol.Capability{Name: "sum"}, spec("add"))
	if err != nil {
		t.Fatal(err)
	}
	die, err := p.Handler(ctx, &protocol.Capability{Name: "die"}, spec("die"))
	if err != nil {
		t.Fatal(err)
	}
	if len(p.servers) != 1 {
		t.Fatalf("%d servers; one command line is one server", len(p.servers))
	}
	if _, err := die.Call(ctx, nil, nil); err == nil {
		t.Fatal("die answered")
	}
	wait.For(t, 30*time.Second, func() error {
		out, err := add.Call(ctx, json.RawMessage(`{"a":1,"b":1}`), nil)
		if err != nil {
			return err
		}
		if string(out) != `{"sum":2}` {
			return errors.New(string(out))
		}
		return nil
	})
}

const (
	// stuckServerPIDFile makes the test MCP server write its pid there
	// and ignore the end of its stdin.
	stuckServerPIDFile = "MESHAGENT_TEST_MCP_STUCK_PIDFILE"
	// serverOwnerEnv makes the test binary a node that starts the test
	// MCP server and runs until it is killed.
	serverOwnerEnv = "MESHAGENT_TEST_MCP_OWNER"
)

// runServerOwner starts the test MCP server through a Pool, as a node's
// mcp handler does, and waits to be killed.
func runServerOwner() int {
	exe, err := os.Executable()
	if err != nil {
		return 2
	}
	if err := os.Setenv("MESHAGENT_TEST_MCP_SERVER", "1"); err != nil {
		return 2
	}
	p := NewPool()
	b, _ := json.Marshal(HandlerSpec{Command: []string{exe, "-test.run=^$"}, Tool: "add"})
	h, err := p.Handler(context.Background(), &protocol.Capability{Name: "sum"}, b)
	if err != nil {
		return 2
	}
	if _, err := h.Call(context.Background(), json.RawMessage(`{"a":1,"b":1}`), nil); err != nil {
		return 2
	}
	<-time.After(time.Hour) // until the test kills it
	return 3
}
