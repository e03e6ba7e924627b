package mcp

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/meshagent/meshagent/protocol"
)

// API is what the server needs of a node's local API; *rpc.Client has it.
type API interface {
	// Peers lists the agents the node knows, with their capabilities.
	Peers(ctx context.Context) ([]protocol.PeerInfo, error)
	// Capabilities lists the node's own capability objects.
	Capabilities(ctx context.Context) ([]protocol.Capability, error)
	// MeshCallAny runs a capability on any provider.
	MeshCallAny(ctx context.Context, req protocol.CallRequest, onProgress func(*protocol.Response)) (*protocol.Response, string, error)
	// Task reads (or, with cancel, cancels) a task the node sent.
	Task(ctx context.Context, taskID, provider string, cancel bool) (*protocol.Task, error)
}

// Bounds of the server.
const (
	// DefaultPollInterval is how often the server reads the node's
	// capabilities and peers to keep its tool list current.
	DefaultPollInterval = 2 * time.Second
	// MinPollInterval bounds WithPollInterval from below.
	MinPollInterval = 100 * time.Millisecond
	// MaxTools bounds the tool list: capabilities beyond it (in sorted
	// order) are left out, with a warning.
	MaxTools = 1000
	// DefaultCallTimeout bounds one tools/call on the mesh.
	DefaultCallTimeout = 5 * time.Minute
	// cancelTimeout bounds the mesh.taskCancel sent when a call is cancelled.
	cancelTimeout = 10 * time.Second
	// listTimeout bounds one read of the node's capabilities and peers.
	listTimeout = 10 * time.Second
)

// Option configures New.
type Option func(*config)

type config struct {
	log         *slog.Logger
	poll        time.Duration
	callTimeout time.Duration
	version     string
}

// WithLogger sets the logger (default: discard).
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.log = l } }

// WithPollInterval sets how often the tool list is refreshed (default
// DefaultPollInterval, at least MinPollInterval).
func WithPollInterval(d time.Duration) Option { return func(c *config) { c.poll = d } }

// WithCallTimeout bounds each tools/call (default DefaultCallTimeout).
func WithCallTimeout(d time.Duration) Option { return func(c *config) { c.callTimeout = d } }

// WithVersion sets the version the server reports in initialize.
func WithVersion(v string) Option { return func(c *config) { c.version = v } }

// Server is an MCP server whose tools are the mesh's capabilities: those
// the node serves and those of the agents it knows. It keeps the list
// current by polling the local API and tells clients when it changes
// (notifications/tools/list_changed). Close stops it.
type Server struct {
	api API
	cfg config
	srv *sdk.Server

	mu    sync.Mutex
	tools map[string]*listed // by tool name

	ready     chan struct{} // closed after the first refresh
	readyOnce sync.Once
	ctx       context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup
}

// listed is a tool as registered, with the bytes it was registered with so
// that an unchanged capability is not registered again.
type listed struct {
	tool *Tool
	raw  []byte
}

// New returns a server over api and starts its refresh loop; the first
// refresh runs before New returns, so the first tools/list is complete.
func New(ctx context.Context, api API, opts ...Option) (*Server, error) {
	cfg := config{log: slog.New(slog.DiscardHandler), poll: DefaultPollInterval, callTimeout: DefaultCallTimeout, version: "dev"}
	for _, o := range opts {
		o(&cfg)
	}
	if api == nil {
		return nil, errors.New("mcp: nil API")
	}
	if cfg.poll < MinPollInterval {
		return nil, fmt.Errorf("mcp: poll interval %v is below %v", cfg.poll, MinPollInterval)
	}
	if cfg.callTimeout <= 0 {
		return nil, fmt.Errorf("mcp: call timeout %v is not positive", cfg.callTimeout)
	}
	s := &Server{api: api, cfg: cfg, tools: make(map[string]*listed), ready: make(chan struct{})}
	s.srv = sdk.NewServer(&sdk.Implementation{Name: "meshagent", Version: cfg.version}, &sdk.ServerOptions{
		Logger:       cfg.log,
		HasTools:     true,
		Capabilities: &sdk.ServerCapabilities{Tools: &sdk.ToolCapabilities{ListChanged: true}},
		Instructions: "Each tool is a capability of the meshagent mesh, run on any agent that offers it.",
	})
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if err := s.Refresh(ctx); err != nil {
		s.cancel()
		return nil, err
	}
	s.wg.Add(1)
	go s.loop()
	return s, nil
}

// MCP returns the SDK server, to run on a transport.
func (s *Server) MCP() *sdk.Server { return s.srv }

// Close stops the refresh loop and waits for it.
func (s *Server) Close() error {
	s.cancel()
	s.wg.Wait()
	return nil
}

func (s *Server) loop() {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.poll)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(s.ctx, listTimeout)
		if err := s.Refresh(ctx); err != nil && s.ctx.Err() == nil {
			s.cfg.log.Warn("mcp: cannot read the mesh's capabilities", "err", err)
		}
		cancel()
	}
}

// collect returns what the tool list is made of: the node's own
// capabilities first, then those of the peers (sorted by agent id), one
// object per name (the first seen).
func collect(own []protocol.Capability, peers []protocol.PeerInfo) []protocol.Capability {
	seen := make(map[string]int)
	var out []protocol.Capability
	add := func(c protocol.Capability) {
		if c.Name == "" {
			return
		}
		if i, ok := seen[c.Name]; ok {
			// A fuller object (one with schemas, from a hello) beats a
			// name heard only in a heartbeat.
			if out[i].InputSchema == nil && out[i].OutputSchema == nil && out[i].Description == "" &&
				(c.InputSchema != nil || c.OutputSchema != nil || c.Description != "") {
				out[i] = c
			}
			return
		}
		seen[c.Name] = len(out)
		out = append(out, c)
	}
	for _, c := range own {
		add(c)
	}
	peers = slices.Clone(peers)
	slices.SortFunc(peers, func(a, b protocol.PeerInfo) int { return cmp.Compare(a.AgentID, b.AgentID) })
	for _, p := range peers {
		if p.Status == protocol.StatusStale {
			continue
		}
		for _, c := range p.Capabilities {
			add(c)
		}
	}
	return out
}

// Refresh reads the node's capabilities and peers and brings the tool list
// up to date: new capabilities are added, gone ones removed, changed ones
// replaced. The SDK sends notifications/tools/list_changed to every
// session after a change.
func (s *Server) Refresh(ctx context.Context) error {
	defer s.readyOnce.Do(func() { close(s.ready) })
	own, err := s.api.Capabilities(ctx)
	if err != nil {
		return fmt.Errorf("mcp: the node's capabilities: %w", err)
	}
	peers, err := s.api.Peers(ctx)
	if err != nil {
		return fmt.Errorf("mcp: the node's peers: %w", err)
	}
	tools := s.mapAll(collect(own, peers))

	s.mu.Lock()
	defer s.mu.Unlock()
	var gone []string
	for name := range s.tools {
		if _, ok := tools[name]; !ok {
			gone = append(gone, name)
		}
	}
	if len(gone) > 0 {
		slices.Sort(gone)
		s.srv.RemoveTools(gone...)
		for _, n := range gone {
			delete(s.tools, n)
		}
	}
	names := make([]string, 0, len(tools))
	for n := range tools {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		l := tools[n]
		if old, ok := s.tools[n]; ok && string(old.raw) == string(l.raw) {
			continue
		}
		s.tools[n] = l
		s.srv.AddTool(l.tool.MCP, s.handler(l.tool))
	}
	return nil
}

// mapAll maps the capabilities to tools, leaving out (with a warning)
// those whose schemas are not usable and those beyond MaxTools.
func (s *Server) mapAll(caps []protocol.Capability) map[string]*listed {
	slices.SortFunc(caps, func(a, b protocol.Capability) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	if len(caps) > MaxTools {
		s.cfg.log.Warn("mcp: too many capabilities; the last are not listed", "capabilities", len(caps), "max", MaxTools)
		caps = caps[:MaxTools]
	}
	names := make([]string, len(caps))
	for i, c := range caps {
		names[i] = c.Name
	}
	assigned := AssignNames(names)
	out := make(map[string]*listed, len(caps))
	for _, c := range caps {
		t, err := MapTool(c, assigned[c.Name])
		if err != nil {
			s.cfg.log.Warn("mcp: capability left out of the tool list", "err", err)
			continue
		}
		raw, err := json.Marshal(t.MCP)
		if err != nil {
			s.cfg.log.Warn("mcp: capability left out of the tool list", "capability", c.Name, "err", err)
			continue
		}
		out[t.MCP.Name] = &listed{tool: t, raw: raw}
	}
	return out
}

// handler runs tools/call for t on the mesh.
func (s *Server) handler(t *Tool) sdk.ToolHandler {
	return func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		params, err := t.Params(req.Params.Arguments)
		if err != nil {
			return ErrorResult(err), nil
		}
		var onProgress func(*protocol.Response)
		if tok := req.Params.GetProgressToken(); tok != nil && req.Session != nil {
			p := &progress{token: tok, session: req.Session, ctx: ctx}
			onProgress = p.send
		}
		taskID := protocol.NewID()
		callCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		defer cancel()
		stop := context.AfterFunc(ctx, cancel)
		defer stop()
		resp, _, err := s.api.MeshCallAny(callCtx, protocol.CallRequest{
			Action: t.Capability, Params: params, Timeout: s.cfg.callTimeout, CorrelationID: taskID,
		}, onProgress)
		if ctx.Err() != nil {
			// notifications/cancelled (or the session ended): cancel the
			// mesh task too, not only our wait for it.
			cctx, ccancel := context.WithTimeout(s.ctx, cancelTimeout)
			if _, cerr := s.api.Task(cctx, taskID, "", true); cerr != nil {
				s.cfg.log.Debug("mcp: cancel the mesh task", "task", taskID, "err", cerr)
			}
			ccancel()
			return nil, ctx.Err()
		}
		if err != nil {
			var pe *protocol.Error
			if errors.As(err, &pe) {
				return ErrorResult(pe), nil
			}
			return ErrorResult(protocol.Errorf(protocol.CodeInternalError, "local API: %v", err)), nil
		}
		return t.Result(resp.Result), nil
	}
}

// progress turns a mesh call's in_progress responses into
// notifications/progress: progress is the result's "progress" when it is
// a number larger than the last one sent, else the last one + 1, so it
// always grows; total and message come from the result when it has them.
type progress struct {
	token   any
	session *sdk.ServerSession
	ctx     context.Context
	mu      sync.Mutex
	last    float64
}

func (p *progress) send(r *protocol.Response) {
	var body struct {
		Progress *float64 `json:"progress"`
		Total    *float64 `json:"total"`
		Message  *string  `json:"message"`
	}
	// Members of other types are ignored: progress is a hint.
	var raw map[string]json.RawMessage
	if json.Unmarshal(r.Result, &raw) == nil {
		_ = json.Unmarshal(raw["progress"], &body.Progress)
		_ = json.Unmarshal(raw["total"], &body.Total)
		_ = json.Unmarshal(raw["message"], &body.Message)
	}
	p.mu.Lock()
	next := p.last + 1
	if body.Progress != nil && *body.Progress > p.last {
		next = *body.Progress
	}
	p.last = next
	params := &sdk.ProgressNotificationParams{ProgressToken: p.token, Progress: next}
	if body.Total != nil && *body.Total > 0 {
		params.Total = *body.Total
	}
	if body.Message != nil {
		params.Message = *body.Message
	}
	p.mu.Unlock()
	// It runs on the local API client's reader: do not wait on the MCP
	// client for long.
	ctx, cancel := context.WithTimeout(p.ctx, time.Second)
	defer cancel()
	_ = p.session.NotifyProgress(ctx, params)
}

// HTTPHandler serves Streamable HTTP (sessions with ids). Requests that
// reach a loopback listener with a Host that is not loopback are refused
// with 403 by the SDK; any request whose Origin is not a loopback origin
// is refused with 403 here, so a web page cannot drive the mesh (DNS
// rebinding).
func (s *Server) HTTPHandler() http.Handler {
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s.srv }, &sdk.StreamableHTTPOptions{
		Logger:         s.cfg.log,
		SessionTimeout: 30 * time.Minute,
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if o := r.Header.Get("Origin"); o != "" && !loopbackOrigin(o) {
			http.Error(w, "Forbidden: the Origin is not a loopback origin", http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// loopbackOrigin reports whether origin names localhost or a loopback IP.
func loopbackOrigin(origin string) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return false
	}
	return loopbackHost(u.Hostname())
}

func loopbackHost(h string) bool {
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}
