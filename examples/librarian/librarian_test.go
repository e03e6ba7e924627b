package main

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/sign"
)

// setup starts a librarian with policy.json and the named requesters.
func setup(t *testing.T, names ...string) (context.Context, *Librarian, map[string]*requester) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	p, err := node.LoadPolicy("policy.json")
	if err != nil {
		t.Fatal(err)
	}
	reg := map[peer.ID]RegistryEntry{}
	for _, e := range registry {
		id, err := agentID(e.Name)
		if err != nil {
			t.Fatal(err)
		}
		reg[id] = e
	}
	lib := NewLibrarian(slog.New(slog.NewTextHandler(io.Discard, nil)), reg)
	k, err := sign.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := newNode("librarian", k, node.WithServices(lib.Services()...), node.WithPolicy(p))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	agents := map[string]*requester{}
	for _, name := range names {
		k, err := agentKey(name)
		if err != nil {
			t.Fatal(err)
		}
		n, err := newNode(name, k, node.WithBootstrap(ln.Addrs()...))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = n.Close() })
		if _, err := n.WaitHello(ctx, ln.ID()); err != nil {
			t.Fatal(err)
		}
		agents[name] = &requester{name: name, n: n, to: ln.AgentID(), out: io.Discard}
	}
	return ctx, lib, agents
}

func design(path string) AgentRequest {
	return AgentRequest{AgentID: claude, Action: "create", TargetType: "design", TargetPath: path,
		Content: "# A design\nbody", Rationale: "US-1", References: []string{"arch-001"}}
}

func wantCode(t *testing.T, err error, code protocol.Code, sub string) {
	t.Helper()
	if protocol.CodeOf(err) != code || !strings.Contains(err.Error(), sub) {
		t.Fatalf("got %v, want %s mentioning %q", err, code, sub)
	}
}

// TestReportChecks: only the submitter reports, and only an approved
// submission.
func TestReportChecks(t *testing.T) {
	ctx, lib, a := setup(t, claude, gemini)
	resp, err := a[claude].call(ctx, CapApproval, design("docs/design/x.md"), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = a[gemini].call(ctx, CapReport, ReportRequest{AgentID: gemini, RequestID: resp.RequestID, Completed: true, ChangesMade: []string{}}, nil)
	wantCode(t, err, protocol.CodeUnauthorized, "belongs to another agent")
	_, err = a[claude].call(ctx, CapReport, ReportRequest{AgentID: claude, RequestID: "nope", Completed: true, ChangesMade: []string{}}, nil)
	wantCode(t, err, protocol.CodeInvalidMessage, "no submission nope")

	// Issues keep the approval; completion ends it, once.
	rep, err := a[claude].call(ctx, CapReport, ReportRequest{AgentID: claude, RequestID: resp.RequestID, ChangesMade: []string{}, Issues: []string{"disk full"}}, nil)
	if err != nil || rep.State != string(protocol.TaskApproved) {
		t.Fatalf("report of issues: %+v, %v", rep, err)
	}
	if _, err := a[claude].call(ctx, CapReport, ReportRequest{AgentID: claude, RequestID: resp.RequestID, Completed: true, ChangesMade: []string{"x"}}, nil); err != nil {
		t.Fatal(err)
	}
	_, err = a[claude].call(ctx, CapReport, ReportRequest{AgentID: claude, RequestID: resp.RequestID, Completed: true, ChangesMade: []string{"x"}}, nil)
	wantCode(t, err, protocol.CodeInvalidMessage, "is COMPLETED")
	if st, _ := lib.State(resp.RequestID); st != protocol.TaskCompleted {
		t.Errorf("state %s, want COMPLETED", st)
	}
	// The rejected one cannot be reported.
	bad := design("docs/design/x.md") // exists now
	var id string
	_, err = a[claude].call(ctx, CapApproval, bad, func(p Progress) { id = p.RequestID })
	wantCode(t, err, protocol.CodeInvalidMessage, "rejected")
	_, err = a[claude].call(ctx, CapReport, ReportRequest{AgentID: claude, RequestID: id, Completed: true, ChangesMade: []string{}}, nil)
	wantCode(t, err, protocol.CodeInvalidMessage, "is REJECTED")
}

// TestHumanRejects: an escalated submission the human turns down is
// answered rejected with the reviewer's note.
func TestHumanRejects(t *testing.T) {
	ctx, lib, a := setup(t, claude)
	req := design("docs/design/risky.md")
	req.RiskAssessment = "high"
	errc := make(chan error, 1)
	go func() {
		_, err := a[claude].call(ctx, CapApproval, req, nil)
		errc <- err
	}()
	var id string
	select {
	case id = <-lib.Escalations():
	case <-ctx.Done():
		t.Fatal("not escalated")
	}
	if st, _ := lib.State(id); st != protocol.TaskEscalated {
		t.Fatalf("state %s, want ESCALATED", st)
	}
	if err := lib.Review(id, false, "too risky"); err != nil {
		t.Fatal(err)
	}
	err := <-errc
	lr, ok := rejection(err)
	if !ok || lr.Feedback != "human reviewer: too risky" || lr.EscalationReason != "high risk assessment" {
		t.Fatalf("got %v (%+v)", err, lr)
	}
	if st, hist := lib.State(id); st != protocol.TaskRejected || joinStates(hist) != "PENDING > VALIDATING > ESCALATED > REJECTED" {
		t.Errorf("state %s, history %s", st, joinStates(hist))
	}
	if tk, err := a[claude].n.TaskStatus(ctx, id, ""); err != nil || tk.State != protocol.TaskRejected {
		t.Errorf("the node's task record: %+v %v, want REJECTED", tk, err)
	}
	if err := lib.Review(id, true, "again"); err == nil {
		t.Error("a second review was accepted")
	}
}

// TestAgentIDMustMatch: a request naming another agent is rejected, and a
// QUERY needs content.
func TestAgentIDMustMatch(t *testing.T) {
	ctx, _, a := setup(t, claude)
	req := design("docs/design/y.md")
	req.AgentID = gemini
	_, err := a[claude].call(ctx, CapApproval, req, nil)
	lr, ok := rejection(err)
	if !ok || len(lr.Violations) != 1 || !strings.Contains(lr.Violations[0].Description, `agent_id "gemini-pro" is not this agent's registered name "claude-3"`) {
		t.Fatalf("got %v (%+v)", err, lr)
	}
	_, err = a[claude].call(ctx, CapQuery, AgentRequest{AgentID: claude}, nil)
	wantCode(t, err, protocol.CodeInvalidMessage, "content is required for QUERY")
}
