package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/sign"
)

// TestRun runs the example on loopback and checks every step's output.
func TestRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	got := out.String()
	for _, want := range []string{
		// 1. approval observed through its states
		"  progress: VALIDATING checking docs/design/new-feature.md\n" +
			"  progress: APPROVED design-101\n" +
			"  approved design-101: compliant with every rule\n" +
			"  task status: COMPLETED (history VALIDATING > APPROVED > VALIDATING > COMPLETED)\n",
		// 2. rejection with every violation, then the fixed resubmission
		"  INVALID_MESSAGE: 4 violation(s); fix them and resubmit\n" +
			"  - required_fields: rationale is required\n" +
			"  - agent_authorization: claude-3 may not change docs (allowed_targets: architecture, design, code)\n" +
			"  - content_format: a docs document must start with a \"# \" title\n" +
			"  - references: no specification req-999\n" +
			"  task status: REJECTED (history VALIDATING > APPROVED > VALIDATING > REJECTED)\n",
		"  approved design-102: compliant with every rule\n",
		// 3. escalation, decided by the operator
		"  progress: ESCALATED deviations need human review: ed25519-only-auth: browsers cannot hold agent keys\n" +
			"  progress: APPROVED architecture-103\n" +
			"  approved architecture-103: approved by a human reviewer: bearer tokens limited to the web console\n" +
			"  task status: COMPLETED (history VALIDATING > APPROVED > VALIDATING > ESCALATED > APPROVED > COMPLETED)\n",
		// 4. query: an approved design joined the catalogue
		"  answered: 2 relevant item(s)\n" +
			"  - req-045 docs/requirements/authentication.md (Authentication requirements)\n" +
			"  - design-102 docs/design/token-refresh.md (Token Refresh Design)\n",
		// 5-6. the registry's limits, applied by the node
		"  UNAUTHORIZED: policy code-completers does not allow agent copilot-2 to call capability librarian:approval",
		"exceeds max_request_size 10KB of policy code-completers\n",
		"  answered: 1 relevant item(s)\n  - arch-001 docs/architecture.md (Main architecture)\n" +
			"  RATE_LIMITED: rate_limit 3/minute of policy default exceeded by unregistered-bot\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if n := strings.Count(got, "  answered: 1 relevant item(s)\n"); n != 3 {
		t.Errorf("unregistered-bot got %d answers, want 3 before its rate limit:\n%s", n, got)
	}
}

// TestPolicyNamesTheAgents checks that policy.json, loaded with the node
// package's loader, names each registered agent's id in its group.
func TestPolicyNamesTheAgents(t *testing.T) {
	p, err := node.LoadPolicy("policy.json")
	if err != nil {
		t.Fatal(err)
	}
	for name, group := range map[string]string{claude: "code-generators", copilot: "code-completers"} {
		k, err := agentKey(name)
		if err != nil {
			t.Fatal(err)
		}
		id, _ := peer.IDFromPrivateKey(k)
		if members := p.Groups[group]; len(members) != 1 || members[0] != id.String() {
			t.Errorf("group %s is %v, want [%s] (%s)", group, members, id, name)
		}
	}
	if p.Default == nil || p.Default.RateLimit != "3/minute" {
		t.Errorf("default rule %+v, want rate_limit 3/minute for unregistered agents", p.Default)
	}
}

// TestHumanRejects: an escalated request the operator turns down is
// rejected with the reviewer's reason, and its task ends REJECTED.
func TestHumanRejects(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ck, _ := agentKey(claude)
	cid, _ := peer.IDFromPrivateKey(ck)
	lib := &Librarian{names: map[peer.ID]string{cid: claude}, targets: registry}
	lk, _ := sign.GenerateKey()
	ln, err := newNode("librarian", lk, node.WithServices(lib.Services()...))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cn, err := newNode(claude, ck, node.WithBootstrap(ln.Addrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cn.Close()
	if _, err := cn.WaitHello(ctx, ln.ID()); err != nil {
		t.Fatal(err)
	}
	params, _ := json.Marshal(Request{AgentID: claude, TargetType: "code", Content: "x", Rationale: "r", Deviations: []string{"d"}})
	errc := make(chan error, 1)
	go func() {
		_, err := cn.Call(ctx, protocol.CallRequest{To: ln.AgentID(), Action: CapApproval, Params: params, CorrelationID: "risky"})
		errc <- err
	}()
	wait.ForTrue(t, 15*time.Second, "the request escalated", func() bool {
		tk, err := cn.TaskStatus(ctx, "risky", "")
		return err == nil && tk.State == protocol.TaskEscalated
	})
	if _, err := ln.TaskResolve(ctx, "risky", false, "too risky"); err != nil {
		t.Fatal(err)
	}
	err = <-errc
	var pe *protocol.Error
	var resp Response
	if !errors.As(err, &pe) || json.Unmarshal(pe.Details, &resp) != nil || resp.Feedback != "human reviewer: too risky" {
		t.Fatalf("got %v (%+v), want a rejection by the human reviewer", err, resp)
	}
	if tk, err := cn.TaskStatus(ctx, "risky", ""); err != nil || tk.State != protocol.TaskRejected {
		t.Errorf("task %+v, %v, want REJECTED", tk, err)
	}
}
