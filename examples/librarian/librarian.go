package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
)

// Capabilities of the librarian, one per seed 003 request type it serves.
const (
	CapApproval = "librarian:approval" // APPROVAL: permission to make a change
	CapQuery    = "librarian:query"    // QUERY: what the catalogue holds
)

// Request is seed 003's AgentRequest, less the fields no rule reads. The
// requester's identity is the verified peer; agent_id must be its name.
type Request struct {
	AgentID    string   `json:"agent_id"`
	TargetType string   `json:"target_type,omitempty"`
	TargetPath string   `json:"target_path,omitempty"`
	Content    string   `json:"content"`
	Rationale  string   `json:"rationale,omitempty"`
	References []string `json:"references,omitempty"`
	Deviations []string `json:"deviations,omitempty"` // each needs a human's review
}

// requestSchema is checked by the node before the librarian sees a Request.
const requestSchema = `{"type":"object","required":["agent_id","content"],"additionalProperties":false,
 "properties":{"agent_id":{"type":"string"},"target_type":{"enum":["architecture","design","code","docs"]},
 "target_path":{"type":"string"},"content":{"type":"string","minLength":1,"maxLength":65536},
 "rationale":{"type":"string"},"references":{"type":"array","maxItems":20,"items":{"type":"string"}},
 "deviations":{"type":"array","maxItems":5,"items":{"type":"string"}}}}`

// Response is seed 003's LibrarianResponse, trimmed. A rejected APPROVAL
// is an INVALID_MESSAGE error whose details are its Response.
type Response struct {
	Status        string   `json:"status"` // approved, rejected or answered
	Feedback      string   `json:"feedback"`
	Violations    []string `json:"violations,omitempty"` // "rule: what is wrong"
	AssignedID    string   `json:"assigned_id,omitempty"`
	RelevantNodes []string `json:"relevant_nodes,omitempty"` // "id path (title)"
}

// entry is an item of the catalogue: a specification agents may reference.
type entry struct{ id, path, title string }

// Librarian checks requests against seed 003's rules, its registry and
// its catalogue; its node has checked signature, policy and schema.
type Librarian struct {
	names   map[peer.ID]string  // registered agents' names
	targets map[string][]string // name -> target types it may change

	mu        sync.Mutex
	catalogue []entry
	approved  int // for assigned ids
}

// Services returns the librarian's capabilities, for node.WithServices.
func (l *Librarian) Services() []node.Service {
	svc := func(name, desc string, h node.HandlerFunc) node.Service {
		return node.Service{Capability: protocol.Capability{Name: name, Description: desc,
			InputSchema: json.RawMessage(requestSchema)}, Handler: h}
	}
	return []node.Service{
		svc(CapApproval, "seed 003 APPROVAL: request permission to make a change", l.approval),
		svc(CapQuery, "seed 003 QUERY: ask the catalogue", l.query),
	}
}

// violations runs every rule on r: one rejection lists all to fix.
func (l *Librarian) violations(from peer.ID, r Request) []string {
	var v []string
	if r.Rationale == "" {
		v = append(v, "required_fields: rationale is required")
	}
	name, targets := l.names[from], l.targets[l.names[from]]
	if r.AgentID != name {
		v = append(v, fmt.Sprintf("agent_authorization: agent_id %q is not this agent's registered name %q", r.AgentID, name))
	} else if !slices.Contains(targets, r.TargetType) {
		v = append(v, fmt.Sprintf("agent_authorization: %s may not change %s (allowed_targets: %s)", name, r.TargetType, strings.Join(targets, ", ")))
	}
	if r.TargetType != "code" && !strings.HasPrefix(r.Content, "# ") {
		v = append(v, fmt.Sprintf("content_format: a %s document must start with a \"# \" title", r.TargetType))
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ref := range r.References {
		if !slices.ContainsFunc(l.catalogue, func(e entry) bool { return e.id == ref }) {
			v = append(v, "references: no specification "+ref)
		}
	}
	return v
}

// approval handles APPROVAL. Its task is VALIDATING while the rules run,
// then REJECTED, ESCALATED to the operator if the request has deviations,
// or APPROVED; each change is also sent to the requester as progress.
func (l *Librarian) approval(ctx context.Context, c *node.Call) (json.RawMessage, error) {
	var r Request
	if err := protocol.DecodeStrict(c.Request.Params, &r); err != nil {
		return nil, protocol.Errorf(protocol.CodeInvalidMessage, "APPROVAL: %v", err)
	}
	progress := func(state protocol.TaskState, note string) {
		b, _ := json.Marshal(map[string]string{"state": string(state), "note": note})
		_ = c.Progress(b) // a requester that went away does not stop the decision
	}
	c.SetState(protocol.TaskValidating, "checking compliance")
	progress(protocol.TaskValidating, "checking "+r.TargetPath)
	resp := Response{Status: "approved", Feedback: "compliant with every rule"}
	if vs := l.violations(c.From, r); len(vs) > 0 {
		resp = Response{Status: "rejected", Violations: vs, Feedback: fmt.Sprintf("%d violation(s); fix them and resubmit", len(vs))}
		return nil, protocol.Errorf(protocol.CodeInvalidMessage, "%s", resp.Feedback).WithDetails(resp)
	}
	if len(r.Deviations) > 0 {
		why := "deviations need human review: " + strings.Join(r.Deviations, "; ")
		if err := c.Escalate(why); err != nil {
			return nil, err
		}
		progress(protocol.TaskEscalated, why)
		d, err := c.Decision(ctx)
		if err != nil {
			return nil, err
		}
		if !d.Approved {
			resp = Response{Status: "rejected", Feedback: "human reviewer: " + d.Reason}
			return nil, protocol.Errorf(protocol.CodeInvalidMessage, "%s", resp.Feedback).WithDetails(resp)
		}
		resp.Feedback = "approved by a human reviewer: " + d.Reason
	}
	l.mu.Lock()
	l.approved++
	resp.AssignedID = fmt.Sprintf("%s-%d", r.TargetType, 100+l.approved)
	title, _, _ := strings.Cut(strings.TrimPrefix(r.Content, "# "), "\n")
	l.catalogue = append(l.catalogue, entry{resp.AssignedID, r.TargetPath, title})
	l.mu.Unlock()
	progress(protocol.TaskApproved, resp.AssignedID)
	return json.Marshal(resp)
}

// query handles QUERY: the catalogue entries whose title shares a word of
// five letters or more with the question.
func (l *Librarian) query(_ context.Context, c *node.Call) (json.RawMessage, error) {
	var r Request
	if err := protocol.DecodeStrict(c.Request.Params, &r); err != nil {
		return nil, protocol.Errorf(protocol.CodeInvalidMessage, "QUERY: %v", err)
	}
	resp := Response{Status: "answered"}
	l.mu.Lock()
	for _, e := range l.catalogue {
		if slices.ContainsFunc(strings.Fields(strings.ToLower(r.Content)), func(w string) bool {
			return len(w) >= 5 && strings.Contains(strings.ToLower(e.title), strings.Trim(w, "?.,"))
		}) {
			resp.RelevantNodes = append(resp.RelevantNodes, fmt.Sprintf("%s %s (%s)", e.id, e.path, e.title))
		}
	}
	l.mu.Unlock()
	resp.Feedback = fmt.Sprintf("%d relevant item(s)", len(resp.RelevantNodes))
	return json.Marshal(resp)
}
