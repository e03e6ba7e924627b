package a2a

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/rpc"
	"github.com/meshagent/meshagent/sign"
)

// cardFetchTimeout bounds fetching one agent's card over the mesh.
const cardFetchTimeout = 10 * time.Second

// Gateway serves the mesh's agents over A2A v1.0's JSON-RPC binding, as a
// client of a node's local API: GET /.well-known/agent-card.json is the
// node's own card, GET /agents/<agentId>/.well-known/agent-card.json a mesh
// agent's, POST /agents/<agentId>/ its JSON-RPC endpoint, GET /agents the
// agents the node knows. Every card is the agent's own, fetched over the
// mesh (a2a.card) and checked against its signature before it is served.
// It is an http.Handler; its goroutines (one per running task) end before
// Close returns.
type Gateway struct {
	cfg   Config
	api   *rpc.Client
	self  string
	tasks Tasks
	store *taskStore
	log   *slog.Logger

	ctx    context.Context // ends on Close, and with it every task's call
	cancel context.CancelFunc
	wg     sync.WaitGroup

	cardMu sync.Mutex
	cards  map[string]cachedCard
}

type cachedCard struct {
	card AgentCard
	at   time.Time
}

// New returns a Gateway over the local API client api, which it uses but
// does not close.
func New(ctx context.Context, api *rpc.Client, opts ...Option) (*Gateway, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	cfg.BaseURL = strings.TrimSuffix(cfg.BaseURL, "/")
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Tasks == nil {
		cfg.Tasks = MeshTasks{Client: api}
	}
	self, err := api.AgentID(ctx)
	if err != nil {
		return nil, fmt.Errorf("a2a: read the node's agent id: %w", err)
	}
	gctx, cancel := context.WithCancel(context.Background())
	return &Gateway{
		cfg: cfg, api: api, self: self, tasks: cfg.Tasks,
		store: newTaskStore(cfg.MaxTasks, cfg.TaskTTL),
		log:   cfg.Logger.With("component", "a2a"),
		ctx:   gctx, cancel: cancel,
		cards: make(map[string]cachedCard),
	}, nil
}

// Close cancels the running tasks' calls and waits for their goroutines.
func (g *Gateway) Close() error {
	g.cancel()
	g.wg.Wait()
	return nil
}

// AgentURL returns the JSON-RPC URL of an agent's endpoint.
func (g *Gateway) AgentURL(agent string) string { return g.cfg.BaseURL + "/agents/" + agent + "/" }

// ServeHTTP routes the gateway's paths.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := r.URL.Path
	switch {
	case path == "/.well-known/agent-card.json":
		g.serveCard(w, r, g.self)
		return
	case path == "/agents" || path == "/agents/":
		g.serveAgents(w, r)
		return
	}
	rest, ok := strings.CutPrefix(path, "/agents/")
	if !ok {
		http.NotFound(w, r)
		return
	}
	id, sub, _ := strings.Cut(rest, "/")
	agent, err := sign.ParseAgentID(id)
	if err != nil || agent.String() != id {
		http.Error(w, "not a mesh agent id: "+id, http.StatusNotFound)
		return
	}
	switch sub {
	case ".well-known/agent-card.json":
		g.serveCard(w, r, id)
	case "":
		g.serveRPC(w, r, id)
	default:
		http.NotFound(w, r)
	}
}

func (g *Gateway) serveAgents(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	peers, err := g.api.Peers(r.Context())
	if err != nil {
		http.Error(w, "local API: "+err.Error(), http.StatusBadGateway)
		return
	}
	type agentRef struct {
		AgentID string `json:"agentId"`
		Name    string `json:"name,omitempty"`
		Card    string `json:"card"`
	}
	out := struct {
		Agents []agentRef `json:"agents"`
	}{Agents: []agentRef{{AgentID: g.self, Card: g.AgentURL(g.self) + ".well-known/agent-card.json"}}}
	for _, p := range peers {
		if p.AgentID != g.self && p.Connected {
			out.Agents = append(out.Agents, agentRef{AgentID: p.AgentID, Name: p.Name, Card: g.AgentURL(p.AgentID) + ".well-known/agent-card.json"})
		}
	}
	writeJSON(w, http.StatusOK, out)
}

func (g *Gateway) serveCard(w http.ResponseWriter, r *http.Request, agent string) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	card, err := g.card(r.Context(), agent)
	if err != nil {
		g.log.Info("a2a: no card", "agent", agent, "err", err)
		status := http.StatusBadGateway
		if pe := new(protocol.Error); errors.As(err, &pe) && pe.Code == protocol.CodeUnknownAgent {
			status = http.StatusNotFound
		}
		http.Error(w, err.Error(), status)
		return
	}
	writeJSON(w, http.StatusOK, card)
}

// card returns agent's signed card naming this gateway's endpoint for it,
// from the cache or over the mesh, checked against the agent's key.
func (g *Gateway) card(ctx context.Context, agent string) (AgentCard, error) {
	now := g.cfg.Now()
	g.cardMu.Lock()
	c, ok := g.cards[agent]
	g.cardMu.Unlock()
	if ok && now.Sub(c.at) < g.cfg.CardTTL {
		return c.card, nil
	}
	id, err := peer.Decode(agent)
	if err != nil {
		return AgentCard{}, fmt.Errorf("a2a: agent id %q: %w", agent, err)
	}
	params, _ := json.Marshal(CardParams{URL: g.AgentURL(agent)})
	resp, err := g.api.MeshCall(ctx, protocol.CallRequest{To: agent, Action: CardCapability, Params: params, Timeout: cardFetchTimeout}, nil)
	if err != nil {
		return AgentCard{}, fmt.Errorf("a2a: card of %s: %w", agent, err)
	}
	var card AgentCard
	if len(resp.Result) > maxCardBytes {
		return AgentCard{}, fmt.Errorf("a2a: card of %s is larger than %d bytes", agent, maxCardBytes)
	}
	if err := protocol.DecodeStrict(resp.Result, &card, protocol.AllowUnknown()); err != nil {
		return AgentCard{}, fmt.Errorf("a2a: card of %s: %w", agent, err)
	}
	if err := VerifyCard(card, id); err != nil {
		return AgentCard{}, err
	}
	if len(card.SupportedInterfaces) == 0 || card.SupportedInterfaces[0].URL != g.AgentURL(agent) {
		return AgentCard{}, fmt.Errorf("a2a: card of %s does not name the URL asked for", agent)
	}
	g.cardMu.Lock()
	if len(g.cards) >= maxCards {
		clear(g.cards)
	}
	g.cards[agent] = cachedCard{card: card, at: now}
	g.cardMu.Unlock()
	return card, nil
}

// serveRPC serves one JSON-RPC request at an agent's endpoint.
func (g *Gateway) serveRPC(w http.ResponseWriter, r *http.Request, agent string) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		http.Error(w, "POST a JSON-RPC request", http.StatusMethodNotAllowed)
		return
	}
	// A browser cannot send application/json across origins without a
	// preflight, which the gateway never grants: a web page cannot drive
	// the mesh through a gateway on loopback.
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		http.Error(w, "Content-Type must be application/json", http.StatusUnsupportedMediaType)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxRequestBytes+1))
	if err != nil {
		http.Error(w, "read body: "+err.Error(), http.StatusBadRequest)
		return
	}
	if len(body) > maxRequestBytes {
		writeRPC(w, nil, nil, Errorf(CodeInvalidRequest, "invalid request: larger than %d bytes", maxRequestBytes))
		return
	}
	req, rerr := DecodeRequest(body)
	if rerr != nil {
		var id json.RawMessage
		if req != nil {
			id = req.ID
		}
		writeRPC(w, id, nil, rerr)
		return
	}
	if v := r.Header.Get("A2A-Version"); v != "" && v != ProtocolVersion && !strings.HasPrefix(v, "1.") {
		writeRPC(w, req.ID, nil, Errorf(CodeVersionNotSupported, "A2A version %q is not supported; this gateway speaks %s", v, ProtocolVersion))
		return
	}
	ctx := r.Context()
	var (
		result any
		e      *Error
	)
	switch req.Method {
	case MethodSendMessage:
		result, e = g.sendMessage(ctx, agent, req.Params)
	case MethodSendStreamingMessage:
		t, _, e := g.startTask(ctx, agent, req.Params)
		if e != nil {
			writeRPC(w, req.ID, nil, e)
			return
		}
		g.stream(w, r, req.ID, t)
		return
	case MethodGetTask:
		result, e = g.getTask(ctx, agent, req.Params)
	case MethodCancelTask:
		result, e = g.cancelTask(ctx, agent, req.Params)
	case MethodListTasks:
		result, e = g.listTasks(ctx, agent, req.Params)
	case MethodSubscribeToTask:
		var p SubscribeToTaskRequest
		if e := decodeParams(req.Method, req.Params, &p); e != nil {
			writeRPC(w, req.ID, nil, e)
			return
		}
		t, e := g.findTask(ctx, agent, p.ID)
		if e != nil {
			writeRPC(w, req.ID, nil, e)
			return
		}
		g.stream(w, r, req.ID, t)
		return
	default:
		e = Errorf(CodeMethodNotFound, "method not found: %s", req.Method)
	}
	writeRPC(w, req.ID, result, e)
}

// sendMessage starts a task and, unless configuration.returnImmediately,
// waits for its end (or the client's).
func (g *Gateway) sendMessage(ctx context.Context, agent string, raw json.RawMessage) (any, *Error) {
	t, p, e := g.startTask(ctx, agent, raw)
	if e != nil {
		return nil, e
	}
	var hl *int32
	if p.Configuration != nil {
		hl = p.Configuration.HistoryLength
		if p.Configuration.ReturnImmediately {
			s := t.snapshot(hl, true)
			return SendMessageResponse{Task: &s}, nil
		}
	}
	select {
	case <-t.done:
	case <-ctx.Done():
	}
	s := t.snapshot(hl, true)
	return SendMessageResponse{Task: &s}, nil
}

// startTask reads a SendMessageRequest and starts its mesh task: the skill
// is message.metadata.skill (or the agent's only skill), the params the
// first data part.
func (g *Gateway) startTask(ctx context.Context, agent string, raw json.RawMessage) (*task, *SendMessageRequest, *Error) {
	var p SendMessageRequest
	if e := decodeParams(MethodSendMessage, raw, &p); e != nil {
		return nil, nil, e
	}
	m := p.Message
	switch {
	case m == nil:
		return nil, nil, Errorf(CodeInvalidParams, `invalid params: "message" is required`)
	case m.Role != RoleUser:
		return nil, nil, Errorf(CodeInvalidParams, `invalid params: message.role must be %q`, RoleUser)
	case m.TaskID != "":
		return nil, nil, Errorf(CodeUnsupportedOperation, "a mesh task takes one message: continuing task %q is not supported", m.TaskID)
	case len(m.Parts) == 0:
		return nil, nil, Errorf(CodeInvalidParams, "invalid params: message.parts is empty")
	}
	card, err := g.card(ctx, agent)
	if err != nil {
		return nil, nil, Errorf(CodeInternalError, "%v", err)
	}
	skill, e := messageSkill(m.Metadata, card.Skills)
	if e != nil {
		return nil, nil, e
	}
	params, e := messageParams(m.Parts)
	if e != nil {
		return nil, nil, e
	}
	contextID := m.ContextID
	if contextID == "" {
		contextID = newID()
	}
	if g.store.full() {
		return nil, nil, Errorf(CodeInternalError, "the gateway already runs %d tasks; try again later", g.cfg.MaxTasks)
	}
	id, err := g.tasks.Submit(ctx, agent, skill, params, g.cfg.TaskTimeout)
	user := *m
	user.ContextID = contextID
	if err != nil {
		// Refused before it became a mesh task (unreachable, policy, bad
		// params): a failed task that only this gateway knows.
		user.TaskID = newID()
		t := newTask(g.cfg.Now(), agent, user.TaskID, contextID, TaskStateSubmitted, []Message{user})
		t.fail(g.cfg.Now(), err)
		if g.store.add(g.cfg.Now(), t.snap.ID, t) == nil {
			return nil, nil, Errorf(CodeInternalError, "the gateway already runs %d tasks; try again later", g.cfg.MaxTasks)
		}
		return t, &p, nil
	}
	user.TaskID = id
	t := g.follow(agent, id, contextID, TaskStateSubmitted, []Message{user})
	if t == nil {
		// No room after all: the mesh task runs on, and GetTask finds it.
		return nil, nil, Errorf(CodeInternalError, "the gateway already runs %d tasks; task %s was submitted, ask GetTask for it later", g.cfg.MaxTasks, id)
	}
	return t, &p, nil
}

// follow stores a task for the mesh task id and follows it until it ends
// (or the gateway closes), passing on its progress. It returns the stored
// task, which may be one stored already, or nil if the store is full.
func (g *Gateway) follow(agent, id, contextID string, state TaskState, history []Message) *task {
	t := newTask(g.cfg.Now(), agent, id, contextID, state, history)
	tctx, cancel := context.WithCancel(g.ctx)
	t.cancel = cancel
	stored := g.store.add(g.cfg.Now(), id, t)
	if stored != t {
		cancel()
		return stored
	}
	g.wg.Go(func() {
		defer cancel()
		rec, err := g.tasks.Wait(tctx, id, func(p json.RawMessage) { t.progress(g.cfg.Now(), p) })
		if tctx.Err() != nil {
			return // cancelled, or the gateway closes: the mesh task is the record
		}
		t.end(g.cfg.Now(), rec, err)
	})
	return t
}

// findTask returns the agent's task id: the one in memory, or else the
// node's durable record of it (a task from before the gateway restarted,
// or one it forgot), which it then follows.
func (g *Gateway) findTask(ctx context.Context, agent, id string) (*task, *Error) {
	if id == "" {
		return nil, Errorf(CodeInvalidParams, `invalid params: "id" is required`)
	}
	if t := g.store.get(id); t != nil {
		if t.agent != agent {
			return nil, Errorf(CodeTaskNotFound, "task %q not found", id)
		}
		return t, nil
	}
	infos, err := g.tasks.List(ctx, agent)
	if err != nil {
		return nil, Errorf(CodeInternalError, "read the node's tasks: %v", err)
	}
	i := slices.IndexFunc(infos, func(ti protocol.TaskInfo) bool { return ti.TaskID == id })
	if i < 0 {
		return nil, Errorf(CodeTaskNotFound, "task %q not found", id)
	}
	t := g.follow(agent, id, id, stateOf(infos[i].State), nil)
	if t == nil {
		return nil, Errorf(CodeInternalError, "the gateway already runs %d tasks; try again later", g.cfg.MaxTasks)
	}
	if infos[i].State.Final() {
		// Its follower returns at once; answer with the end, not the
		// state before it.
		select {
		case <-t.done:
		case <-ctx.Done():
		}
	}
	return t, nil
}

// messageSkill reads metadata.skill, which must name one of skills; with
// no metadata.skill, an agent's only skill is meant.
func messageSkill(meta json.RawMessage, skills []AgentSkill) (string, *Error) {
	var m struct {
		Skill *string `json:"skill"`
	}
	if len(meta) > 0 {
		if err := protocol.DecodeStrict(meta, &m, protocol.AllowUnknown()); err != nil {
			return "", Errorf(CodeInvalidParams, "invalid params: message.metadata: %v", err)
		}
	}
	if m.Skill == nil {
		if len(skills) == 1 {
			return skills[0].ID, nil
		}
		return "", Errorf(CodeInvalidParams, `invalid params: name the skill in message.metadata.skill (the agent has %d)`, len(skills))
	}
	for _, s := range skills {
		if s.ID == *m.Skill {
			return s.ID, nil
		}
	}
	return "", Errorf(CodeInvalidParams, "invalid params: the agent has no skill %q", *m.Skill)
}

// messageParams returns the capability's params: the first data part,
// which must be an object; with no data part, the text parts joined as
// {"text": …}.
func messageParams(parts []Part) (json.RawMessage, *Error) {
	var texts []string
	for i, p := range parts {
		n := 0
		for _, set := range []bool{p.Text != nil, p.Raw != nil, p.URL != nil, len(p.Data) > 0} {
			if set {
				n++
			}
		}
		if n != 1 {
			return nil, Errorf(CodeInvalidParams, "invalid params: message.parts[%d] must hold exactly one of text, raw, url and data", i)
		}
		switch {
		case len(p.Data) > 0:
			if d := bytes.TrimSpace(p.Data); len(d) == 0 || d[0] != '{' {
				return nil, Errorf(CodeInvalidParams, "invalid params: message.parts[%d].data must be an object (a capability's params)", i)
			}
			return p.Data, nil
		case p.Text != nil:
			texts = append(texts, *p.Text)
		}
	}
	if len(texts) == 0 {
		return nil, Errorf(CodeContentTypeNotSupported, "a mesh capability takes JSON: send its params as a data part")
	}
	b, _ := json.Marshal(map[string]string{"text": strings.Join(texts, "\n")})
	return b, nil
}

func (g *Gateway) getTask(ctx context.Context, agent string, raw json.RawMessage) (any, *Error) {
	var p GetTaskRequest
	if e := decodeParams(MethodGetTask, raw, &p); e != nil {
		return nil, e
	}
	t, e := g.findTask(ctx, agent, p.ID)
	if e != nil {
		return nil, e
	}
	return t.snapshot(p.HistoryLength, true), nil
}

func (g *Gateway) cancelTask(ctx context.Context, agent string, raw json.RawMessage) (any, *Error) {
	var p CancelTaskRequest
	if e := decodeParams(MethodCancelTask, raw, &p); e != nil {
		return nil, e
	}
	t, e := g.findTask(ctx, agent, p.ID)
	if e != nil {
		return nil, e
	}
	if !t.finish(g.cfg.Now(), TaskStatus{State: TaskStateCanceled}, nil) {
		return nil, Errorf(CodeTaskNotCancelable, "task %q has already ended (%s)", p.ID, t.snapshot(nil, false).Status.State)
	}
	// Cancel the mesh task on its provider, then stop following it.
	if _, err := g.tasks.Cancel(ctx, agent, p.ID); err != nil {
		g.log.Info("a2a: mesh cancel", "task", p.ID, "agent", agent, "err", err)
	}
	t.cancel()
	return t.snapshot(nil, true), nil
}

// Page sizes of ListTasks.
const (
	defaultPageSize = 50
	maxPageSize     = 100
)

// listTasks lists the tasks in memory, newest first, then those of the
// node's durable records the gateway has not followed since it started
// (from before a restart), newest first. Those carry their state but no
// timestamp or artifacts (GetTask has them), so statusTimestampAfter
// leaves them out.
func (g *Gateway) listTasks(ctx context.Context, agent string, raw json.RawMessage) (any, *Error) {
	var p ListTasksRequest
	if e := decodeParams(MethodListTasks, raw, &p); e != nil {
		return nil, e
	}
	size := defaultPageSize
	if p.PageSize != nil {
		if *p.PageSize < 1 || *p.PageSize > maxPageSize {
			return nil, Errorf(CodeInvalidParams, "invalid params: pageSize must be 1 to %d", maxPageSize)
		}
		size = int(*p.PageSize)
	}
	offset := 0
	if p.PageToken != "" {
		n, err := strconv.Atoi(p.PageToken)
		if err != nil || n < 0 {
			return nil, Errorf(CodeInvalidParams, "invalid params: pageToken %q is not one this gateway gave", p.PageToken)
		}
		offset = n
	}
	var after time.Time
	if p.StatusTimestampAfter != "" {
		t, err := time.Parse(time.RFC3339Nano, p.StatusTimestampAfter)
		if err != nil {
			return nil, Errorf(CodeInvalidParams, "invalid params: statusTimestampAfter: %v", err)
		}
		after = t
	}
	artifacts := p.IncludeArtifacts != nil && *p.IncludeArtifacts
	infos, err := g.tasks.List(ctx, agent)
	if err != nil {
		return nil, Errorf(CodeInternalError, "read the node's tasks: %v", err)
	}
	snaps := make([]Task, 0, len(infos))
	for _, t := range g.store.list(agent) {
		snaps = append(snaps, t.snapshot(p.HistoryLength, artifacts))
	}
	for _, ti := range slices.Backward(infos) {
		if g.store.get(ti.TaskID) == nil {
			snaps = append(snaps, Task{ID: ti.TaskID, ContextID: ti.TaskID, Status: TaskStatus{State: stateOf(ti.State)}})
		}
	}
	var all []Task
	for _, s := range snaps {
		if p.ContextID != "" && s.ContextID != p.ContextID || p.Status != "" && p.Status != TaskStateUnspecified && s.Status.State != p.Status {
			continue
		}
		if !after.IsZero() {
			if ts, err := time.Parse(time.RFC3339Nano, s.Status.Timestamp); err != nil || ts.Before(after) {
				continue
			}
		}
		all = append(all, s)
	}
	out := ListTasksResponse{Tasks: []Task{}, PageSize: int32(size), TotalSize: int32(len(all))}
	if offset < len(all) {
		end := min(offset+size, len(all))
		out.Tasks = all[offset:end]
		if end < len(all) {
			out.NextPageToken = strconv.Itoa(end)
		}
	}
	return out, nil
}

// stream answers with Server-Sent Events: the task as it is, then each
// change, ending with the final task.
func (g *Gateway) stream(w http.ResponseWriter, r *http.Request, id json.RawMessage, t *task) {
	snap, ch := t.subscribe()
	if ch != nil {
		defer t.unsubscribe(ch)
	}
	flusher, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	send := func(ev StreamResponse) bool {
		b, err := json.Marshal(response{JSONRPC: "2.0", ID: id, Result: ev})
		if err != nil {
			return false
		}
		if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
			return false
		}
		if flusher != nil {
			flusher.Flush()
		}
		return true
	}
	if !send(StreamResponse{Task: &snap}) || ch == nil {
		return
	}
	for {
		select {
		case ev, ok := <-ch:
			if !ok || !send(ev) {
				return
			}
		case <-r.Context().Done():
			return
		case <-g.ctx.Done():
			return
		}
	}
}

// stateOf maps a mesh task's state to an A2A task's.
func stateOf(s protocol.TaskState) TaskState {
	switch s {
	case protocol.TaskCompleted:
		return TaskStateCompleted
	case protocol.TaskFailed:
		return TaskStateFailed
	case protocol.TaskCancelled:
		return TaskStateCanceled
	case protocol.TaskRejected:
		return TaskStateRejected
	case protocol.TaskPending, protocol.TaskValidating:
		return TaskStateSubmitted
	default:
		return TaskStateWorking
	}
}

func writeRPC(w http.ResponseWriter, id json.RawMessage, result any, e *Error) {
	if id == nil {
		id = json.RawMessage("null")
	}
	resp := response{JSONRPC: "2.0", ID: id}
	if e != nil {
		resp.Error = e
	} else {
		resp.Result = result
	}
	writeJSON(w, http.StatusOK, resp)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, "encode: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// newID returns a random UUID (version 4).
func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}
