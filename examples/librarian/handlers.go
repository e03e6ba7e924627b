package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
)

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
