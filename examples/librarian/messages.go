package main

import (
	"time"
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
