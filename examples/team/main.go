// Command team runs seed 004's team (an engineer, a QA engineer and a code
// reviewer on PR #456) as three nodes on loopback: notifications, sync and
// async requests, a direct message and a consensus vote. See README.md.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/pubsub"
	"github.com/meshagent/meshagent/sign"
)

// TestExecution is seed 004's request type for running tests, QA's
// capability; its schemas are seed 004's payloads plus a revision.
const (
	TestExecution = "test_execution"
	testInput     = `{"type":"object","required":["test_pattern","framework"],"properties":{
 "test_pattern":{"type":"string","minLength":1},"framework":{"enum":["go"]},
 "timeout_seconds":{"type":"integer","minimum":1},"revision":{"type":"integer","minimum":1}}}`
	testOutput = `{"type":"object","required":["tests_run","tests_passed","tests_failed","duration_ms","failures"],
 "properties":{"tests_run":{"type":"integer"},"tests_passed":{"type":"integer"},"tests_failed":{"type":"integer"},
 "duration_ms":{"type":"integer"},"failures":{"type":"array","items":{"type":"object","required":["test","error"]}}}}`
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

// testResult is test_execution's result.
type testResult struct {
	TestsRun    int `json:"tests_run"`
	TestsPassed int `json:"tests_passed"`
	TestsFailed int `json:"tests_failed"`
	DurationMS  int `json:"duration_ms"`
	Failures    []struct {
		Test  string `json:"test"`
		Error string `json:"error"`
	} `json:"failures"`
}

// String is how the engineer reports a run.
func (r testResult) String() string {
	s := fmt.Sprintf("%d run, %d passed, %d failed", r.TestsRun, r.TestsPassed, r.TestsFailed)
	for _, f := range r.Failures {
		s += fmt.Sprintf(" (%s: %s)", f.Test, f.Error)
	}
	return s
}

// runTests is QA's test_execution. Its fake suite has 15 TestAuth tests,
// and TestAuthTimeout fails before revision 2; TestSlow* never finishes.
// It records in passed whether the last run passed.
func runTests(passed *atomic.Bool) node.HandlerFunc {
	return func(ctx context.Context, c *node.Call) (json.RawMessage, error) {
		var p struct {
			TestPattern string `json:"test_pattern"`
			Revision    int    `json:"revision"`
		}
		if err := json.Unmarshal(c.Request.Params, &p); err != nil { // the schema checked the types
			return nil, err
		}
		if strings.HasPrefix(p.TestPattern, "TestSlow") {
			<-ctx.Done() // the caller's timeout passes first
			return nil, ctx.Err()
		}
		if p.Revision < 2 {
			passed.Store(false)
			return json.RawMessage(`{"tests_run":15,"tests_passed":14,"tests_failed":1,"duration_ms":2340,
				"failures":[{"test":"TestAuthTimeout","error":"timeout exceeded"}]}`), nil
		}
		passed.Store(true)
		return json.RawMessage(`{"tests_run":15,"tests_passed":15,"tests_failed":0,"duration_ms":2210,"failures":[]}`), nil
	}
}

// voter is a consensus.vote service: it votes yes once ok holds, else no.
func voter(ok *atomic.Bool, yes, no protocol.VoteAnswer) node.Service {
	return node.Service{Capability: protocol.Capability{Name: protocol.ConsensusCapability, Description: "votes on team decisions"},
		Handler: node.HandlerFunc(func(context.Context, *node.Call) (json.RawMessage, error) {
			if ok.Load() {
				return json.Marshal(yes)
			}
			return json.Marshal(no)
		})}
}

// newAgent starts one agent of the team on loopback.
func newAgent(role, persona string, bootstrap []ma.Multiaddr, services ...node.Service) (*node.Node, error) {
	k, err := sign.GenerateKey()
	if err != nil {
		return nil, err
	}
	return node.New(node.WithIdentity(k), node.WithName(role), node.WithListenAddrs(ma.StringCast("/ip4/127.0.0.1/tcp/0")),
		node.WithMDNS(false), node.WithDHT(false), node.WithLogger(slog.New(slog.DiscardHandler)),
		node.WithBootstrap(bootstrap...), node.WithServices(services...),
		node.WithPresence(node.Presence{Interval: time.Second, PersonaType: persona}),
		// A broadcast goes out once both teammates listen on its topic.
		node.WithPubSubOptions(pubsub.WithMinPeers(2)))
}

func run(ctx context.Context, out io.Writer) error {
	var testsPassed, commentsAnswered atomic.Bool // what QA's and the reviewer's votes depend on
	qa, err := newAgent("qa", "qa-engineer", nil,
		node.Service{Capability: protocol.Capability{Name: TestExecution, Description: "runs a test suite",
			InputSchema: json.RawMessage(testInput), OutputSchema: json.RawMessage(testOutput)}, Handler: runTests(&testsPassed)},
		voter(&testsPassed, protocol.VoteAnswer{Vote: "approve", Rationale: "all 15 auth tests pass", Confidence: 0.8},
			protocol.VoteAnswer{Vote: "reject", Rationale: "tests fail", Confidence: 0.8}))
	if err != nil {
		return err
	}
	defer qa.Close()
	reviewer, err := newAgent("reviewer", "code-reviewer", qa.Addrs(), voter(&commentsAnswered,
		protocol.VoteAnswer{Vote: "approve", Rationale: "review comments addressed", Confidence: 0.85},
		protocol.VoteAnswer{Vote: "defer", Rationale: "review comments open", Confidence: 0.85}))
	if err != nil {
		return err
	}
	defer reviewer.Close()
	fixed := protocol.VoteAnswer{Vote: "approve", Rationale: "the fix is in revision 2", Confidence: 0.9}
	engineer, err := newAgent("engineer", "engineer", append(qa.Addrs(), reviewer.Addrs()...), voter(&testsPassed, fixed, fixed))
	if err != nil {
		return err
	}
	defer engineer.Close()
	team := []*node.Node{engineer, qa, reviewer}
	role := map[string]string{engineer.AgentID(): "engineer", qa.AgentID(): "qa", reviewer.AgentID(): "reviewer"}
	for _, a := range team { // every agent has the others' signed hello
		for _, b := range team {
			if a == b {
				continue
			}
			if _, err := a.WaitHello(ctx, b.ID()); err != nil {
				return fmt.Errorf("%s has no hello from %s: %w", role[a.AgentID()], role[b.AgentID()], err)
			}
		}
	}

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
	commentsAnswered.Store(true)
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
