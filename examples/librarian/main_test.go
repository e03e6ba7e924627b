package main

import (
	"bytes"
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/meshagent/meshagent/node"
)

func TestRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	got := out.String()
	for _, want := range []string{
		// 1-2. approval observed through its states, then reported completed
		"1. claude-3 asks APPROVAL to create docs/design/new-feature.md\n" +
			"  progress: PENDING (create design docs/design/new-feature.md)\n" +
			"  progress: VALIDATING required_fields passed\n" +
			"  progress: VALIDATING agent_authorization passed\n" +
			"  progress: VALIDATING content_format passed\n" +
			"  progress: VALIDATING references passed\n" +
			"  progress: VALIDATING target_exists passed\n" +
			"  progress: APPROVED (design-101)\n" +
			"  response: approved, assigned_id design-101, approved_location docs/design/new-feature.md\n" +
			"  task status: COMPLETED (history VALIDATING > APPROVED > VALIDATING > APPROVED > COMPLETED)\n",
		"  report: recorded (1 change(s) recorded; design-101 is in the catalogue)\n" +
			"  submission COMPLETED: PENDING > VALIDATING > APPROVED > COMPLETED\n",
		// 3-4. rejection with feedback, then the fixed resubmission
		"  INVALID_MESSAGE: 4 violation(s) of the standards; fix them and resubmit\n" +
			"  - required_fields: rationale is required for APPROVAL\n" +
			"  - agent_authorization: claude-3 may not change docs (allowed_targets: architecture, design, code)\n" +
			"  - content_format: a docs document must start with a \"# \" title\n" +
			"  - references: invalid reference req-999: no such specification\n" +
			"  fix: add rationale\n",
		"  fix: QUERY the catalogue and replace req-999 with an existing specification id\n" +
			"  task status: REJECTED (history VALIDATING > APPROVED > VALIDATING > REJECTED)\n" +
			"  submission REJECTED: PENDING > VALIDATING > REJECTED\n" +
			"4. claude-3 fixes the submission and resubmits it\n",
		"  progress: APPROVED (design-102)\n  response: approved, assigned_id design-102\n",
		// 5. escalation, seen by the requester while it waits, decided by a human
		"  progress: ESCALATED (deviations from standards need human review (allow_deviations is false): reason=browsers cannot hold agent keys standard=ed25519-only-auth)\n" +
			"  task status: ESCALATED (history VALIDATING > APPROVED > VALIDATING > ESCALATED)\n" +
			"  human reviewer approves: bearer tokens limited to the web console\n" +
			"  progress: APPROVED (architecture-101)\n" +
			"  response: approved, assigned_id architecture-101 (approved by a human reviewer: bearer tokens limited to the web console)\n",
		"  task status: COMPLETED (history VALIDATING > APPROVED > VALIDATING > ESCALATED > APPROVED > COMPLETED)\n",
		// 6. query: the reported design is in the catalogue
		"  3 relevant item(s)\n" +
			"  - design-101 design docs/design/new-feature.md (New Feature Design)\n" +
			"  - req-045 docs docs/requirements/authentication.md (Authentication requirements)\n" +
			"  - arch-001 architecture docs/architecture.md (Main architecture)\n",
		// 7. validate
		"  compliant: the change would be approved\n",
		"  non_compliant: 1 violation(s): an APPROVAL would be rejected\n  - target_exists: src/auth/missing.go does not exist\n",
		// 8-10. the registry's limits
		"  UNAUTHORIZED: policy code-completers does not allow agent copilot-2 to call capability librarian:approval (allowed_capabilities: librarian:query, librarian:validate)\n",
		"exceeds max_request_size 10KB of policy code-completers\n",
		"  query 1: answered, 1 relevant item(s)\n  query 2: answered, 1 relevant item(s)\n  query 3: answered, 1 relevant item(s)\n" +
			"  query 4: RATE_LIMITED: rate_limit 3/minute of policy default exceeded by unregistered-bot\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	steps := regexp.MustCompile(`(?m)^(\d+)\. `).FindAllStringSubmatch(got, -1)
	if len(steps) != 10 {
		t.Fatalf("%d steps, want 10:\n%s", len(steps), got)
	}
	for i, s := range steps {
		if want := strconv.Itoa(i + 1); s[1] != want {
			t.Errorf("step %d is numbered %s", i+1, s[1])
		}
	}
}

// TestPolicyNamesTheAgents checks that policy.json, loaded with the node
// package's loader, names each registered agent's id in its group.
func TestPolicyNamesTheAgents(t *testing.T) {
	p, err := node.LoadPolicy("policy.json")
	if err != nil {
		t.Fatal(err)
	}
	groups := map[string]string{claude: "code-generators", copilot: "code-completers", gemini: "reviewers"}
	for name, group := range groups {
		id, err := agentID(name)
		if err != nil {
			t.Fatal(err)
		}
		if members := p.Groups[group]; len(members) != 1 || members[0] != id.String() {
			t.Errorf("group %s is %v, want [%s] (%s)", group, members, id, name)
		}
	}
	if p.Default == nil || p.Default.RateLimit != "3/minute" {
		t.Errorf("default rule %+v, want rate_limit 3/minute for unregistered agents", p.Default)
	}
}
