package cli

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"

	"github.com/meshagent/meshagent/mcp"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
)

// handlerKinds are the capabilities file's handler kinds beyond exec and
// builtin: "mcp" serves a tool of an MCP server, "a2a" a skill of an A2A
// agent. The servers they start
// live as long as the node command: close stops them.
type handlerKinds struct {
	pool *mcp.Pool
}

// newHandlerKinds returns the kinds; the MCP servers' stderr goes to
// stderr, and what the pool reports (a server that stopped and when it
// starts again) to log.
func newHandlerKinds(stderr io.Writer, log *slog.Logger) *handlerKinds {
	return &handlerKinds{pool: mcp.NewPool(mcp.WithServerStderr(stderr), mcp.WithPoolLogger(log.With("component", "mcp")))}
}

// options are what node.LoadServices takes to know the kinds.
func (k *handlerKinds) options() []node.ParseOption {
	return append([]node.ParseOption{node.WithHandlerKind("mcp", k.mcpKind)}, a2aParseOptions()...)
}

// mcpKind adapts the MCP tool handler to node.Handler (mcp never imports
// node).
func (k *handlerKinds) mcpKind(c *protocol.Capability, spec json.RawMessage) (node.Handler, error) {
	h, err := k.pool.Handler(context.Background(), c, spec)
	if err != nil {
		return nil, err
	}
	return node.HandlerFunc(func(ctx context.Context, call *node.Call) (json.RawMessage, error) {
		return h.Call(ctx, call.Request.Params, call.Progress)
	}), nil
}

// close stops the servers the kinds started.
func (k *handlerKinds) close() error {
	if k == nil {
		return nil
	}
	return k.pool.Close()
}
