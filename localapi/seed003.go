package localapi

import (
	"bytes"
	"cmp"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/rpc"
)

// Paths of seed 003's REST surface.
const (
	AgentRequestPath      = "/agent/request"
	AgentStatusPath       = "/agent/status/"
	AgentContextPath      = "/agent/context"
	AgentCapabilitiesPath = "/agent/capabilities"
	DocsPath              = "/docs"
)

// Bounds and defaults of seed 003's REST surface.
const (
	// MaxAgentRequestBytes bounds the body of POST /agent/request and
	// POST /agent/context (413 past it).
	MaxAgentRequestBytes = 256 << 10
	// MaxContentBytes bounds an AgentRequest's content and a
	// ContextQuery's query (seed 003's limits.max_content_size, 100KB).
	MaxContentBytes = 100 << 10
	// MaxReferences and MaxDeviations are seed 003's limits.
	MaxReferences = 20
	MaxDeviations = 5
	// MaxListItems bounds context_used and changes_made.
	MaxListItems = 64
	// DefaultRequestsPerMinute is seed 003's rate_limit of POST
	// /agent/request: requests per minute per agent (per token), with a
	// burst of as many.
	DefaultRequestsPerMinute = 60
	// RequestDeadline is how long a submitted request's task may run on
	// its provider: seed 003's 24-hour escalation window.
	RequestDeadline = 24 * time.Hour
	// StatusWait bounds how long GET /agent/status asks the provider for
	// a running task's live state before it answers with the state this
	// node last recorded.
	StatusWait = 500 * time.Millisecond
	// ContextTimeout bounds POST /agent/context's call (seed 003's
	// timeouts.response, 10000ms).
	ContextTimeout = 10 * time.Second
	// MaxContextCalls bounds the POST /agent/context calls in flight at
	// once; past it one is answered 429 at once.
	MaxContextCalls = 64
	// CapabilityPrefix starts the capability a request type is served
	// by: "librarian:approval", "librarian:query", "librarian:validate",
	// "librarian:report", and "librarian:context" for POST /agent/context.
	CapabilityPrefix = "librarian:"
	// maxStatusLen bounds a provider's own status word.
	maxStatusLen = 64
	// requestIDPrefix starts the correlation id of a request submitted for
	// an agent: "seed003:<agent>:<uuid>". The task's record keeps it, so
	// that GET /agent/status shows a task only to the agent that submitted
	// it, across restarts of the node.
	requestIDPrefix = "seed003:"
)

// Seed 003's request types and their enumerations.
var (
	requestTypes = []string{"APPROVAL", "QUERY", "VALIDATE", "REPORT"}
	actions      = []string{"create", "modify", "delete", "read"}
	targetTypes  = []string{"architecture", "design", "code", "test", "docs"}
)

// RequestCapability is the mesh capability that serves seed 003's
// request type t (one of APPROVAL, QUERY, VALIDATE, REPORT).
func RequestCapability(t string) string { return CapabilityPrefix + strings.ToLower(t) }

// ContextCapability serves POST /agent/context.
const ContextCapability = CapabilityPrefix + "context"

// Librarian is what seed 003's REST surface needs of a node: its view of
// the mesh's agents (to find a provider of a capability), detached tasks
// (Submit, TaskWait) and calls. *node.Node satisfies it.
type Librarian interface {
	Directory
	Submit(ctx context.Context, req protocol.CallRequest, deadline time.Duration) (*protocol.Submitted, error)
	TaskWait(ctx context.Context, taskID string, poll time.Duration, progress func(json.RawMessage)) (*protocol.SubmittedTask, error)
	Call(ctx context.Context, req protocol.CallRequest) (*protocol.Response, error)
}

// AgentRequest is seed 003's AgentRequest. agent_id and request_type are
// required; REPORT's request_id, completed and changes_made (which seed
// 003's validation rules require of a REPORT) are members too.
type AgentRequest struct {
	AgentID        string              `json:"agent_id,required"`
	SessionID      string              `json:"session_id,omitempty"`
	Timestamp      time.Time           `json:"timestamp,omitzero"`
	RequestType    string              `json:"request_type,required"`
	Action         string              `json:"action,omitempty"`
	TargetType     string              `json:"target_type,omitempty"`
	TargetPath     *string             `json:"target_path,omitempty"`
	TargetID       *string             `json:"target_id,omitempty"`
	Content        string              `json:"content,omitempty"`
	Rationale      string              `json:"rationale,omitempty"`
	References     []string            `json:"references,omitempty"`
	ContextUsed    []string            `json:"context_used,omitempty"`
	Deviations     []map[string]string `json:"deviations,omitempty"`
	RiskAssessment *string             `json:"risk_assessment,omitempty"`
	RequestID      string              `json:"request_id,omitempty"`
	Completed      *bool               `json:"completed,omitempty"`
	ChangesMade    []string            `json:"changes_made,omitempty"`
}

// Decision is the part of seed 003's LibrarianResponse a provider
// decides: a provider of a librarian:* capability answers with an object
// carrying any of these members, and GET /agent/status passes them on.
type Decision struct {
	Status              string            `json:"status"`
	Confidence          *float64          `json:"confidence"`
	Feedback            string            `json:"feedback"`
	Violations          []json.RawMessage `json:"violations"`
	Suggestions         []string          `json:"suggestions"`
	ApprovedLocation    *string           `json:"approved_location"`
	AssignedID          *string           `json:"assigned_id"`
	Constraints         []string          `json:"constraints"`
	EscalationReason    *string           `json:"escalation_reason"`
	HumanReviewURL      *string           `json:"human_review_url"`
	EstimatedReviewTime *int              `json:"estimated_review_time"`
	Context             json.RawMessage   `json:"context"`
	RelevantNodes       json.RawMessage   `json:"relevant_nodes"`
}

// LibrarianResponse is seed 003's LibrarianResponse: request_id is the
// mesh task id, state the task's state in seed 003's names. Status is
// the provider's (seed 003's approved, rejected, escalated,
// clarification_needed, or a word of its own), and "pending" while the
// provider has not decided,
// which POST /agent/request always answers (202): the mesh's provider
// decides after the submission, so the requester polls GET /agent/status,
// as seed 003's escalation flow does.
type LibrarianResponse struct {
	RequestID        string             `json:"request_id"`
	Timestamp        time.Time          `json:"timestamp"`
	ProcessingTimeMS int64              `json:"processing_time_ms"`
	State            protocol.TaskState `json:"state"`
	Provider         string             `json:"provider"`
	Capability       string             `json:"capability"`
	Decision
}

// RequestStatus is the answer of GET /agent/status/{request_id}: the
// task's state in seed 003's names (PENDING, VALIDATING, APPROVED,
// REJECTED, ESCALATED, COMPLETED, and the mesh's FAILED and CANCELLED),
// and once it ended its result or error and the LibrarianResponse that
// follows from them.
type RequestStatus struct {
	RequestID  string             `json:"request_id"`
	State      protocol.TaskState `json:"state"`
	Provider   string             `json:"provider"`
	Capability string             `json:"capability"`
	Submitted  time.Time          `json:"submitted"`
	Deadline   time.Time          `json:"deadline"`
	Final      bool               `json:"final"`
	Result     json.RawMessage    `json:"result,omitempty"`
	Error      *protocol.Error    `json:"error,omitempty"`
	Response   *LibrarianResponse `json:"response,omitempty"`
}

// ContextQuery is the body of POST /agent/context: a question the agent
// asks the mesh's librarian (seed 003's QUERY, answered at once).
type ContextQuery struct {
	AgentID    string  `json:"agent_id,required"`
	SessionID  string  `json:"session_id,omitempty"`
	Query      string  `json:"query,required"`
	TargetType string  `json:"target_type,omitempty"`
	TargetPath *string `json:"target_path,omitempty"`
	TargetID   *string `json:"target_id,omitempty"`
	MaxResults *int    `json:"max_results,omitempty"`
}

// ContextResponse is the answer of POST /agent/context: the provider's
// answer (a JSON object) as context.
type ContextResponse struct {
	RequestID        string          `json:"request_id"`
	Timestamp        time.Time       `json:"timestamp"`
	ProcessingTimeMS int64           `json:"processing_time_ms"`
	Provider         string          `json:"provider"`
	Context          json.RawMessage `json:"context"`
}

// RequestType is one request type in AgentCapabilities: the capability
// that serves it and the agents this node knows to offer it.
type RequestType struct {
	Capability string   `json:"capability"`
	Providers  []string `json:"providers"`
}

// AgentCapabilities is the answer of GET /agent/capabilities: the token's
// agent as seed 003's agent registry describes one, and what the mesh
// offers it.
type AgentCapabilities struct {
	AgentID        string                 `json:"agent_id"`
	RateLimit      string                 `json:"rate_limit"`
	MaxRequestSize int                    `json:"max_request_size"`
	MaxContentSize int                    `json:"max_content_size"`
	RequestTypes   map[string]RequestType `json:"request_types"`
	Context        RequestType            `json:"context"`
	// Capabilities are the names of every capability this node knows in
	// the mesh (its own and its peers'), sorted.
	Capabilities []string `json:"capabilities"`
}

// ErrorResponse is every refusal of the surface: a message that starts
// with seed 003's words where it has some ("Agent not authorized", "Rate
// limit exceeded"), and the AgentProtocol error code.
type ErrorResponse struct {
	Error string        `json:"error"`
	Code  protocol.Code `json:"code"`
}

//go:embed openapi.json
var openAPI []byte

// OpenAPI returns the OpenAPI 3 document GET /docs serves.
func OpenAPI() []byte { return bytes.Clone(openAPI) }

// Seed003Option configures NewSeed003.
type Seed003Option func(*Seed003)

// WithTokens sets the agents' bearer tokens (an rpc tokens file: each
// token's name is its agent's agent_id). Without tokens the /agent/*
// paths answer 404.
func WithTokens(t *rpc.Tokens) Seed003Option { return func(s *Seed003) { s.tokens = t } }

// WithRequestsPerMinute sets each agent's rate limit of POST
// /agent/request and POST /agent/context (default
// DefaultRequestsPerMinute); n <= 0 keeps the default.
func WithRequestsPerMinute(n int) Seed003Option {
	return func(s *Seed003) {
		if n > 0 {
			s.perMinute = n
		}
	}
}

// WithSeed003Logger sets the logger (default slog.Default()).
func WithSeed003Logger(l *slog.Logger) Seed003Option {
	return func(s *Seed003) {
		if l != nil {
			s.log = l
		}
	}
}

// Seed003 serves seed 003's REST surface over a node (see the package
// doc): POST /agent/request, GET /agent/status/{request_id}, POST
// /agent/context, GET /agent/capabilities, and GET /docs.
type Seed003 struct {
	mesh      Librarian
	tokens    *rpc.Tokens
	perMinute int
	log       *slog.Logger
	calls     chan struct{}

	mu       sync.Mutex
	limiters map[string]*rate.Limiter
}

// NewSeed003 returns seed 003's REST surface over mesh.
func NewSeed003(mesh Librarian, opts ...Seed003Option) *Seed003 {
	s := &Seed003{mesh: mesh, perMinute: DefaultRequestsPerMinute, log: slog.Default(),
		calls: make(chan struct{}, MaxContextCalls), limiters: map[string]*rate.Limiter{}}
	for _, o := range opts {
		o(s)
	}
	return s
}

// OwnsSeed003 reports whether path is one of seed 003's REST paths.
func OwnsSeed003(path string) bool {
	return path == DocsPath || strings.HasPrefix(path, "/agent/")
}

// ServeHTTP serves seed 003's REST surface.
func (s *Seed003) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == DocsPath {
		if !allow(w, r, http.MethodGet) {
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write(openAPI)
		return
	}
	if s.tokens == nil {
		// No token could succeed: the surface is not there, rather than
		// asking for a credential (401) that does not exist.
		refuse(w, http.StatusNotFound, protocol.CodeUnauthorized, "seed 003's REST surface is off on this node: start it with --agent-tokens FILE")
		return
	}
	cred, err := s.tokens.Authenticate(r)
	if err != nil {
		w.Header().Set("WWW-Authenticate", `Bearer realm="meshagent"`)
		refuse(w, http.StatusUnauthorized, protocol.CodeUnauthorized, "Agent not authorized: a valid token is required (Authorization: Bearer <token>)")
		return
	}
	agent := cred.Name
	switch path := r.URL.Path; {
	case path == AgentRequestPath:
		if allow(w, r, http.MethodPost) && s.admit(w, agent) {
			s.request(w, r, agent)
		}
	case strings.HasPrefix(path, AgentStatusPath) && len(path) > len(AgentStatusPath) && !strings.Contains(path[len(AgentStatusPath):], "/"):
		if allow(w, r, http.MethodGet) {
			s.status(w, r, agent, path[len(AgentStatusPath):])
		}
	case path == AgentContextPath:
		if allow(w, r, http.MethodPost) && s.admit(w, agent) {
			s.context(w, r, agent)
		}
	case path == AgentCapabilitiesPath:
		if allow(w, r, http.MethodGet) {
			s.capabilities(w, agent)
		}
	default:
		refuse(w, http.StatusNotFound, protocol.CodeInvalidMessage, fmt.Sprintf("no such path %q: seed 003 serves %s, %s{request_id}, %s, %s and %s", path, AgentRequestPath, AgentStatusPath, AgentContextPath, AgentCapabilitiesPath, DocsPath))
	}
}

func allow(w http.ResponseWriter, r *http.Request, method string) bool {
	if r.Method == method || method == http.MethodGet && r.Method == http.MethodHead {
		return true
	}
	w.Header().Set("Allow", method)
	refuse(w, http.StatusMethodNotAllowed, protocol.CodeInvalidMessage, fmt.Sprintf("%s takes %s", r.URL.Path, method))
	return false
}

func refuse(w http.ResponseWriter, status int, code protocol.Code, msg string) {
	writeJSON(w, status, ErrorResponse{Error: msg, Code: code})
}

// admit takes one request from agent's bucket, or answers 429 with
// Retry-After. The buckets are kept per token name; there are at most as
// many as the tokens file has names (rpc.MaxTokens), and the table is
// cleared if reloads ever leave twice that many.
func (s *Seed003) admit(w http.ResponseWriter, agent string) bool {
	s.mu.Lock()
	l := s.limiters[agent]
	if l == nil {
		if len(s.limiters) >= 2*rpc.MaxTokens {
			clear(s.limiters)
		}
		l = rate.NewLimiter(rate.Limit(float64(s.perMinute)/60), s.perMinute)
		s.limiters[agent] = l
	}
	s.mu.Unlock()
	now := time.Now()
	res := l.ReserveN(now, 1)
	if d := res.DelayFrom(now); d > 0 {
		res.CancelAt(now)
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(d.Seconds()))))
		refuse(w, http.StatusTooManyRequests, protocol.CodeRateLimited, fmt.Sprintf("Rate limit exceeded: %d requests per minute for agent %s; retry in %s", s.perMinute, agent, d.Round(time.Second)))
		return false
	}
	return true
}

// readObject reads a JSON object body, bounded, and decodes it strictly
// into v; it answers the refusal itself.
func readObject(w http.ResponseWriter, r *http.Request, what string, v any) bool {
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxAgentRequestBytes+1))
	if err != nil {
		refuse(w, http.StatusBadRequest, protocol.CodeInvalidMessage, "read body: "+err.Error())
		return false
	}
	if len(body) > MaxAgentRequestBytes {
		refuse(w, http.StatusRequestEntityTooLarge, protocol.CodeInvalidMessage, fmt.Sprintf("%s larger than %d bytes", what, MaxAgentRequestBytes))
		return false
	}
	if t := bytes.TrimSpace(body); len(t) == 0 || t[0] != '{' {
		refuse(w, http.StatusBadRequest, protocol.CodeInvalidMessage, fmt.Sprintf("the body must be a JSON object, seed 003's %s", what))
		return false
	}
	if err := protocol.DecodeStrict(body, v); err != nil {
		refuse(w, http.StatusBadRequest, protocol.CodeInvalidMessage, fmt.Sprintf("%s: %v", what, err))
		return false
	}
	return true
}

// check applies seed 003's validation rules that need no provider:
// enumerations, REQUIRED_FIELDS per request type, and the limits.
func (q *AgentRequest) check() error {
	switch {
	case !slices.Contains(requestTypes, q.RequestType):
		return fmt.Errorf("request_type %q is not one of %s", q.RequestType, strings.Join(requestTypes, ", "))
	case q.Action != "" && !slices.Contains(actions, q.Action):
		return fmt.Errorf("action %q is not one of %s", q.Action, strings.Join(actions, ", "))
	case q.TargetType != "" && !slices.Contains(targetTypes, q.TargetType):
		return fmt.Errorf("target_type %q is not one of %s", q.TargetType, strings.Join(targetTypes, ", "))
	case len(q.Content) > MaxContentBytes:
		return fmt.Errorf("content is %d bytes; at most %d", len(q.Content), MaxContentBytes)
	case len(q.References) > MaxReferences:
		return fmt.Errorf("%d references; at most %d", len(q.References), MaxReferences)
	case len(q.Deviations) > MaxDeviations:
		return fmt.Errorf("%d deviations; at most %d", len(q.Deviations), MaxDeviations)
	case len(q.ContextUsed) > MaxListItems || len(q.ChangesMade) > MaxListItems:
		return fmt.Errorf("context_used and changes_made take at most %d items each", MaxListItems)
	}
	var missing []string
	need := func(name string, present bool) {
		if !present {
			missing = append(missing, name)
		}
	}
	switch q.RequestType {
	case "APPROVAL":
		need("content", q.Content != "")
		need("rationale", q.Rationale != "")
		need("target_type", q.TargetType != "")
	case "QUERY":
		need("content", q.Content != "")
	case "VALIDATE":
		need("content", q.Content != "")
		need("target_type", q.TargetType != "")
	case "REPORT":
		need("request_id", q.RequestID != "")
		need("completed", q.Completed != nil)
		need("changes_made", q.ChangesMade != nil)
	}
	if len(missing) > 0 {
		return fmt.Errorf("a %s request needs %s", q.RequestType, strings.Join(missing, ", "))
	}
	return nil
}

func (s *Seed003) request(w http.ResponseWriter, r *http.Request, agent string) {
	start := time.Now()
	var q AgentRequest
	if !readObject(w, r, "AgentRequest", &q) {
		return
	}
	if q.AgentID != agent {
		refuse(w, http.StatusForbidden, protocol.CodeUnauthorized, fmt.Sprintf("Agent not authorized: the token is agent %q's, the request names %q", agent, q.AgentID))
		return
	}
	if err := q.check(); err != nil {
		refuse(w, http.StatusBadRequest, protocol.CodeInvalidMessage, err.Error())
		return
	}
	capability := RequestCapability(q.RequestType)
	provider, ok := s.provider(capability, false)
	if !ok {
		refuse(w, http.StatusServiceUnavailable, protocol.CodeCapabilityNotSupported, fmt.Sprintf("no agent this node knows offers %s (seed 003's %s requests)", capability, q.RequestType))
		return
	}
	params, err := json.Marshal(q)
	if err != nil {
		refuse(w, http.StatusInternalServerError, protocol.CodeInternalError, err.Error())
		return
	}
	// A client that goes away while the provider accepts does not leave
	// an accepted task this node has no record of: the submission runs to
	// its end (the node bounds it by its request timeout).
	sub, err := s.mesh.Submit(context.WithoutCancel(r.Context()), protocol.CallRequest{To: provider, Action: capability, Params: params,
		CorrelationID: requestIDPrefix + agent + ":" + protocol.NewID()}, RequestDeadline)
	if err != nil {
		s.meshError(w, err)
		return
	}
	s.log.Info("seed 003 request submitted", "agent", agent, "type", q.RequestType, "task", sub.TaskID, "provider", sub.AgentID)
	writeJSON(w, http.StatusAccepted, LibrarianResponse{RequestID: sub.TaskID, Timestamp: time.Now().UTC(),
		ProcessingTimeMS: time.Since(start).Milliseconds(), State: sub.State, Provider: sub.AgentID, Capability: capability,
		Decision: Decision{Status: "pending"}})
}

// meshError answers a refusal from the mesh with its code and a status
// that says whose it was.
func (s *Seed003) meshError(w http.ResponseWriter, err error) {
	pe := protocol.AsError(err)
	status := http.StatusBadGateway
	switch pe.Code {
	case protocol.CodeInvalidMessage:
		status = http.StatusBadRequest
	case protocol.CodeUnauthorized:
		status = http.StatusForbidden
	case protocol.CodeRateLimited:
		status = http.StatusTooManyRequests
	case protocol.CodeTimeout:
		status = http.StatusGatewayTimeout
	case protocol.CodeCapabilityNotSupported, protocol.CodeUnknownAgent:
		status = http.StatusServiceUnavailable
	}
	refuse(w, status, pe.Code, pe.Message)
}

// provider picks the agent that serves capability: among the agents this
// node knows to offer it (itself too when self), a connected one first,
// then the lowest agent id.
func (s *Seed003) provider(capability string, self bool) (string, bool) {
	var cands []struct {
		id        string
		connected bool
	}
	me := s.mesh.SelfInfo()
	infos := s.mesh.Peers()
	if self {
		me.Connected = true
		infos = append(infos, me)
	}
	for _, pi := range infos {
		if pi.AgentID == me.AgentID && !self {
			continue
		}
		if slices.ContainsFunc(pi.Capabilities, func(c protocol.Capability) bool { return c.Name == capability }) {
			cands = append(cands, struct {
				id        string
				connected bool
			}{pi.AgentID, pi.Connected})
		}
	}
	if len(cands) == 0 {
		return "", false
	}
	best := slices.MinFunc(cands, func(a, b struct {
		id        string
		connected bool
	}) int {
		if a.connected != b.connected {
			if a.connected {
				return -1
			}
			return 1
		}
		return cmp.Compare(a.id, b.id)
	})
	return best.id, true
}

func (s *Seed003) status(w http.ResponseWriter, r *http.Request, agent, id string) {
	notFound := func() {
		refuse(w, http.StatusNotFound, protocol.CodeInvalidMessage, fmt.Sprintf("no request %q of agent %s here (unknown, or forgotten)", id, agent))
	}
	if len(id) > protocol.MaxIDLen {
		notFound()
		return
	}
	if len(r.URL.Query()) > 0 && !(len(r.URL.Query()) == 1 && r.URL.Query().Has("token")) {
		refuse(w, http.StatusBadRequest, protocol.CodeInvalidMessage, "GET /agent/status takes no query parameters")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), StatusWait)
	defer cancel()
	t, err := s.mesh.TaskWait(ctx, id, StatusWait, nil)
	if t == nil || !strings.HasPrefix(t.RequestID, requestIDPrefix+agent+":") {
		// Another agent's request is not there for this one (no id oracle).
		notFound()
		return
	}
	st := RequestStatus{RequestID: t.TaskID, State: t.State, Provider: t.AgentID, Capability: t.Capability,
		Submitted: t.Submitted, Deadline: t.Deadline}
	if err != nil && protocol.CodeOf(err) == protocol.CodeTimeout && !t.State.Final() && t.Envelope == nil {
		err = nil // still running
	}
	if final := t.Envelope != nil || t.State.Final(); final {
		st.Final = true
		st.Result = t.Result
		st.Error = t.Error
		if st.Error == nil && err != nil {
			st.Error = protocol.AsError(err)
		}
		resp := &LibrarianResponse{RequestID: t.TaskID, Timestamp: time.Now().UTC(), State: t.State, Provider: t.AgentID, Capability: t.Capability,
			ProcessingTimeMS: lastEvent(t).Sub(t.Submitted).Milliseconds()}
		resp.Decision = decisionOf(t)
		st.Response = resp
	}
	writeJSON(w, http.StatusOK, st)
}

func lastEvent(t *protocol.SubmittedTask) time.Time {
	if n := len(t.History); n > 0 && t.History[n-1].At.After(t.Submitted) {
		return t.History[n-1].At
	}
	return t.Submitted
}

// decisionOf reads the provider's decision from a final task's result, or
// from its error's details when it failed (a librarian that rejects
// answers with an error whose details are its LibrarianResponse): an
// object's members named as LibrarianResponse's (others are ignored; a
// member of the wrong type leaves the whole decision to the state). The
// status is the provider's when it gives one (seed 003's approved,
// rejected, escalated, clarification_needed, or its own, such as
// "answered" for a QUERY), and otherwise follows the state: COMPLETED and
// APPROVED are approved, ESCALATED escalated, the others rejected.
func decisionOf(t *protocol.SubmittedTask) Decision {
	var d Decision
	src := t.Result
	if t.Error != nil {
		src = t.Error.Details
	}
	if len(src) > 0 && src[0] == '{' {
		if protocol.DecodeStrict(src, &d, protocol.AllowUnknown()) != nil {
			d = Decision{}
		}
	}
	if d.Status == "" || len(d.Status) > maxStatusLen {
		switch t.State {
		case protocol.TaskCompleted, protocol.TaskApproved:
			d.Status = "approved"
		case protocol.TaskEscalated:
			d.Status = "escalated"
		default:
			d.Status = "rejected"
		}
	}
	if d.Feedback == "" && t.Error != nil {
		d.Feedback = t.Error.Message
	}
	return d
}

func (s *Seed003) context(w http.ResponseWriter, r *http.Request, agent string) {
	start := time.Now()
	var q ContextQuery
	if !readObject(w, r, "ContextQuery", &q) {
		return
	}
	switch {
	case q.AgentID != agent:
		refuse(w, http.StatusForbidden, protocol.CodeUnauthorized, fmt.Sprintf("Agent not authorized: the token is agent %q's, the query names %q", agent, q.AgentID))
		return
	case q.Query == "" || len(q.Query) > MaxContentBytes:
		refuse(w, http.StatusBadRequest, protocol.CodeInvalidMessage, fmt.Sprintf("query must be 1 to %d bytes", MaxContentBytes))
		return
	case q.TargetType != "" && !slices.Contains(targetTypes, q.TargetType):
		refuse(w, http.StatusBadRequest, protocol.CodeInvalidMessage, fmt.Sprintf("target_type %q is not one of %s", q.TargetType, strings.Join(targetTypes, ", ")))
		return
	case q.MaxResults != nil && (*q.MaxResults < 1 || *q.MaxResults > 1000):
		refuse(w, http.StatusBadRequest, protocol.CodeInvalidMessage, "max_results must be 1 to 1000")
		return
	}
	provider, ok := s.provider(ContextCapability, true)
	if !ok {
		refuse(w, http.StatusServiceUnavailable, protocol.CodeCapabilityNotSupported, fmt.Sprintf("no agent this node knows offers %s", ContextCapability))
		return
	}
	select {
	case s.calls <- struct{}{}:
		defer func() { <-s.calls }()
	default:
		refuse(w, http.StatusTooManyRequests, protocol.CodeRateLimited, fmt.Sprintf("Rate limit exceeded: %d context queries in flight through this node", MaxContextCalls))
		return
	}
	params, err := json.Marshal(q)
	if err != nil {
		refuse(w, http.StatusInternalServerError, protocol.CodeInternalError, err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), ContextTimeout)
	defer cancel()
	id := requestIDPrefix + agent + ":" + protocol.NewID()
	resp, err := s.mesh.Call(ctx, protocol.CallRequest{To: provider, Action: ContextCapability, Params: params, Timeout: ContextTimeout, CorrelationID: id})
	if err != nil {
		s.meshError(w, err)
		return
	}
	if len(resp.Result) == 0 || resp.Result[0] != '{' {
		refuse(w, http.StatusBadGateway, protocol.CodeInternalError, fmt.Sprintf("the provider %s answered %s with something other than a JSON object", provider, ContextCapability))
		return
	}
	writeJSON(w, http.StatusOK, ContextResponse{RequestID: id, Timestamp: time.Now().UTC(), ProcessingTimeMS: time.Since(start).Milliseconds(),
		Provider: provider, Context: resp.Result})
}

func (s *Seed003) capabilities(w http.ResponseWriter, agent string) {
	infos := known(s.mesh)
	me := infos[0].AgentID
	providers := func(capability string, self bool) []string {
		out := []string{}
		for _, pi := range infos {
			if pi.AgentID == me && !self {
				continue
			}
			if slices.ContainsFunc(pi.Capabilities, func(c protocol.Capability) bool { return c.Name == capability }) {
				out = append(out, pi.AgentID)
			}
		}
		slices.Sort(out)
		return out
	}
	ac := AgentCapabilities{AgentID: agent, RateLimit: fmt.Sprintf("%d/minute", s.perMinute), MaxRequestSize: MaxAgentRequestBytes,
		MaxContentSize: MaxContentBytes, RequestTypes: map[string]RequestType{}, Capabilities: []string{},
		Context: RequestType{Capability: ContextCapability, Providers: providers(ContextCapability, true)}}
	for _, t := range requestTypes {
		c := RequestCapability(t)
		ac.RequestTypes[t] = RequestType{Capability: c, Providers: providers(c, false)}
	}
	for _, pi := range infos {
		for _, c := range pi.Capabilities {
			ac.Capabilities = append(ac.Capabilities, c.Name)
		}
	}
	slices.Sort(ac.Capabilities)
	ac.Capabilities = slices.Compact(ac.Capabilities)
	writeJSON(w, http.StatusOK, ac)
}
