package main

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"
	"time"
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
		// 1. notification to the two subscribers of pr.opened
		"1. engineer opens PR #456 (notification pr_opened on pr.opened)\n  sent to 2 topic peers\n",
		`  qa notified on pr.opened: pr_opened from engineer {"bead_id":"bead-auth-feature","branch":"agent/bead-auth-feature/implement-jwt","pr_number":456}`,
		`  reviewer notified on pr.opened: pr_opened from engineer {"bead_id":"bead-auth-feature"`,
		// 2-4. request/response: sync, async, timeout
		"  qa -> engineer: revision 1: 15 run, 14 passed, 1 failed (TestAuthTimeout: timeout exceeded)\n",
		"  callback: revision 2: 15 run, 15 passed, 0 failed\n",
		"4. engineer -> qa: test_execution of TestSlow* (timeout 300ms)\n  TIMEOUT\n",
		// 5. direct message with a response, deduplicated
		"  engineer -> reviewer: Re: Review comments on PR #456: Done:",
		": same answer true, handled 1 time(s)\n",
		// 6. filtered broadcast
		`  engineer notified on pr-updates: pr_approved from reviewer {"bead_id":"bead-auth-feature","pr_number":456,"status":"approved"}`,
		`  qa notified on pr-updates: pr_approved from reviewer {"bead_id":"bead-auth-feature","pr_number":456,"status":"approved"}`,
		// 7. consensus with signed votes
		`  engineer votes approve (confidence 0.90, "the fix is in revision 2"): signed vote verified`,
		`  qa votes approve (confidence 0.80, "all 15 auth tests pass"): signed vote verified`,
		`  reviewer votes approve (confidence 0.85, "review comments addressed"): signed vote verified`,
		"  tally: approve 3, reject 0, defer 0\n",
		`  outcome: reached, decision "approve" (3/3 >= 66%)`,
		"engineer merges PR #456\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	// Each notification reached each subscriber exactly once.
	for _, line := range []string{"qa notified on pr.opened", "reviewer notified on pr.opened", "engineer notified on pr-updates", "qa notified on pr-updates"} {
		if n := strings.Count(got, line); n != 1 {
			t.Errorf("%q appears %d times", line, n)
		}
	}
	if strings.Contains(got, "reviewer notified on pr-updates") {
		t.Error("the reviewer was notified of its own approval")
	}
	// The steps come in order.
	steps := regexp.MustCompile(`(?m)^(\d)\. `).FindAllStringSubmatch(got, -1)
	if len(steps) != 7 {
		t.Fatalf("%d steps, want 7:\n%s", len(steps), got)
	}
	for i, s := range steps {
		if s[1] != string(rune('1'+i)) {
			t.Errorf("step %d is numbered %s", i+1, s[1])
		}
	}
}
