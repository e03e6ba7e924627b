// Command librarian runs seed 003's librarian as a mesh agent with four
// capabilities, one per request type (APPROVAL, QUERY, VALIDATE, REPORT),
// and four requester agents on loopback, printing each step: a submission
// observed going PENDING > VALIDATING > APPROVED and reported COMPLETED, a
// submission REJECTED with feedback and resubmitted fixed, one ESCALATED
// to a human, a catalogue QUERY, VALIDATE dry runs, and the agent
// registry's limits (policy.json, loaded with node.ParsePolicy) answering
// UNAUTHORIZED and RATE_LIMITED.
package main

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/sign"
)

// policyJSON is the librarian's requester policy: seed 003's agent
// registry limits (rate_limit, max_request_size, allowed request types).
//
//go:embed policy.json
var policyJSON []byte

// Agents of the example. Their keys are derived from their names, so
// policy.json can name their agent ids.
const (
	claude   = "claude-3"
	copilot  = "copilot-2"
	gemini   = "gemini-pro"
	stranger = "unregistered-bot"
)

// registry is seed 003's config/agents.yaml, less what policy.json holds.
var registry = []RegistryEntry{
	{Name: claude, Type: "code-generator", Capabilities: []string{"read", "write", "analyze"}, AllowedTargets: []string{"architecture", "design", "code"}},
	{Name: copilot, Type: "code-completer", Capabilities: []string{"read", "suggest"}, AllowedTargets: []string{"code"}},
	{Name: gemini, Type: "reviewer", Capabilities: []string{"read", "analyze", "validate"}, AllowedTargets: []string{"all"}},
}

// agentKey returns the fixed example key of a named agent. These keys are
// public: they only make the example reproducible.
func agentKey(name string) (crypto.PrivKey, error) {
	seed := sha256.Sum256([]byte("meshagent example librarian: " + name))
	k, err := sign.KeyFromSeed(seed[:])
	if err != nil {
		return nil, fmt.Errorf("key of %s: %w", name, err)
	}
	return k, nil
}

func agentID(name string) (peer.ID, error) {
	k, err := agentKey(name)
	if err != nil {
		return "", err
	}
	return peer.IDFromPrivateKey(k)
}

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := run(ctx, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "librarian:", err)
		os.Exit(1)
	}
}

// requester is an agent calling the librarian.
type requester struct {
	name string
	n    *node.Node
	to   string // the librarian's agent id
	out  io.Writer
}

// call sends a request to the librarian and returns its decoded
// response; progress, if set, gets each in_progress result.
func (r *requester) call(ctx context.Context, capability string, params any, progress func(Progress)) (*LibrarianResponse, error) {
	body, err := json.Marshal(params)
	if err != nil {
		return nil, fmt.Errorf("encode %s params: %w", capability, err)
	}
	req := protocol.CallRequest{To: r.to, Action: capability, Params: body, Timeout: 20 * time.Second}
	if progress != nil {
		req.Progress = func(resp *protocol.Response) {
			var p Progress
			if json.Unmarshal(resp.Result, &p) == nil {
				progress(p)
			}
		}
	}
	resp, err := r.n.Call(ctx, req)
	if err != nil {
		return nil, err
	}
	var lr LibrarianResponse
	if err := json.Unmarshal(resp.Result, &lr); err != nil {
		return nil, fmt.Errorf("decode %s response: %w", capability, err)
	}
	return &lr, nil
}

// rejection returns the LibrarianResponse carried by a rejection error.
func rejection(err error) (*LibrarianResponse, bool) {
	var pe *protocol.Error
	if !errors.As(err, &pe) || len(pe.Details) == 0 {
		return nil, false
	}
	var lr LibrarianResponse
	if json.Unmarshal(pe.Details, &lr) != nil || lr.Status != "rejected" {
		return nil, false
	}
	return &lr, true
}

// printProgress writes a progress report of the librarian.
func printProgress(out io.Writer, p Progress) {
	switch {
	case p.Rule != "" && p.Passed != nil:
		verdict := "passed"
		if !*p.Passed {
			verdict = "FAILED"
		}
		fmt.Fprintf(out, "  progress: %s %s %s\n", p.State, p.Rule, verdict)
	case p.Note != "":
		fmt.Fprintf(out, "  progress: %s (%s)\n", p.State, p.Note)
	default:
		fmt.Fprintf(out, "  progress: %s\n", p.State)
	}
}

// printTask writes the node's task record of a request, read by its
// requester with TaskStatus.
func printTask(ctx context.Context, out io.Writer, r *requester, id string) (*protocol.Task, error) {
	t, err := r.n.TaskStatus(ctx, id, "")
	if err != nil {
		return nil, fmt.Errorf("task status of %s: %w", id, err)
	}
	var states []string
	for _, e := range t.History {
		states = append(states, string(e.State))
	}
	fmt.Fprintf(out, "  task status: %s (history %s)\n", t.State, strings.Join(states, " > "))
	return t, nil
}

func joinStates(ss []protocol.TaskState) string {
	var b []string
	for _, s := range ss {
		b = append(b, string(s))
	}
	return strings.Join(b, " > ")
}

func newNode(name string, k crypto.PrivKey, opts ...node.Option) (*node.Node, error) {
	base := []node.Option{
		node.WithIdentity(k), node.WithName(name), node.WithListenAddrs(ma.StringCast("/ip4/127.0.0.1/tcp/0")),
		node.WithMDNS(false), node.WithDHT(false), node.WithTopics(false), node.WithPresence(node.Presence{}),
		node.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
	}
	n, err := node.New(append(base, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	return n, nil
}

func run(ctx context.Context, out io.Writer) (err error) {
	policy, err := node.ParsePolicy(policyJSON)
	if err != nil {
		return fmt.Errorf("policy.json: %w", err)
	}
	reg := map[peer.ID]RegistryEntry{}
	for _, e := range registry {
		id, err := agentID(e.Name)
		if err != nil {
			return err
		}
		reg[id] = e
	}
	lib := NewLibrarian(slog.New(slog.NewTextHandler(io.Discard, nil)), reg)
	libKey, err := sign.GenerateKey()
	if err != nil {
		return fmt.Errorf("librarian key: %w", err)
	}
	libNode, err := newNode("librarian", libKey, node.WithServices(lib.Services()...), node.WithPolicy(policy))
	if err != nil {
		return err
	}
	defer libNode.Close()
	fmt.Fprintf(out, "librarian %s offers %s, %s, %s, %s\n", libNode.AgentID(), CapApproval, CapQuery, CapValidate, CapReport)
	for _, r := range policy.Rules {
		fmt.Fprintf(out, "  policy %s: rate_limit %s, max_request_size %s, allowed %s\n", r.Name, r.RateLimit, sizeText(r.MaxRequestSize), strings.Join(r.AllowedCapabilities, " "))
	}
	fmt.Fprintf(out, "  policy default (unregistered agents): rate_limit %s, allowed %s\n", policy.Default.RateLimit, strings.Join(policy.Default.AllowedCapabilities, " "))

	agents := map[string]*requester{}
	for _, name := range []string{claude, copilot, gemini, stranger} {
		k, err := agentKey(name)
		if err != nil {
			return err
		}
		n, err := newNode(name, k, node.WithBootstrap(libNode.Addrs()...))
		if err != nil {
			return err
		}
		defer n.Close()
		if _, err := n.WaitHello(ctx, libNode.ID()); err != nil {
			return fmt.Errorf("%s: no hello from the librarian: %w", name, err)
		}
		agents[name] = &requester{name: name, n: n, to: libNode.AgentID(), out: out}
		fmt.Fprintf(out, "%s (%s) connected to the librarian\n", name, n.AgentID())
	}
	steps := []func(context.Context, io.Writer, *Librarian, map[string]*requester) error{
		stepApproval, stepRejectAndResubmit, stepEscalation, stepQuery, stepValidate, stepUnauthorized, stepRateLimited,
	}
	for _, step := range steps {
		if err := step(ctx, out, lib, agents); err != nil {
			return err
		}
	}
	return nil
}

func sizeText(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "-"
	}
	return strings.Trim(string(raw), `"`)
}

// stepApproval: APPROVAL observed PENDING > VALIDATING > APPROVED, then
// REPORT makes it COMPLETED (seed 003, Common Operations 1).
func stepApproval(ctx context.Context, out io.Writer, lib *Librarian, agents map[string]*requester) error {
	c := agents[claude]
	fmt.Fprintln(out, "1. claude-3 asks APPROVAL to create docs/design/new-feature.md")
	req := AgentRequest{
		AgentID: claude, SessionID: "sess-123", Action: "create", TargetType: "design",
		TargetPath: "docs/design/new-feature.md",
		Content:    "# New Feature Design\nToken refresh for agent sessions, following the authentication requirements.",
		Rationale:  "Implementing user story US-123", References: []string{"arch-001", "req-045"},
	}
	resp, err := c.call(ctx, CapApproval, req, func(p Progress) { printProgress(out, p) })
	if err != nil {
		return fmt.Errorf("approval: %w", err)
	}
	fmt.Fprintf(out, "  response: %s, assigned_id %s, approved_location %s\n", resp.Status, resp.AssignedID, resp.ApprovedLocation)
	if _, err := printTask(ctx, out, c, resp.RequestID); err != nil {
		return err
	}
	fmt.Fprintln(out, "2. claude-3 creates the file and sends REPORT")
	rep, err := c.call(ctx, CapReport, ReportRequest{AgentID: claude, RequestID: resp.RequestID, Completed: true,
		ChangesMade: []string{"created " + resp.ApprovedLocation}}, nil)
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	st, hist := lib.State(resp.RequestID)
	fmt.Fprintf(out, "  report: %s (%s)\n  submission %s: %s\n", rep.Status, rep.Feedback, st, joinStates(hist))
	return nil
}

// stepRejectAndResubmit: a submission REJECTED with violations and
// suggestions, fixed and resubmitted (Common Operations 3).
func stepRejectAndResubmit(ctx context.Context, out io.Writer, lib *Librarian, agents map[string]*requester) error {
	c := agents[claude]
	fmt.Fprintln(out, "3. claude-3 asks APPROVAL to create docs/guides/token-refresh.md (docs)")
	req := AgentRequest{
		AgentID: claude, SessionID: "sess-124", Action: "create", TargetType: "docs",
		TargetPath: "docs/guides/token-refresh.md", Content: "Token refresh guide\nRefresh tokens before they expire.",
		References: []string{"req-045", "req-999"},
	}
	var rejectedID string
	_, err := c.call(ctx, CapApproval, req, func(p Progress) {
		rejectedID = p.RequestID
		printProgress(out, p)
	})
	lr, ok := rejection(err)
	if !ok {
		return fmt.Errorf("the faulty submission was not rejected with feedback: %v", err)
	}
	fmt.Fprintf(out, "  %s: %s\n", protocol.CodeOf(err), lr.Feedback)
	for _, v := range lr.Violations {
		fmt.Fprintf(out, "  - %s: %s\n", v.Rule, v.Description)
	}
	for _, s := range lr.Suggestions {
		fmt.Fprintf(out, "  fix: %s\n", s)
	}
	if _, err := printTask(ctx, out, c, rejectedID); err != nil {
		return err
	}
	st, hist := lib.State(rejectedID)
	fmt.Fprintf(out, "  submission %s: %s\n", st, joinStates(hist))

	fmt.Fprintln(out, "4. claude-3 fixes the submission and resubmits it")
	req.TargetType, req.TargetPath = "design", "docs/design/token-refresh.md"
	req.Content = "# Token Refresh Design\nRefresh tokens before they expire; see the authentication requirements."
	req.Rationale = "Implementing user story US-124"
	req.References = []string{"req-045"}
	resp, err := c.call(ctx, CapApproval, req, func(p Progress) { printProgress(out, p) })
	if err != nil {
		return fmt.Errorf("resubmission: %w", err)
	}
	fmt.Fprintf(out, "  response: %s, assigned_id %s\n", resp.Status, resp.AssignedID)
	return nil
}

// stepEscalation: a submission with deviations is ESCALATED; the requester
// sees it in its progress and its task status, and a human decides
// (Common Operations 4).
func stepEscalation(ctx context.Context, out io.Writer, lib *Librarian, agents map[string]*requester) error {
	c := agents[claude]
	fmt.Fprintln(out, "5. claude-3 asks APPROVAL to modify docs/architecture.md with a deviation")
	req := AgentRequest{
		AgentID: claude, SessionID: "sess-125", Action: "modify", TargetType: "architecture",
		TargetPath: "docs/architecture.md", Content: "# Main architecture\nSessions may also use short-lived bearer tokens.",
		Rationale: "Bearer tokens for the web console", References: []string{"arch-001"},
		Deviations: []map[string]string{{"standard": "ed25519-only-auth", "reason": "browsers cannot hold agent keys"}},
	}
	escalated := make(chan string, 1)
	type result struct {
		resp *LibrarianResponse
		err  error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := c.call(ctx, CapApproval, req, func(p Progress) {
			printProgress(out, p)
			if p.State == string(protocol.TaskEscalated) {
				escalated <- p.RequestID
			}
		})
		done <- result{resp, err}
	}()
	var id string
	select {
	case id = <-escalated:
	case r := <-done:
		return fmt.Errorf("the submission with a deviation was not escalated: %v", r.err)
	case <-ctx.Done():
		return ctx.Err()
	}
	// The requester polls its task while it waits (seed 003: poll_status).
	if _, err := printTask(ctx, out, c, id); err != nil {
		return err
	}
	select {
	case got := <-lib.Escalations():
		if got != id {
			return fmt.Errorf("escalated %s, want %s", got, id)
		}
	case <-ctx.Done():
		return ctx.Err()
	}
	fmt.Fprintln(out, "  human reviewer approves: bearer tokens limited to the web console")
	if err := lib.Review(id, true, "bearer tokens limited to the web console"); err != nil {
		return err
	}
	var r result
	select {
	case r = <-done:
	case <-ctx.Done():
		return ctx.Err()
	}
	if r.err != nil {
		return fmt.Errorf("escalated approval: %w", r.err)
	}
	fmt.Fprintf(out, "  response: %s, assigned_id %s (%s)\n", r.resp.Status, r.resp.AssignedID, r.resp.Feedback)
	fmt.Fprintf(out, "  escalation_reason: %s\n", r.resp.EscalationReason)
	if _, err := printTask(ctx, out, c, id); err != nil {
		return err
	}
	return nil
}

// stepQuery: QUERY of the catalogue (Common Operations 2).
func stepQuery(ctx context.Context, out io.Writer, _ *Librarian, agents map[string]*requester) error {
	fmt.Fprintln(out, "6. copilot-2 sends QUERY: What are the current authentication requirements?")
	resp, err := agents[copilot].call(ctx, CapQuery, AgentRequest{AgentID: copilot, Content: "What are the current authentication requirements?"}, nil)
	if err != nil {
		return fmt.Errorf("query: %w", err)
	}
	fmt.Fprintf(out, "  %s\n", resp.Feedback)
	for _, n := range resp.RelevantNodes {
		fmt.Fprintf(out, "  - %s %s %s (%s)\n", n.ID, n.Type, n.Path, n.Title)
	}
	return nil
}

// stepValidate: VALIDATE dry runs, compliant and not.
func stepValidate(ctx context.Context, out io.Writer, _ *Librarian, agents map[string]*requester) error {
	g := agents[gemini]
	fmt.Fprintln(out, "7. gemini-pro sends VALIDATE for a change to src/auth/session.go")
	ok, err := g.call(ctx, CapValidate, AgentRequest{AgentID: gemini, Action: "modify", TargetType: "code",
		TargetPath: "src/auth/session.go", Content: "func Refresh(t Token) (Token, error)", References: []string{"code-007", "req-045"}}, nil)
	if err != nil {
		return fmt.Errorf("validate: %w", err)
	}
	fmt.Fprintf(out, "  %s: %s\n", ok.Status, ok.Feedback)
	fmt.Fprintln(out, "   and for a change to src/auth/missing.go")
	bad, err := g.call(ctx, CapValidate, AgentRequest{AgentID: gemini, Action: "modify", TargetType: "code",
		TargetPath: "src/auth/missing.go", Content: "func Revoke(t Token) error"}, nil)
	if err != nil {
		return fmt.Errorf("validate: %w", err)
	}
	fmt.Fprintf(out, "  %s: %s\n", bad.Status, bad.Feedback)
	for _, v := range bad.Violations {
		fmt.Fprintf(out, "  - %s: %s\n", v.Rule, v.Description)
	}
	return nil
}

// stepUnauthorized: the registry's allowed request types, and its
// max_request_size.
func stepUnauthorized(ctx context.Context, out io.Writer, _ *Librarian, agents map[string]*requester) error {
	c := agents[copilot]
	fmt.Fprintln(out, "8. copilot-2 (a code-completer: read, suggest) asks APPROVAL")
	_, err := c.call(ctx, CapApproval, AgentRequest{AgentID: copilot, Action: "create", TargetType: "code",
		TargetPath: "src/auth/new.go", Content: "package auth", Rationale: "completion"}, nil)
	if protocol.CodeOf(err) != protocol.CodeUnauthorized {
		return fmt.Errorf("copilot-2's APPROVAL: got %v, want UNAUTHORIZED", err)
	}
	fmt.Fprintf(out, "  %s\n", redact(err, agents))
	fmt.Fprintln(out, "9. copilot-2 sends VALIDATE with 12KB of content")
	_, err = c.call(ctx, CapValidate, AgentRequest{AgentID: copilot, TargetType: "code", Content: strings.Repeat("x", 12<<10)}, nil)
	if protocol.CodeOf(err) != protocol.CodeRateLimited {
		return fmt.Errorf("copilot-2's large VALIDATE: got %v, want RATE_LIMITED", err)
	}
	fmt.Fprintf(out, "  %s\n", redact(err, agents))
	return nil
}

// stepRateLimited: an agent not in the registry gets the default rule,
// three QUERYs a minute.
func stepRateLimited(ctx context.Context, out io.Writer, _ *Librarian, agents map[string]*requester) error {
	s := agents[stranger]
	fmt.Fprintln(out, "10. unregistered-bot sends QUERY four times in a row")
	for i := 1; i <= 4; i++ {
		resp, err := s.call(ctx, CapQuery, AgentRequest{AgentID: stranger, Content: "architecture"}, nil)
		switch {
		case err == nil:
			fmt.Fprintf(out, "  query %d: %s, %s\n", i, resp.Status, resp.Feedback)
		case protocol.CodeOf(err) == protocol.CodeRateLimited:
			fmt.Fprintf(out, "  query %d: %s\n", i, redact(err, agents))
		default:
			return fmt.Errorf("query %d: %w", i, err)
		}
	}
	return nil
}

// redact replaces agent ids by names in an error, for readable output.
func redact(err error, agents map[string]*requester) string {
	s := err.Error()
	for name, r := range agents {
		s = strings.ReplaceAll(s, r.n.AgentID(), name)
	}
	return s
}
