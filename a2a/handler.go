package a2a

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/meshagent/meshagent/protocol"
)

// Bounds of the "a2a" handler kind.
const (
	// DefaultHandlerTimeout bounds one call to the external agent (card,
	// SendMessage and any GetTask polls) unless the spec's "timeout" says
	// otherwise; MaxHandlerTimeout caps it.
	DefaultHandlerTimeout = time.Minute
	MaxHandlerTimeout     = time.Hour
	// maxResponseBytes bounds one JSON-RPC response of an external agent.
	maxResponseBytes = 4 << 20
	// handlerCardTTL is how long the external agent's card is reused.
	handlerCardTTL = 5 * time.Minute
	// maxPollInterval bounds the wait between two GetTask polls of a task
	// the agent answered before it ended.
	maxPollInterval = time.Second
)

// HandlerSpec is the value of a capabilities file's
// {"handler": {"a2a": {"url": "BASE_URL", "skill": "ID"}}}.
type HandlerSpec struct {
	// URL is the agent's base URL; its card is at
	// URL/.well-known/agent-card.json.
	URL string `json:"url"`
	// Skill is the id of the agent's skill to call.
	Skill string `json:"skill"`
	// Timeout bounds one call, as a Go duration ("30s"); default
	// DefaultHandlerTimeout.
	Timeout string `json:"timeout,omitempty"`
}

// Handler calls one skill of an external A2A v1.0 agent over its JSON-RPC
// interface: a mesh capability's params are sent as a data part with the
// skill in message.metadata.skill, and the result is the first data part
// of the completed task's artifacts. Any other end is INTERNAL_ERROR. It is
// safe for concurrent use.
type Handler struct {
	spec    HandlerSpec
	base    *url.URL
	timeout time.Duration
	http    *http.Client

	mu       sync.Mutex
	endpoint string
	cardAt   time.Time
}

// NewHandler decodes spec strictly and returns its Handler. Nothing is
// fetched until the first call.
func NewHandler(spec json.RawMessage) (*Handler, error) {
	var s HandlerSpec
	if err := protocol.DecodeStrict(spec, &s); err != nil {
		return nil, fmt.Errorf(`a2a handler takes {"url": "BASE_URL", "skill": "ID", "timeout"?}: %w`, err)
	}
	if err := CheckInterfaceURL(s.URL); err != nil {
		return nil, err
	}
	if s.Skill == "" {
		return nil, errors.New(`a2a handler: "skill" is required`)
	}
	h := &Handler{spec: s, timeout: DefaultHandlerTimeout, http: &http.Client{}}
	if s.Timeout != "" {
		d, err := time.ParseDuration(s.Timeout)
		if err != nil || d <= 0 || d > MaxHandlerTimeout {
			return nil, fmt.Errorf("a2a handler: timeout %q is not a duration in (0, %s]", s.Timeout, MaxHandlerTimeout)
		}
		h.timeout = d
	}
	base, _ := url.Parse(s.URL) // checked above
	if !strings.HasSuffix(base.Path, "/") {
		base.Path += "/"
	}
	h.base = base
	return h, nil
}

// Call runs the skill with params and returns its result.
func (h *Handler) Call(ctx context.Context, params json.RawMessage) (json.RawMessage, error) {
	ctx, cancel := context.WithTimeout(ctx, h.timeout)
	defer cancel()
	endpoint, err := h.resolve(ctx)
	if err != nil {
		return nil, protocol.Errorf(protocol.CodeInternalError, "a2a agent %s: %v", h.spec.URL, err)
	}
	if len(bytes.TrimSpace(params)) == 0 || string(params) == "null" {
		params = json.RawMessage("{}")
	}
	meta, _ := json.Marshal(map[string]string{"skill": h.spec.Skill})
	req := SendMessageRequest{Message: &Message{MessageID: newID(), Role: RoleUser, Parts: []Part{{Data: params}}, Metadata: meta}}
	var res SendMessageResponse
	if err := h.rpc(ctx, endpoint, MethodSendMessage, req, &res); err != nil {
		return nil, h.failed(ctx, err)
	}
	switch {
	case res.Message != nil:
		if d := firstData(res.Message.Parts); d != nil {
			return d, nil
		}
		return nil, protocol.Errorf(protocol.CodeInternalError, "a2a agent %s answered a message without a data part", h.spec.URL)
	case res.Task == nil:
		return nil, protocol.Errorf(protocol.CodeInternalError, "a2a agent %s answered neither a task nor a message", h.spec.URL)
	}
	t := *res.Task
	wait := 50 * time.Millisecond
	for !t.Status.State.Terminal() && !t.Status.State.Interrupted() {
		select {
		case <-ctx.Done():
			h.cancelTask(endpoint, t.ID)
			return nil, protocol.Errorf(protocol.CodeTimeout, "a2a agent %s: task %s still %s: %v", h.spec.URL, t.ID, t.Status.State, ctx.Err())
		case <-time.After(wait):
		}
		wait = min(2*wait, maxPollInterval)
		var next Task
		if err := h.rpc(ctx, endpoint, MethodGetTask, GetTaskRequest{ID: t.ID}, &next); err != nil {
			if ctx.Err() != nil {
				h.cancelTask(endpoint, t.ID)
			}
			return nil, h.failed(ctx, err)
		}
		t = next
	}
	if t.Status.State != TaskStateCompleted {
		msg := string(t.Status.State)
		if t.Status.Message != nil {
			if text := firstText(t.Status.Message.Parts); text != "" {
				msg += ": " + text
			}
		}
		return nil, protocol.Errorf(protocol.CodeInternalError, "a2a agent %s: task %s ended %s", h.spec.URL, t.ID, msg)
	}
	for _, a := range t.Artifacts {
		if d := firstData(a.Parts); d != nil {
			return d, nil
		}
	}
	return nil, protocol.Errorf(protocol.CodeInternalError, "a2a agent %s: task %s completed without a data part in its artifacts", h.spec.URL, t.ID)
}

// failed is the error of a call to the agent that failed with err: TIMEOUT
// when the call's own deadline (or its caller) ended it, whichever request
// was in flight then, else INTERNAL_ERROR.
func (h *Handler) failed(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return protocol.Errorf(protocol.CodeTimeout, "a2a agent %s: %v", h.spec.URL, ctx.Err())
	}
	return protocol.Errorf(protocol.CodeInternalError, "a2a agent %s: %v", h.spec.URL, err)
}

// cancelTask tells the agent, best effort and briefly, that the task is no
// longer wanted.
func (h *Handler) cancelTask(endpoint, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var t Task
	_ = h.rpc(ctx, endpoint, MethodCancelTask, CancelTaskRequest{ID: id}, &t)
}

func firstData(parts []Part) json.RawMessage {
	for _, p := range parts {
		if len(p.Data) > 0 {
			return p.Data
		}
	}
	return nil
}

func firstText(parts []Part) string {
	for _, p := range parts {
		if p.Text != nil {
			return *p.Text
		}
	}
	return ""
}

// resolve returns the agent's JSON-RPC v1.0 endpoint, from its card.
func (h *Handler) resolve(ctx context.Context) (string, error) {
	h.mu.Lock()
	if h.endpoint != "" && time.Since(h.cardAt) < handlerCardTTL {
		defer h.mu.Unlock()
		return h.endpoint, nil
	}
	h.mu.Unlock()
	cardURL := h.base.ResolveReference(&url.URL{Path: ".well-known/agent-card.json"})
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, cardURL.String(), nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("A2A-Version", ProtocolVersion)
	req.Header.Set("Accept", "application/json")
	body, err := h.do(req, maxCardBytes)
	if err != nil {
		return "", fmt.Errorf("card: %w", err)
	}
	var card AgentCard
	if err := protocol.DecodeStrict(body, &card, protocol.AllowUnknown()); err != nil {
		return "", fmt.Errorf("card at %s: %w", cardURL, err)
	}
	endpoint := ""
	for _, in := range card.SupportedInterfaces {
		if in.ProtocolBinding == TransportJSONRPC && (in.ProtocolVersion == ProtocolVersion || strings.HasPrefix(in.ProtocolVersion, "1.")) {
			endpoint = in.URL
			break
		}
	}
	if endpoint == "" {
		return "", fmt.Errorf("card at %s names no JSON-RPC interface of A2A 1.x", cardURL)
	}
	if err := CheckInterfaceURL(endpoint); err != nil {
		return "", err
	}
	found := false
	for _, s := range card.Skills {
		found = found || s.ID == h.spec.Skill
	}
	if !found {
		return "", fmt.Errorf("card at %s has no skill %q", cardURL, h.spec.Skill)
	}
	h.mu.Lock()
	h.endpoint, h.cardAt = endpoint, time.Now()
	h.mu.Unlock()
	return endpoint, nil
}

// rpc sends one JSON-RPC request and decodes its result into out.
func (h *Handler) rpc(ctx context.Context, endpoint, method string, params, out any) error {
	body, err := json.Marshal(struct {
		JSONRPC string `json:"jsonrpc"`
		ID      string `json:"id"`
		Method  string `json:"method"`
		Params  any    `json:"params"`
	}{"2.0", newID(), method, params})
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("A2A-Version", ProtocolVersion)
	raw, err := h.do(req, maxResponseBytes)
	if err != nil {
		return fmt.Errorf("%s: %w", method, err)
	}
	var resp struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Result  json.RawMessage `json:"result"`
		Error   *Error          `json:"error"`
	}
	if err := protocol.DecodeStrict(raw, &resp, protocol.AllowUnknown()); err != nil {
		return fmt.Errorf("%s: response: %w", method, err)
	}
	switch {
	case resp.Error != nil:
		return fmt.Errorf("%s: error %d: %s", method, resp.Error.Code, resp.Error.Message)
	case len(resp.Result) == 0:
		return fmt.Errorf("%s: response has no result", method)
	}
	if err := protocol.DecodeStrict(resp.Result, out, protocol.AllowUnknown()); err != nil {
		return fmt.Errorf("%s: result: %w", method, err)
	}
	return nil
}

// do runs req and returns a 2xx body of at most limit bytes.
func (h *Handler) do(req *http.Request, limit int64) ([]byte, error) {
	resp, err := h.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(body)) > limit {
		return nil, fmt.Errorf("%s: response larger than %d bytes", req.URL, limit)
	}
	if resp.StatusCode/100 != 2 {
		return nil, fmt.Errorf("%s: HTTP %s", req.URL, resp.Status)
	}
	return body, nil
}
