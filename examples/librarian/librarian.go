package main

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
)

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
