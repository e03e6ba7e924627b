// Command team runs seed 004's team (an engineer, a QA engineer and a code
// reviewer on PR #456) as three nodes on loopback: notifications, sync and
// async requests, a direct message and a consensus vote. main.go plays
// the seven steps; team.go is the agents (what they offer, how they vote)
// and their start. See README.md.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
)

// mergeOptions are the choices of the merge vote on PR #456.
var mergeOptions = []string{"approve", "reject", "defer"}

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := run(ctx, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "team:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out io.Writer) error {
	t, err := startTeam(ctx)
	if err != nil {
		return err
	}
	defer t.Close()
	engineer, qa, reviewer, role := t.engineer, t.qa, t.reviewer, t.role

	// Subscriptions (seed 004's agent.Subscribe("pr.opened", ...)). Each
	// subscriber handles a notification once: delivery is at least once,
	// and duplicates are dropped by envelope id.
	got := make(chan string, 16)
	for _, sub := range []struct {
		a       *node.Node
		pattern string
	}{{qa, "pr.*"}, {qa, "pr-updates"}, {reviewer, "pr.opened"}, {engineer, "pr-updates"}} {
		var seen sync.Map
		cancel, err := sub.a.Subscribe(sub.pattern, func(m protocol.TopicMessage) {
			var n node.Notification
			if _, dup := seen.LoadOrStore(m.ID, true); !dup && json.Unmarshal(m.Payload, &n) == nil {
				got <- fmt.Sprintf("  %s notified on %s: %s from %s %s", role[sub.a.AgentID()], m.Topic, n.NotificationType, role[m.From], n.Payload)
			}
		})
		if err != nil {
			return err
		}
		defer cancel()
	}
	// notify publishes a notification and prints what the two teammates got.
	notify := func(from *node.Node, topic, typ, payload string, f *protocol.Filter) error {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		peers, err := from.SendNotification(pctx, topic, typ, json.RawMessage(payload), f)
		if err != nil {
			return fmt.Errorf("%s: %w", typ, err)
		}
		fmt.Fprintf(out, "  sent to %d topic peers\n", peers)
		var lines []string
		for len(lines) < 2 {
			select {
			case l := <-got:
				lines = append(lines, l)
			case <-pctx.Done():
				return fmt.Errorf("%s: %d of 2 teammates notified: %w", typ, len(lines), pctx.Err())
			}
		}
		slices.Sort(lines)
		fmt.Fprintln(out, strings.Join(lines, "\n"))
		return nil
	}

	fmt.Fprintln(out, "1. engineer opens PR #456 (notification pr_opened on pr.opened)")
	if err := notify(engineer, "pr.opened", "pr_opened", `{"pr_number":456,"bead_id":"bead-auth-feature","branch":"agent/bead-auth-feature/implement-jwt"}`, nil); err != nil {
		return err
	}

	fmt.Fprintln(out, "\n2. engineer -> qa: test_execution request (sync, timeout 30s)")
	res, err := engineer.SendRequest(ctx, qa.AgentID(), TestExecution, json.RawMessage(`{"test_pattern":"TestAuth*","framework":"go","revision":1}`), 30*time.Second)
	var r testResult
	if err == nil {
		err = json.Unmarshal(res, &r)
	}
	if err != nil {
		return fmt.Errorf("test_execution: %w", err)
	}
	fmt.Fprintf(out, "  qa -> engineer: revision 1: %s\n", r)

	fmt.Fprintln(out, "\n3. engineer -> qa: test_execution of revision 2 (async, callback)")
	done := make(chan error, 1)
	if err := engineer.SendRequestAsync(ctx, qa.AgentID(), TestExecution, json.RawMessage(`{"test_pattern":"TestAuth*","framework":"go","revision":2}`),
		30*time.Second, func(res json.RawMessage, err error) {
			if err == nil {
				err = json.Unmarshal(res, &r)
			}
			done <- err
		}); err != nil {
		return fmt.Errorf("test_execution: %w", err)
	}
	fmt.Fprintln(out, "  request sent; the engineer goes on working")
	if err := <-done; err != nil { // the callback runs within the request's 30 s
		return fmt.Errorf("test_execution: %w", err)
	}
	fmt.Fprintf(out, "  callback: revision 2: %s\n", r)

	fmt.Fprintln(out, "\n4. engineer -> qa: test_execution of TestSlow* (timeout 300ms)")
	_, err = engineer.SendRequest(ctx, qa.AgentID(), TestExecution, json.RawMessage(`{"test_pattern":"TestSlow*","framework":"go"}`), 300*time.Millisecond)
	fmt.Fprintf(out, "  %s\n", protocol.CodeOf(err))

	// A direct message that requires a response, delivered at least once:
	// the second send of the same message_id is not handled again.
	fmt.Fprintln(out, "\n5. reviewer -> engineer: agent_message, requires_response")
	var handled atomic.Int32
	engineer.OnMessage(func(_ context.Context, _ peer.ID, m protocol.AgentMessage) (json.RawMessage, error) {
		handled.Add(1)
		return json.Marshal(map[string]string{"subject": "Re: " + m.Subject, "body": "Done: slog instead of fmt.Println, and TestAuthTimeout fixed in revision 2."})
	})
	msg := protocol.AgentMessage{MessageID: "msg-review-" + protocol.NewID(), Subject: "Review comments on PR #456",
		Body:     "src/auth.go logs with fmt.Println; please use log/slog. TestAuthTimeout must pass before merging.",
		Priority: protocol.PriorityHigh, RequiresResponse: true,
		Context: json.RawMessage(`{"bead_id":"bead-auth-feature","files":["src/auth.go"],"action":"code_review"}`)}
	var answers [2]json.RawMessage
	for i := range answers {
		if answers[i], err = reviewer.SendMessage(ctx, engineer.AgentID(), msg, 5*time.Second); err != nil {
			return fmt.Errorf("agent_message: %w", err)
		}
	}
	var reply struct{ Subject, Body string }
	if err := json.Unmarshal(answers[0], &reply); err != nil {
		return err
	}
	t.commentsAnswered.Store(true)
	fmt.Fprintf(out, "  engineer -> reviewer: %s: %s\n", reply.Subject, reply.Body)
	fmt.Fprintf(out, "  sent twice: same answer %v, handled %d time(s)\n", string(answers[0]) == string(answers[1]), handled.Load())

	fmt.Fprintln(out, "\n6. reviewer approves PR #456 (notification pr_approved on pr-updates, personas engineer and qa-engineer)")
	if err := notify(reviewer, "pr-updates", "pr_approved", `{"pr_number":456,"bead_id":"bead-auth-feature","status":"approved"}`,
		&protocol.Filter{PersonaTypes: []string{"engineer", "qa-engineer"}}); err != nil {
		return err
	}

	fmt.Fprintln(out, "\n7. engineer asks the team: merge PR #456? (consensus, threshold 0.66)")
	result, err := engineer.Consensus(ctx, protocol.ConsensusRequest{Agents: []string{engineer.AgentID(), qa.AgentID(), reviewer.AgentID()},
		Question: "Merge PR #456 (auth module) into main?", Options: mergeOptions, Threshold: 0.66, Deadline: 10 * time.Second,
		Context: json.RawMessage(`{"bead_id":"bead-auth-feature","risk":"medium"}`)})
	if err != nil {
		return fmt.Errorf("consensus: %w", err)
	}
	for _, v := range result.Votes {
		// Each vote is its voter's signed response: check it offline.
		a, err := node.VerifyVote(v.Signed, v.Agent, mergeOptions)
		if err != nil {
			return fmt.Errorf("the vote of %s: %s %w", role[v.Agent], v.Error, err)
		}
		fmt.Fprintf(out, "  %s votes %s (confidence %.2f, %q): signed vote verified\n", role[v.Agent], a.Vote, a.Confidence, a.Rationale)
	}
	fmt.Fprintf(out, "  tally: approve %d, reject %d, defer %d\n", result.Tally["approve"], result.Tally["reject"], result.Tally["defer"])
	fmt.Fprintf(out, "  outcome: %s, decision %q (%d/%d >= %.0f%%)\n", result.Outcome, result.Decision,
		result.Tally[result.Decision], len(result.Votes), result.Threshold*100)
	if result.Outcome == protocol.OutcomeReached && result.Decision == "approve" {
		fmt.Fprintln(out, "\nengineer merges PR #456")
	}
	return nil
}
