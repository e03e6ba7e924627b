package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
)

// Capabilities of the librarian, one per seed 003 request type.
const (
	CapApproval = "librarian:approval" // APPROVAL: permission to make a change
	CapQuery    = "librarian:query"    // QUERY: information from the catalogue
	CapValidate = "librarian:validate" // VALIDATE: would a change be compliant
	CapReport   = "librarian:report"   // REPORT: completion status of a change
)

// Limits of seed 003's protocol settings (config/protocol.yaml).
const (
	maxReferences = 20
	maxDeviations = 5
)

// targetTypes are seed 003's target types.
var targetTypes = []string{"architecture", "design", "code", "test", "docs"}

// AgentRequest is seed 003's request message. The request type is the
// capability called; the requester's identity is the verified peer, and
// agent_id must be its name in the registry.
type AgentRequest struct {
	AgentID        string              `json:"agent_id"`
	SessionID      string              `json:"session_id,omitempty"`
	Timestamp      string              `json:"timestamp,omitempty"`
	Action         string              `json:"action,omitempty"`
	TargetType     string              `json:"target_type,omitempty"`
	TargetPath     string              `json:"target_path,omitempty"`
	TargetID       string              `json:"target_id,omitempty"`
	Content        string              `json:"content,omitempty"`
	Rationale      string              `json:"rationale,omitempty"`
	References     []string            `json:"references,omitempty"`
	ContextUsed    []string            `json:"context_used,omitempty"`
	Deviations     []map[string]string `json:"deviations,omitempty"`
	RiskAssessment string              `json:"risk_assessment,omitempty"`
}

// ReportRequest is the body of a REPORT: seed 003's required fields
// request_id, completed and changes_made.
type ReportRequest struct {
	AgentID     string   `json:"agent_id"`
	RequestID   string   `json:"request_id"`
	Completed   bool     `json:"completed"`
	ChangesMade []string `json:"changes_made"`
	Issues      []string `json:"issues,omitempty"`
}

// Violation is seed 003's ViolationDetail: which rule failed and why.
type Violation struct {
	Rule        string `json:"rule"`
	Description string `json:"description"`
}

// NodeSummary is a catalogue entry as QUERY returns it.
type NodeSummary struct {
	ID     string `json:"id"`
	Type   string `json:"type"`
	Path   string `json:"path"`
	Title  string `json:"title"`
	Status string `json:"status"`
}

// LibrarianResponse is seed 003's response message.
type LibrarianResponse struct {
	RequestID        string         `json:"request_id"`
	Timestamp        time.Time      `json:"timestamp"`
	ProcessingTimeMS int64          `json:"processing_time_ms"`
	Status           string         `json:"status"` // approved, rejected, escalated, clarification_needed; compliant, non_compliant (VALIDATE); answered (QUERY); recorded (REPORT)
	Confidence       float64        `json:"confidence"`
	Feedback         string         `json:"feedback"`
	Violations       []Violation    `json:"violations,omitempty"`
	Suggestions      []string       `json:"suggestions,omitempty"`
	ApprovedLocation string         `json:"approved_location,omitempty"`
	AssignedID       string         `json:"assigned_id,omitempty"`
	Constraints      []string       `json:"constraints,omitempty"`
	EscalationReason string         `json:"escalation_reason,omitempty"`
	HumanReviewURL   string         `json:"human_review_url,omitempty"`
	EstimatedReview  int            `json:"estimated_review_time,omitempty"` // minutes
	Context          map[string]any `json:"context,omitempty"`
	RelevantNodes    []NodeSummary  `json:"relevant_nodes,omitempty"`
	State            string         `json:"state,omitempty"` // the submission's governance state
}

// Progress is what the librarian reports while it handles an APPROVAL,
// as in_progress responses: the submission's state and the rule checked.
type Progress struct {
	RequestID string `json:"request_id"`
	State     string `json:"state"`
	Rule      string `json:"rule,omitempty"`
	Passed    *bool  `json:"passed,omitempty"`
	Note      string `json:"note,omitempty"`
}

// RegistryEntry is an agent of seed 003's agent registry
// (config/agents.yaml) as the librarian needs it; its rate_limit,
// max_request_size and allowed request types are in the node's policy.
type RegistryEntry struct {
	Name           string
	Type           string
	Capabilities   []string // read, write, analyze, suggest, validate
	AllowedTargets []string // target types, or "all"
}

// submission is an APPROVAL request as the librarian tracks it through
// seed 003's governance states.
type submission struct {
	id       string
	from     peer.ID
	req      AgentRequest
	state    protocol.TaskState
	history  []protocol.TaskState
	assigned string
	decision chan reviewDecision // an ESCALATED submission waits on it
	reviewed bool                // a human decided it
}

type reviewDecision struct {
	approve bool
	note    string
}

// catalogueNode is an item of the librarian's knowledge graph.
type catalogueNode struct {
	NodeSummary
	content string
}

// Librarian governs what agents may change: it checks their requests
// against its registry and catalogue, and tracks each submission from
// PENDING to COMPLETED.
type Librarian struct {
	log      *slog.Logger
	registry map[peer.ID]RegistryEntry

	mu          sync.Mutex
	catalogue   map[string]*catalogueNode
	byPath      map[string]string // target path -> catalogue id
	submissions map[string]*submission
	seq         map[string]int // per target type, for assigned ids
	escalated   chan string    // ids of escalated submissions, for the human reviewer
}

// NewLibrarian returns a librarian with a registry and a catalogue holding
// the specifications agents may reference.
func NewLibrarian(log *slog.Logger, registry map[peer.ID]RegistryEntry) *Librarian {
	l := &Librarian{
		log: log, registry: registry,
		catalogue: map[string]*catalogueNode{}, byPath: map[string]string{},
		submissions: map[string]*submission{}, seq: map[string]int{},
		escalated: make(chan string, 16),
	}
	l.add("arch-001", "architecture", "docs/architecture.md", "Main architecture",
		"# Main architecture\nAgents talk to the librarian over a signed peer-to-peer mesh; authentication is by Ed25519 agent identity.")
	l.add("req-045", "docs", "docs/requirements/authentication.md", "Authentication requirements",
		"# Authentication requirements\nEvery agent authenticates with its Ed25519 key; tokens expire after 24 hours; refresh requires re-authentication.")
	l.add("code-007", "code", "src/auth/session.go", "Session handling",
		"// Package auth: session handling and token refresh.")
	return l
}

func (l *Librarian) add(id, typ, path, title, content string) {
	l.catalogue[id] = &catalogueNode{NodeSummary: NodeSummary{ID: id, Type: typ, Path: path, Title: title, Status: "approved"}, content: content}
	l.byPath[path] = id
}

// Escalations delivers the id of each submission escalated to a human.
func (l *Librarian) Escalations() <-chan string { return l.escalated }

// Review is the human decision on an escalated submission.
func (l *Librarian) Review(id string, approve bool, note string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.submissions[id]
	switch {
	case s == nil || s.decision == nil:
		return fmt.Errorf("librarian: no escalated submission %s", id)
	case s.reviewed:
		return fmt.Errorf("librarian: submission %s was already reviewed", id)
	}
	s.reviewed = true
	s.decision <- reviewDecision{approve: approve, note: note} // buffered for one
	return nil
}

// State returns a submission's governance state and its history.
func (l *Librarian) State(id string) (protocol.TaskState, []protocol.TaskState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.submissions[id]
	if s == nil {
		return "", nil
	}
	return s.state, slices.Clone(s.history)
}

func (l *Librarian) setState(s *submission, st protocol.TaskState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s.state = st
	s.history = append(s.history, st)
}

// Input schemas: shapes only; missing content is a rule violation with
// feedback, not a malformed message.
const (
	requestSchema = `{
  "type": "object",
  "required": ["agent_id"],
  "properties": {
    "agent_id": {"type": "string", "minLength": 1},
    "session_id": {"type": "string"},
    "timestamp": {"type": "string"},
    "action": {"enum": ["create", "modify", "delete", "read"]},
    "target_type": {"enum": ["architecture", "design", "code", "test", "docs"]},
    "target_path": {"type": "string"},
    "target_id": {"type": "string"},
    "content": {"type": "string"},
    "rationale": {"type": "string"},
    "references": {"type": "array", "items": {"type": "string"}},
    "context_used": {"type": "array", "items": {"type": "string"}},
    "deviations": {"type": "array", "items": {"type": "object", "additionalProperties": {"type": "string"}}},
    "risk_assessment": {"type": "string"}
  },
  "additionalProperties": false
}`
	reportSchema = `{
  "type": "object",
  "required": ["agent_id", "request_id", "completed", "changes_made"],
  "properties": {
    "agent_id": {"type": "string", "minLength": 1},
    "request_id": {"type": "string", "minLength": 1},
    "completed": {"type": "boolean"},
    "changes_made": {"type": "array", "items": {"type": "string"}},
    "issues": {"type": "array", "items": {"type": "string"}}
  },
  "additionalProperties": false
}`
)

// Services returns the librarian's capabilities, for node.WithServices.
func (l *Librarian) Services() []node.Service {
	return []node.Service{
		{Capability: protocol.Capability{Name: CapApproval, Description: "seed 003 APPROVAL: request permission to make a change",
			Keywords: []string{"librarian", "governance", "approval"}, InputSchema: json.RawMessage(requestSchema)},
			Handler: node.HandlerFunc(l.approval)},
		{Capability: protocol.Capability{Name: CapQuery, Description: "seed 003 QUERY: ask the catalogue",
			Keywords: []string{"librarian", "catalogue", "query"}, InputSchema: json.RawMessage(requestSchema)},
			Handler: node.HandlerFunc(l.query)},
		{Capability: protocol.Capability{Name: CapValidate, Description: "seed 003 VALIDATE: check whether a proposed change would be compliant",
			Keywords: []string{"librarian", "governance", "validate"}, InputSchema: json.RawMessage(requestSchema)},
			Handler: node.HandlerFunc(l.validate)},
		{Capability: protocol.Capability{Name: CapReport, Description: "seed 003 REPORT: completion status of an approved change",
			Keywords: []string{"librarian", "governance", "report"}, InputSchema: json.RawMessage(reportSchema)},
			Handler: node.HandlerFunc(l.report)},
	}
}

// requiredFields are seed 003's ProtocolValidator.REQUIRED_FIELDS.
var requiredFields = map[string][]string{
	CapApproval: {"content", "rationale", "target_type"},
	CapQuery:    {"content"},
	CapValidate: {"content", "target_type"},
}

// check is one validation rule: it returns the violations it finds and
// how to fix each.
type check struct {
	rule string
	run  func(from peer.ID, capability string, r AgentRequest) ([]Violation, []string)
}

// rules returns seed 003's validation rules in order. Rate limits are
// enforced by the node's policy before a request reaches the librarian.
func (l *Librarian) rules() []check {
	return []check{
		{"required_fields", l.checkRequired},
		{"agent_authorization", l.checkAuthorization},
		{"content_format", l.checkFormat},
		{"references", l.checkReferences},
		{"target_exists", l.checkTarget},
	}
}

func (l *Librarian) checkRequired(_ peer.ID, capability string, r AgentRequest) ([]Violation, []string) {
	fields := map[string]string{"content": r.Content, "rationale": r.Rationale, "target_type": r.TargetType}
	var vs []Violation
	var fix []string
	for _, f := range requiredFields[capability] {
		if strings.TrimSpace(fields[f]) == "" {
			vs = append(vs, Violation{Rule: "required_fields", Description: fmt.Sprintf("%s is required for %s", f, requestType(capability))})
			fix = append(fix, fmt.Sprintf("add %s", f))
		}
	}
	return vs, fix
}

func (l *Librarian) checkAuthorization(from peer.ID, capability string, r AgentRequest) ([]Violation, []string) {
	e, ok := l.registry[from]
	if !ok {
		return []Violation{{Rule: "agent_authorization", Description: "agent not in the registry"}},
			[]string{"register the agent in the agent registry"}
	}
	if r.AgentID != e.Name {
		return []Violation{{Rule: "agent_authorization", Description: fmt.Sprintf("agent_id %q is not this agent's registered name %q", r.AgentID, e.Name)}},
			[]string{fmt.Sprintf("send agent_id %q", e.Name)}
	}
	if capability == CapApproval && r.Action != "read" && !slices.Contains(e.Capabilities, "write") {
		return []Violation{{Rule: "agent_authorization", Description: fmt.Sprintf("%s (%s) lacks the write capability", e.Name, e.Type)}},
			[]string{"ask an agent with the write capability to make the change"}
	}
	if r.TargetType != "" && !slices.Contains(e.AllowedTargets, "all") && !slices.Contains(e.AllowedTargets, r.TargetType) {
		return []Violation{{Rule: "agent_authorization", Description: fmt.Sprintf("%s may not change %s (allowed_targets: %s)", e.Name, r.TargetType, strings.Join(e.AllowedTargets, ", "))}},
			[]string{fmt.Sprintf("target one of %s, or ask an agent allowed to change %s", strings.Join(e.AllowedTargets, ", "), r.TargetType)}
	}
	return nil, nil
}

func (l *Librarian) checkFormat(_ peer.ID, _ string, r AgentRequest) ([]Violation, []string) {
	switch r.TargetType {
	case "architecture", "design", "docs":
		if r.Content != "" && !strings.HasPrefix(r.Content, "# ") {
			return []Violation{{Rule: "content_format", Description: fmt.Sprintf("a %s document must start with a \"# \" title", r.TargetType)}},
				[]string{"start the content with a markdown title line, e.g. \"# New Feature Design\""}
		}
	}
	return nil, nil
}

func (l *Librarian) checkReferences(_ peer.ID, _ string, r AgentRequest) ([]Violation, []string) {
	if len(r.References) > maxReferences {
		return []Violation{{Rule: "references", Description: fmt.Sprintf("%d references, at most %d", len(r.References), maxReferences)}},
			[]string{"cite only the specifications consulted"}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var vs []Violation
	var fix []string
	for _, ref := range r.References {
		if l.catalogue[ref] == nil {
			vs = append(vs, Violation{Rule: "references", Description: fmt.Sprintf("invalid reference %s: no such specification", ref)})
			fix = append(fix, fmt.Sprintf("QUERY the catalogue and replace %s with an existing specification id", ref))
		}
	}
	return vs, fix
}

func (l *Librarian) checkTarget(_ peer.ID, _ string, r AgentRequest) ([]Violation, []string) {
	if r.TargetPath == "" {
		if r.Action == "modify" || r.Action == "delete" {
			return []Violation{{Rule: "target_exists", Description: r.Action + " needs a target_path"}}, []string{"name the item to " + r.Action}
		}
		return nil, nil
	}
	l.mu.Lock()
	_, exists := l.byPath[r.TargetPath]
	l.mu.Unlock()
	switch {
	case r.Action == "create" && exists:
		return []Violation{{Rule: "target_exists", Description: r.TargetPath + " already exists"}}, []string{"use action modify, or another target_path"}
	case (r.Action == "modify" || r.Action == "delete") && !exists:
		return []Violation{{Rule: "target_exists", Description: r.TargetPath + " does not exist"}}, []string{"use action create, or QUERY for the existing path"}
	}
	return nil, nil
}

// evaluate runs every rule, reporting each to progress, and returns all
// violations and suggestions (so one rejection says everything to fix).
func (l *Librarian) evaluate(from peer.ID, capability string, r AgentRequest, progress func(rule string, passed bool)) ([]Violation, []string) {
	var vs []Violation
	var fix []string
	for _, c := range l.rules() {
		v, f := c.run(from, capability, r)
		if progress != nil {
			progress(c.rule, len(v) == 0)
		}
		vs = append(vs, v...)
		fix = append(fix, f...)
	}
	return vs, fix
}

// escalation reports why a request needs a human, or "".
func escalation(r AgentRequest) string {
	switch {
	case len(r.Deviations) > maxDeviations:
		return fmt.Sprintf("%d deviations from standards (at most %d)", len(r.Deviations), maxDeviations)
	case len(r.Deviations) > 0:
		var ds []string
		for _, d := range r.Deviations {
			keys := make([]string, 0, len(d))
			for k := range d {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			var kv []string
			for _, k := range keys {
				kv = append(kv, k+"="+d[k])
			}
			ds = append(ds, strings.Join(kv, " "))
		}
		return "deviations from standards need human review (allow_deviations is false): " + strings.Join(ds, "; ")
	case strings.EqualFold(r.RiskAssessment, "high"):
		return "high risk assessment"
	}
	return ""
}

func requestType(capability string) string {
	return strings.ToUpper(strings.TrimPrefix(capability, "librarian:"))
}

func decode(c *node.Call, v any) error {
	if err := json.Unmarshal(c.Request.Params, v); err != nil {
		return protocol.Errorf(protocol.CodeInvalidMessage, "decode %s: %v", requestType(c.Request.Action), err)
	}
	return nil
}

// approval handles APPROVAL: the submission is PENDING, VALIDATING while
// each rule runs (reported as progress), then REJECTED (an error whose
// details are the LibrarianResponse with the violations and suggestions),
// ESCALATED (the call waits for a human's decision), or APPROVED. A later
// REPORT marks it COMPLETED.
func (l *Librarian) approval(ctx context.Context, c *node.Call) (json.RawMessage, error) {
	start := time.Now()
	var r AgentRequest
	if err := decode(c, &r); err != nil {
		return nil, err
	}
	id := c.Request.CorrelationID
	s := &submission{id: id, from: c.From, req: r}
	l.mu.Lock()
	if l.submissions[id] != nil {
		l.mu.Unlock()
		return nil, protocol.Errorf(protocol.CodeInvalidMessage, "request %s was already submitted", id)
	}
	l.submissions[id] = s
	l.mu.Unlock()
	progress := func(p Progress) {
		p.RequestID = id
		b, _ := json.Marshal(p)
		_ = c.Progress(b) // a requester that went away does not stop the decision
	}
	l.setState(s, protocol.TaskPending)
	progress(Progress{State: string(protocol.TaskPending), Note: fmt.Sprintf("%s %s %s", r.Action, r.TargetType, r.TargetPath)})

	l.setState(s, protocol.TaskValidating)
	c.SetState(protocol.TaskValidating, "librarian checking compliance")
	vs, fix := l.evaluate(c.From, CapApproval, r, func(rule string, passed bool) {
		progress(Progress{State: string(protocol.TaskValidating), Rule: rule, Passed: &passed})
	})
	resp := LibrarianResponse{RequestID: id, Confidence: 1}
	finish := func(st protocol.TaskState) (json.RawMessage, error) {
		resp.State = string(st)
		resp.Timestamp = time.Now().UTC()
		resp.ProcessingTimeMS = time.Since(start).Milliseconds()
		return json.Marshal(resp)
	}
	if len(vs) > 0 {
		l.setState(s, protocol.TaskRejected)
		resp.Status, resp.Violations, resp.Suggestions = "rejected", vs, fix
		resp.Feedback = fmt.Sprintf("%d violation(s) of the standards; fix them and resubmit", len(vs))
		body, _ := finish(protocol.TaskRejected)
		l.log.Info("submission rejected", "request_id", id, "violations", len(vs))
		// The node task ends REJECTED: the handler fails while VALIDATING.
		return nil, protocol.Errorf(protocol.CodeInvalidMessage, "request %s rejected: %s", id, resp.Feedback).WithDetails(json.RawMessage(body))
	}

	if why := escalation(r); why != "" {
		l.mu.Lock()
		s.decision = make(chan reviewDecision, 1)
		l.mu.Unlock()
		l.setState(s, protocol.TaskEscalated)
		c.SetState(protocol.TaskEscalated, why)
		progress(Progress{State: string(protocol.TaskEscalated), Note: why})
		l.log.Info("submission escalated", "request_id", id, "reason", why)
		select {
		case l.escalated <- id:
		default:
		}
		var d reviewDecision
		select {
		case d = <-s.decision:
		case <-ctx.Done():
			return nil, fmt.Errorf("escalated request %s: %w", id, ctx.Err())
		}
		resp.EscalationReason = why
		resp.HumanReviewURL = "librarian://review/" + id
		resp.EstimatedReview = 0
		if !d.approve {
			l.setState(s, protocol.TaskRejected)
			resp.Status, resp.Feedback = "rejected", "human reviewer: "+d.note
			resp.Violations = []Violation{{Rule: "human_review", Description: d.note}}
			body, _ := finish(protocol.TaskRejected)
			return nil, protocol.Errorf(protocol.CodeInvalidMessage, "request %s rejected by a human reviewer: %s", id, d.note).WithDetails(json.RawMessage(body))
		}
		resp.Feedback = "approved by a human reviewer: " + d.note
		resp.Constraints = append(resp.Constraints, "record the deviation in the change's rationale")
	} else {
		resp.Feedback = "compliant with every rule"
	}

	l.mu.Lock()
	l.seq[r.TargetType]++
	s.assigned = fmt.Sprintf("%s-%03d", r.TargetType, 100+l.seq[r.TargetType])
	s.state, s.history = protocol.TaskApproved, append(s.history, protocol.TaskApproved)
	l.mu.Unlock()
	c.SetState(protocol.TaskApproved, "change authorized as "+s.assigned)
	progress(Progress{State: string(protocol.TaskApproved), Note: s.assigned})
	resp.Status, resp.AssignedID = "approved", s.assigned
	resp.ApprovedLocation = r.TargetPath
	if resp.ApprovedLocation == "" {
		resp.ApprovedLocation = fmt.Sprintf("docs/%s/%s.md", r.TargetType, s.assigned)
	}
	resp.Constraints = append(resp.Constraints, "REPORT completion with request_id "+id)
	l.log.Info("submission approved", "request_id", id, "assigned_id", s.assigned)
	return finish(protocol.TaskApproved)
}

// validate handles VALIDATE: the APPROVAL rules as a dry run, recording
// nothing.
func (l *Librarian) validate(_ context.Context, c *node.Call) (json.RawMessage, error) {
	start := time.Now()
	var r AgentRequest
	if err := decode(c, &r); err != nil {
		return nil, err
	}
	if r.Action == "" {
		r.Action = "create"
	}
	vs, fix := l.evaluate(c.From, CapValidate, r, nil)
	resp := LibrarianResponse{RequestID: c.Request.CorrelationID, Status: "compliant", Confidence: 1, Feedback: "the change would be approved"}
	if len(vs) > 0 {
		resp.Status, resp.Violations, resp.Suggestions = "non_compliant", vs, fix
		resp.Feedback = fmt.Sprintf("%d violation(s): an APPROVAL would be rejected", len(vs))
	} else if why := escalation(r); why != "" {
		resp.Feedback, resp.EscalationReason = "an APPROVAL would be escalated to a human", why
	}
	resp.Timestamp, resp.ProcessingTimeMS = time.Now().UTC(), time.Since(start).Milliseconds()
	return json.Marshal(resp)
}

// query handles QUERY: the catalogue entries sharing words with the
// question, best first.
func (l *Librarian) query(_ context.Context, c *node.Call) (json.RawMessage, error) {
	start := time.Now()
	var r AgentRequest
	if err := decode(c, &r); err != nil {
		return nil, err
	}
	if vs, fix := l.checkRequired(c.From, CapQuery, r); len(vs) > 0 {
		return nil, protocol.Errorf(protocol.CodeInvalidMessage, "%s", vs[0].Description).WithDetails(map[string]any{"violations": vs, "suggestions": fix})
	}
	words := keywords(r.Content)
	type hit struct {
		n     NodeSummary
		score int
	}
	var hits []hit
	l.mu.Lock()
	for _, cn := range l.catalogue {
		text := strings.ToLower(cn.Title + " " + cn.content + " " + cn.Path)
		score := 0
		for _, w := range words {
			if strings.Contains(text, w) {
				score++
			}
		}
		if score > 0 {
			hits = append(hits, hit{cn.NodeSummary, score})
		}
	}
	size := len(l.catalogue)
	l.mu.Unlock()
	sort.Slice(hits, func(i, j int) bool {
		if hits[i].score != hits[j].score {
			return hits[i].score > hits[j].score
		}
		return hits[i].n.ID < hits[j].n.ID
	})
	resp := LibrarianResponse{RequestID: c.Request.CorrelationID, Status: "answered", Confidence: 1,
		Feedback: fmt.Sprintf("%d relevant item(s)", len(hits)), Context: map[string]any{"catalogue_size": size, "keywords": words}}
	resp.RelevantNodes = []NodeSummary{}
	for _, h := range hits {
		resp.RelevantNodes = append(resp.RelevantNodes, h.n)
	}
	resp.Timestamp, resp.ProcessingTimeMS = time.Now().UTC(), time.Since(start).Milliseconds()
	return json.Marshal(resp)
}

// stopWords are left out of a query's keywords.
var stopWords = map[string]bool{"what": true, "are": true, "the": true, "is": true, "a": true, "an": true, "of": true, "for": true, "current": true, "and": true, "to": true, "how": true}

func keywords(q string) []string {
	var ws []string
	for _, w := range strings.FieldsFunc(strings.ToLower(q), func(r rune) bool { return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') }) {
		if !stopWords[w] && len(w) > 2 && !slices.Contains(ws, w) {
			ws = append(ws, w)
		}
	}
	return ws
}

// errNotApproved is why a REPORT is refused.
var errNotApproved = errors.New("not approved")

// report handles REPORT: the submitter of an APPROVED submission reports
// it applied (COMPLETED, and the item joins the catalogue) or the issues
// it met (it stays APPROVED).
func (l *Librarian) report(_ context.Context, c *node.Call) (json.RawMessage, error) {
	start := time.Now()
	var r ReportRequest
	if err := decode(c, &r); err != nil {
		return nil, err
	}
	l.mu.Lock()
	s := l.submissions[r.RequestID]
	var err error
	switch {
	case s == nil:
		err = protocol.Errorf(protocol.CodeInvalidMessage, "no submission %s", r.RequestID)
	case s.from != c.From:
		err = protocol.Errorf(protocol.CodeUnauthorized, "submission %s belongs to another agent", r.RequestID)
	case s.state != protocol.TaskApproved:
		err = protocol.Errorf(protocol.CodeInvalidMessage, "submission %s is %s: %v", r.RequestID, s.state, errNotApproved)
	}
	if err != nil {
		l.mu.Unlock()
		return nil, err
	}
	resp := LibrarianResponse{RequestID: r.RequestID, Status: "recorded", Confidence: 1, AssignedID: s.assigned}
	if r.Completed {
		s.state, s.history = protocol.TaskCompleted, append(s.history, protocol.TaskCompleted)
		path := s.req.TargetPath
		if path == "" {
			path = fmt.Sprintf("docs/%s/%s.md", s.req.TargetType, s.assigned)
		}
		title, _, _ := strings.Cut(strings.TrimPrefix(s.req.Content, "# "), "\n")
		l.add(s.assigned, s.req.TargetType, path, title, s.req.Content)
		resp.Feedback = fmt.Sprintf("%d change(s) recorded; %s is in the catalogue", len(r.ChangesMade), s.assigned)
	} else {
		resp.Feedback = fmt.Sprintf("%d issue(s) recorded; the approval stands", len(r.Issues))
	}
	resp.State = string(s.state)
	l.mu.Unlock()
	resp.Timestamp, resp.ProcessingTimeMS = time.Now().UTC(), time.Since(start).Milliseconds()
	return json.Marshal(resp)
}
