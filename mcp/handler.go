package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os/exec"
	"strings"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/meshagent/meshagent/internal/childproc"
	"github.com/meshagent/meshagent/protocol"
)

// Bounds of the inward handler.
const (
	// MaxHandlerResult bounds the JSON result of one call of an MCP
	// server's tool; a larger one is INTERNAL_ERROR.
	MaxHandlerResult = 512 << 10
	// maxUpstreamTools bounds the tools read from one server's tools/list
	// (all its pages) while looking for the one a capability names.
	maxUpstreamTools = 10000
	// MaxPoolServers bounds how many MCP servers one Pool runs.
	MaxPoolServers = 64
	// StartTimeout bounds starting an MCP server (process start,
	// initialize and tools/list).
	StartTimeout = 60 * time.Second
	// minRestartDelay and maxRestartDelay bound the wait before starting
	// again a server that died or failed to start: it doubles with each
	// failure in a row, from min to max.
	minRestartDelay = time.Second
	maxRestartDelay = 30 * time.Second
)

// HandlerSpec is the value of a capabilities-file handler
// {"mcp": {"command": ["cmd", "arg"…], "tool": "NAME"}} or
// {"mcp": {"url": "http://…/mcp", "tool": "NAME"}}.
type HandlerSpec struct {
	// Command runs an MCP server on stdio.
	Command []string `json:"command,omitempty"`
	// URL is a Streamable HTTP MCP server.
	URL string `json:"url,omitempty"`
	// Tool names the server's tool this capability runs.
	Tool string `json:"tool"`
}

// key identifies the server a spec names.
func (s *HandlerSpec) key() string {
	b, _ := json.Marshal(struct {
		C []string `json:"c,omitempty"`
		U string   `json:"u,omitempty"`
	}{s.Command, s.URL})
	return string(b)
}

func (s *HandlerSpec) check() error {
	switch {
	case len(s.Command) > 0 && s.URL != "":
		return errors.New(`set "command" or "url", not both`)
	case len(s.Command) == 0 && s.URL == "":
		return errors.New(`set "command": ["cmd", "arg"…] or "url": "http://…/mcp"`)
	case len(s.Command) > 0 && s.Command[0] == "":
		return errors.New(`"command" is empty`)
	case strings.TrimSpace(s.Tool) == "":
		return errors.New(`"tool" is required`)
	}
	if s.URL != "" {
		u, err := url.Parse(s.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf(`"url" %q is not an http(s) URL`, s.URL)
		}
	}
	return nil
}

// PoolOption configures NewPool.
type PoolOption func(*Pool)

// WithPoolLogger sets the pool's logger (default: discard).
func WithPoolLogger(l *slog.Logger) PoolOption { return func(p *Pool) { p.log = l } }

// WithServerStderr sends the stderr of the servers the pool starts to w
// (default: discarded).
func WithServerStderr(w io.Writer) PoolOption { return func(p *Pool) { p.stderr = w } }

// Pool runs the MCP servers that capabilities-file "mcp" handlers name:
// each server (one command line or URL) is started once, shared by every
// capability that names it, kept running, and started again after a delay
// when it dies. Close stops them all.
type Pool struct {
	log     *slog.Logger
	stderr  io.Writer
	mu      sync.Mutex
	servers map[string]*upstream
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// NewPool returns an empty pool.
func NewPool(opts ...PoolOption) *Pool {
	p := &Pool{log: slog.New(slog.DiscardHandler), servers: make(map[string]*upstream)}
	for _, o := range opts {
		o(p)
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	return p
}

// Close stops every server of the pool and waits for their watchers.
func (p *Pool) Close() error {
	p.cancel()
	p.mu.Lock()
	ups := make([]*upstream, 0, len(p.servers))
	for _, u := range p.servers {
		ups = append(ups, u)
	}
	p.mu.Unlock()
	var errs []error
	for _, u := range ups {
		errs = append(errs, u.close())
	}
	p.wg.Wait()
	return errors.Join(errs...)
}

// ToolHandler runs one tool of an MCP server as a mesh capability.
type ToolHandler struct {
	up   *upstream
	tool string
}

// Handler builds the handler of capability c from its "mcp" spec (decoded
// strictly): it starts the server if the pool does not run it yet, checks
// that the tool exists and, when c has no input schema, gives c the
// tool's (and its description when c has none).
func (p *Pool) Handler(ctx context.Context, c *protocol.Capability, raw json.RawMessage) (*ToolHandler, error) {
	var spec HandlerSpec
	if err := protocol.DecodeStrict(raw, &spec); err != nil {
		return nil, fmt.Errorf(`{"command": […], "tool": "NAME"} or {"url": "…", "tool": "NAME"}: %w`, err)
	}
	if err := spec.check(); err != nil {
		return nil, err
	}
	if p.ctx.Err() != nil {
		return nil, errors.New("mcp: the pool is closed")
	}
	p.mu.Lock()
	up, ok := p.servers[spec.key()]
	if !ok {
		if len(p.servers) >= MaxPoolServers {
			p.mu.Unlock()
			return nil, fmt.Errorf("mcp: more than %d MCP servers", MaxPoolServers)
		}
		up = &upstream{pool: p, spec: spec}
		p.servers[spec.key()] = up
	}
	p.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, StartTimeout)
	defer cancel()
	sess, err := up.session(ctx)
	if err != nil {
		return nil, err
	}
	var found *sdk.Tool
	n := 0
	for t, err := range sess.Tools(ctx, nil) {
		if err != nil {
			return nil, fmt.Errorf("mcp: %s: tools/list: %w", up.name(), err)
		}
		if n++; n > maxUpstreamTools {
			return nil, fmt.Errorf("mcp: %s lists more than %d tools", up.name(), maxUpstreamTools)
		}
		if t.Name == spec.Tool {
			found = t
			break
		}
	}
	if found == nil {
		return nil, fmt.Errorf("mcp: %s has no tool %q", up.name(), spec.Tool)
	}
	if len(c.InputSchema) == 0 && found.InputSchema != nil {
		b, err := json.Marshal(found.InputSchema)
		if err != nil {
			return nil, fmt.Errorf("mcp: tool %q: input schema: %w", spec.Tool, err)
		}
		c.InputSchema = b
	}
	if c.Description == "" {
		c.Description = found.Description
	}
	return &ToolHandler{up: up, tool: spec.Tool}, nil
}

// Call runs the tool with params (a JSON object, or none). The result is
// the tool's structuredContent, else {"content": […]}; a result with
// isError is a *protocol.Error INTERNAL_ERROR with its text. progress
// (may be nil) receives {"progress", "total"?, "message"?} for each
// notifications/progress the server sends.
func (h *ToolHandler) Call(ctx context.Context, params json.RawMessage, progress func(json.RawMessage) error) (json.RawMessage, error) {
	var args any
	if p := strings.TrimSpace(string(params)); p != "" && p != "null" {
		if p[0] != '{' {
			return nil, protocol.Errorf(protocol.CodeInvalidMessage, "an MCP tool takes a JSON object")
		}
		args = json.RawMessage(p)
	}
	sess, err := h.up.session(ctx)
	if err != nil {
		return nil, protocol.Errorf(protocol.CodeInternalError, "%v", err)
	}
	cp := &sdk.CallToolParams{Name: h.tool, Arguments: args}
	if progress != nil {
		tok := protocol.NewID()
		cp.SetProgressToken(tok)
		h.up.progress.Store(tok, progress)
		defer h.up.progress.Delete(tok)
	}
	res, err := sess.CallTool(ctx, cp)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, protocol.Errorf(protocol.CodeInternalError, "MCP server %s: tools/call %s: %v", h.up.name(), h.tool, err)
	}
	if res.IsError {
		var texts []string
		for _, c := range res.Content {
			if t, ok := c.(*sdk.TextContent); ok {
				texts = append(texts, t.Text)
			}
		}
		msg := strings.Join(texts, "\n")
		if msg == "" {
			msg = "the MCP tool failed"
		}
		return nil, protocol.Errorf(protocol.CodeInternalError, "%s", msg)
	}
	var out []byte
	if res.StructuredContent != nil {
		out, err = json.Marshal(res.StructuredContent)
	} else {
		content := res.Content
		if content == nil {
			content = []sdk.Content{}
		}
		out, err = json.Marshal(map[string]any{"content": content})
	}
	if err != nil {
		return nil, protocol.Errorf(protocol.CodeInternalError, "MCP result: %v", err)
	}
	if len(out) > MaxHandlerResult {
		return nil, protocol.Errorf(protocol.CodeInternalError, "the MCP tool's result is %d bytes, more than %d", len(out), MaxHandlerResult)
	}
	return out, nil
}

// upstream is one MCP server of a pool.
type upstream struct {
	pool     *Pool
	spec     HandlerSpec
	progress sync.Map // progress token → func(json.RawMessage) error

	mu       sync.Mutex
	sess     *sdk.ClientSession
	started  time.Time
	failures int
	nextTry  time.Time
	closed   bool
}

func (u *upstream) name() string {
	if u.spec.URL != "" {
		return u.spec.URL
	}
	return strings.Join(u.spec.Command, " ")
}

// session returns the live session, starting the server when there is
// none and the restart delay has passed.
func (u *upstream) session(ctx context.Context) (*sdk.ClientSession, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.closed {
		return nil, errors.New("mcp: the pool is closed")
	}
	if u.sess != nil {
		return u.sess, nil
	}
	if wait := time.Until(u.nextTry); wait > 0 {
		return nil, fmt.Errorf("mcp: the MCP server %s is down; it starts again in %v", u.name(), wait.Round(time.Millisecond))
	}
	sess, err := u.connect(ctx)
	if err != nil {
		u.failures++
		u.nextTry = time.Now().Add(restartDelay(u.failures))
		return nil, fmt.Errorf("mcp: start the MCP server %s: %w", u.name(), err)
	}
	u.sess, u.started = sess, time.Now()
	u.pool.wg.Add(1)
	go u.watch(sess)
	return sess, nil
}

// restartDelay is the wait after n failures in a row.
func restartDelay(n int) time.Duration {
	d := minRestartDelay
	for i := 1; i < n && d < maxRestartDelay; i++ {
		d *= 2
	}
	return min(d, maxRestartDelay)
}

func (u *upstream) connect(ctx context.Context) (*sdk.ClientSession, error) {
	var t sdk.Transport
	if u.spec.URL != "" {
		t = &sdk.StreamableClientTransport{Endpoint: u.spec.URL}
	} else {
		// The server lives as long as the pool, not as the request that
		// started it.
		cmd := exec.CommandContext(u.pool.ctx, u.spec.Command[0], u.spec.Command[1:]...)
		childproc.Tie(cmd)
		cmd.Stderr = u.pool.stderr
		t = &sdk.CommandTransport{Command: cmd}
	}
	c := sdk.NewClient(&sdk.Implementation{Name: "meshagent", Version: "mcp-handler"}, &sdk.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *sdk.ProgressNotificationClientRequest) {
			tok, ok := r.Params.ProgressToken.(string)
			if !ok {
				return
			}
			f, ok := u.progress.Load(tok)
			if !ok {
				return
			}
			body := map[string]any{"progress": r.Params.Progress}
			if r.Params.Total > 0 {
				body["total"] = r.Params.Total
			}
			if r.Params.Message != "" {
				body["message"] = r.Params.Message
			}
			b, _ := json.Marshal(body)
			_ = f.(func(json.RawMessage) error)(b)
		},
	})
	return c.Connect(ctx, t, nil)
}

// watch waits for the session to end and forgets it, so that the next
// call starts the server again (after the restart delay).
func (u *upstream) watch(sess *sdk.ClientSession) {
	defer u.pool.wg.Done()
	done := make(chan struct{})
	go func() {
		_ = sess.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-u.pool.ctx.Done():
		_ = sess.Close()
		<-done
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.sess == sess {
		u.sess = nil
		if time.Since(u.started) > maxRestartDelay {
			u.failures = 0 // it ran well for a while: start again soon
		}
		u.failures++
		u.nextTry = time.Now().Add(restartDelay(u.failures))
		if !u.closed {
			u.pool.log.Warn("mcp: the MCP server stopped; it starts again at the next call", "server", u.name(), "after", restartDelay(u.failures))
		}
	}
}

func (u *upstream) close() error {
	u.mu.Lock()
	u.closed = true
	sess := u.sess
	u.mu.Unlock()
	if sess != nil {
		return sess.Close()
	}
	return nil
}
