// Command team runs seed 004's team of agents as three nodes in one process
// on loopback: an engineer, a QA engineer and a code reviewer working on
// PR #456. It shows, printing each step, a notification broadcast on a
// topic (pr_opened, later pr_approved with a persona filter), a synchronous
// test_execution request with a timeout and an asynchronous one with a
// callback, a request that outlives its timeout (TIMEOUT), a direct
// agent_message that requires a response (sent twice with the same
// message_id: processed once), and a consensus vote among the three on
// merging, each signed vote checked offline with node.VerifyVote.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
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

// Topics of seed 004's event-driven notifications.
const (
	topicOpened   = "pr.opened"  // seed 004: agent.Subscribe("pr.opened", ...)
	topicApproved = "pr-updates" // seed 004, example 3: the reviewer's broadcast
)

// TestExecution is seed 004's request type for running tests, offered by QA
// as a capability.
const TestExecution = "test_execution"

// testInput is the input schema of test_execution (seed 004's request
// payload, plus the revision to test).
const testInput = `{
  "type": "object",
  "required": ["test_pattern", "framework"],
  "properties": {
    "test_pattern": {"type": "string", "minLength": 1},
    "framework": {"type": "string", "enum": ["go"]},
    "timeout_seconds": {"type": "integer", "minimum": 1},
    "revision": {"type": "integer", "minimum": 1}
  }
}`

// testOutput is the output schema of test_execution (seed 004's response
// payload).
const testOutput = `{
  "type": "object",
  "required": ["tests_run", "tests_passed", "tests_failed", "duration_ms", "failures"],
  "properties": {
    "tests_run": {"type": "integer"},
    "tests_passed": {"type": "integer"},
    "tests_failed": {"type": "integer"},
    "duration_ms": {"type": "integer"},
    "failures": {"type": "array", "items": {
      "type": "object", "required": ["test", "error"],
      "properties": {"test": {"type": "string"}, "error": {"type": "string"}}
    }}
  }
}`

// prNumber is the pull request the team works on.
const prNumber = 456

// mergeOptions are the choices of the merge vote.
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
	TestsRun    int       `json:"tests_run"`
	TestsPassed int       `json:"tests_passed"`
	TestsFailed int       `json:"tests_failed"`
	DurationMS  int       `json:"duration_ms"`
	Failures    []failure `json:"failures"`
}

type failure struct {
	Test  string `json:"test"`
	Error string `json:"error"`
}

func (r testResult) String() string {
	s := fmt.Sprintf("%d run, %d passed, %d failed", r.TestsRun, r.TestsPassed, r.TestsFailed)
	for _, f := range r.Failures {
		s += fmt.Sprintf(" (%s: %s)", f.Test, f.Error)
	}
	return s
}

// qaAgent runs the tests. Its fake suite has 15 TestAuth tests, and
// TestAuthTimeout fails before revision 2. TestSlow* never finishes.
type qaAgent struct {
	lastPassed atomic.Bool // the last run of the suite passed
}

func (q *qaAgent) runTests(ctx context.Context, c *node.Call) (json.RawMessage, error) {
	var p struct {
		TestPattern string `json:"test_pattern"`
		Revision    int    `json:"revision"`
	}
	if err := json.Unmarshal(c.Request.Params, &p); err != nil {
		return nil, fmt.Errorf("decode params: %w", err)
	}
	if strings.HasPrefix(p.TestPattern, "TestSlow") {
		<-ctx.Done() // the caller's timeout passes first
		return nil, ctx.Err()
	}
	r := testResult{TestsRun: 15, TestsPassed: 15, DurationMS: 2340, Failures: []failure{}}
	if p.Revision < 2 {
		r.TestsPassed, r.TestsFailed = 14, 1
		r.Failures = append(r.Failures, failure{Test: "TestAuthTimeout", Error: "timeout exceeded"})
	}
	q.lastPassed.Store(r.TestsFailed == 0)
	return json.Marshal(r)
}

// voter is a consensus.vote service whose answer decide computes.
func voter(decide func() protocol.VoteAnswer) node.Service {
	return node.Service{
		Capability: protocol.Capability{Name: protocol.ConsensusCapability, Description: "votes on team decisions"},
		Handler: node.HandlerFunc(func(_ context.Context, c *node.Call) (json.RawMessage, error) {
			var req protocol.VoteRequest
			if err := json.Unmarshal(c.Request.Params, &req); err != nil {
				return nil, fmt.Errorf("decode vote request: %w", err)
			}
			return json.Marshal(decide())
		}),
	}
}

// received is a notification as a subscriber saw it.
type received struct {
	role string
	m    protocol.TopicMessage
	n    node.Notification
}

// subscribe has role's agent handle notifications on pattern once each
// (delivery is at least once: duplicates are dropped by envelope id) and
// pass them to got.
func subscribe(a *node.Node, role, pattern string, got chan<- received) (func(), error) {
	var mu sync.Mutex
	seen := map[string]bool{}
	return a.Subscribe(pattern, func(m protocol.TopicMessage) {
		mu.Lock()
		dup := seen[m.ID]
		seen[m.ID] = true
		mu.Unlock()
		var n node.Notification
		if dup || json.Unmarshal(m.Payload, &n) != nil {
			return
		}
		got <- received{role: role, m: m, n: n}
	})
}

// newAgent starts one agent of the team on loopback.
func newAgent(role, persona string, bootstrap []ma.Multiaddr, services ...node.Service) (*node.Node, error) {
	k, err := sign.GenerateKey()
	if err != nil {
		return nil, err
	}
	n, err := node.New(node.WithIdentity(k), node.WithName(role), node.WithListenAddrs(ma.StringCast("/ip4/127.0.0.1/tcp/0")),
		node.WithMDNS(false), node.WithDHT(false), node.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
		node.WithBootstrap(bootstrap...), node.WithServices(services...),
		node.WithPresence(node.Presence{Interval: time.Second, PersonaType: persona}),
		// A broadcast goes out once both teammates listen on its topic.
		node.WithPubSubOptions(pubsub.WithMinPeers(2)))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", role, err)
	}
	return n, nil
}

func run(ctx context.Context, out io.Writer) (err error) {
	qa := &qaAgent{}
	var messageAnswered atomic.Bool // the reviewer's comments got an answer
	var closers []func() error
	defer func() {
		for i := len(closers) - 1; i >= 0; i-- {
			err = errors.Join(err, closers[i]())
		}
	}()

	qaNode, err := newAgent("qa", "qa-engineer", nil,
		node.Service{Capability: protocol.Capability{Name: TestExecution, Description: "runs a test suite",
			InputSchema: json.RawMessage(testInput), OutputSchema: json.RawMessage(testOutput)}, Handler: node.HandlerFunc(qa.runTests)},
		voter(func() protocol.VoteAnswer {
			if qa.lastPassed.Load() {
				return protocol.VoteAnswer{Vote: "approve", Rationale: "all 15 auth tests pass", Confidence: 0.8}
			}
			return protocol.VoteAnswer{Vote: "reject", Rationale: "tests fail", Confidence: 0.8}
		}))
	if err != nil {
		return err
	}
	closers = append(closers, qaNode.Close)
	reviewer, err := newAgent("reviewer", "code-reviewer", qaNode.Addrs(), voter(func() protocol.VoteAnswer {
		if messageAnswered.Load() {
			return protocol.VoteAnswer{Vote: "approve", Rationale: "review comments addressed", Confidence: 0.85}
		}
		return protocol.VoteAnswer{Vote: "defer", Rationale: "review comments open", Confidence: 0.85}
	}))
	if err != nil {
		return err
	}
	closers = append(closers, reviewer.Close)
	engineer, err := newAgent("engineer", "engineer", append(qaNode.Addrs(), reviewer.Addrs()...), voter(func() protocol.VoteAnswer {
		return protocol.VoteAnswer{Vote: "approve", Rationale: "the fix is in revision 2", Confidence: 0.9}
	}))
	if err != nil {
		return err
	}
	closers = append(closers, engineer.Close)
	agents := map[string]*node.Node{"engineer": engineer, "qa": qaNode, "reviewer": reviewer}
	role := map[string]string{}
	for _, r := range []string{"engineer", "qa", "reviewer"} {
		role[agents[r].AgentID()] = r
		fmt.Fprintf(out, "%-8s %s\n", r+":", agents[r].AgentID())
	}
	// Every agent has the others' signed hello.
	for _, a := range agents {
		for _, b := range agents {
			if a == b {
				continue
			}
			if _, err := a.WaitHello(ctx, b.ID()); err != nil {
				return fmt.Errorf("%s has no hello from %s: %w", role[a.AgentID()], role[b.AgentID()], err)
			}
		}
	}

	// Subscriptions (seed 004's agent.Subscribe("pr.opened", ...)).
	got := make(chan received, 16)
	for _, s := range []struct {
		a             *node.Node
		role, pattern string
	}{{qaNode, "qa", "pr.*"}, {qaNode, "qa", topicApproved}, {reviewer, "reviewer", topicOpened}, {engineer, "engineer", topicApproved}} {
		cancel, err := subscribe(s.a, s.role, s.pattern, got)
		if err != nil {
			return fmt.Errorf("%s subscribes to %s: %w", s.role, s.pattern, err)
		}
		closers = append(closers, func() error { cancel(); return nil })
	}
	await := func(want int) ([]received, error) {
		var rs []received
		for len(rs) < want {
			select {
			case r := <-got:
				rs = append(rs, r)
			case <-ctx.Done():
				return nil, fmt.Errorf("%d of %d notifications arrived: %w", len(rs), want, ctx.Err())
			}
		}
		// Print in a stable order.
		order := map[string]int{"engineer": 0, "qa": 1, "reviewer": 2}
		if len(rs) == 2 && order[rs[0].role] > order[rs[1].role] {
			rs[0], rs[1] = rs[1], rs[0]
		}
		return rs, nil
	}
	printNotified := func(rs []received) {
		for _, r := range rs {
			fmt.Fprintf(out, "  %s notified on %s: %s from %s %s\n", r.role, r.m.Topic, r.n.NotificationType, role[r.m.From], r.n.Payload)
		}
	}

	// 1. The engineer opens the PR: a notification, no response expected.
	step := func(n int, s string) { fmt.Fprintf(out, "\n%d. %s\n", n, s) }
	step(1, "engineer opens PR #456 (notification pr_opened on "+topicOpened+")")
	pubCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	peers, err := engineer.SendNotification(pubCtx, topicOpened, "pr_opened",
		json.RawMessage(fmt.Sprintf(`{"pr_number":%d,"bead_id":"bead-auth-feature","branch":"agent/bead-auth-feature/implement-jwt"}`, prNumber)), nil)
	cancel()
	if err != nil {
		return fmt.Errorf("pr_opened: %w", err)
	}
	fmt.Fprintf(out, "  sent to %d topic peers\n", peers)
	rs, err := await(2)
	if err != nil {
		return err
	}
	printNotified(rs)

	// 2. Synchronous request with a timeout: QA runs the tests.
	step(2, "engineer -> qa: test_execution request (sync, timeout 30s)")
	res, err := engineer.SendRequest(ctx, qaNode.AgentID(), TestExecution,
		json.RawMessage(`{"test_pattern":"TestAuth*","framework":"go","timeout_seconds":300,"revision":1}`), 30*time.Second)
	if err != nil {
		return fmt.Errorf("test_execution: %w", err)
	}
	var r testResult
	if err := json.Unmarshal(res, &r); err != nil {
		return fmt.Errorf("decode test results: %w", err)
	}
	fmt.Fprintf(out, "  qa -> engineer: revision 1: %s\n", r)

	// 3. The engineer fixes TestAuthTimeout; an asynchronous request.
	step(3, "engineer -> qa: test_execution of revision 2 (async, callback)")
	done := make(chan error, 1)
	if err := engineer.SendRequestAsync(ctx, qaNode.AgentID(), TestExecution,
		json.RawMessage(`{"test_pattern":"TestAuth*","framework":"go","timeout_seconds":300,"revision":2}`), 30*time.Second,
		func(res json.RawMessage, err error) {
			if err == nil {
				err = json.Unmarshal(res, &r)
			}
			done <- err
		}); err != nil {
		return fmt.Errorf("test_execution: %w", err)
	}
	fmt.Fprintln(out, "  request sent; the engineer goes on working")
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("test_execution: %w", err)
		}
	case <-ctx.Done():
		return fmt.Errorf("no test results: %w", ctx.Err())
	}
	fmt.Fprintf(out, "  callback: revision 2: %s\n", r)

	// 4. A request that takes longer than its timeout.
	step(4, "engineer -> qa: test_execution of TestSlow* (timeout 300ms)")
	_, err = engineer.SendRequest(ctx, qaNode.AgentID(), TestExecution, json.RawMessage(`{"test_pattern":"TestSlow*","framework":"go"}`), 300*time.Millisecond)
	if protocol.CodeOf(err) != protocol.CodeTimeout {
		return fmt.Errorf("a request past its timeout ended with %v, not TIMEOUT", err)
	}
	fmt.Fprintf(out, "  %s\n", protocol.CodeOf(err))

	// 5. A direct message that requires a response, delivered at least
	// once: the second send of the same message_id is not processed again.
	step(5, "reviewer -> engineer: agent_message, requires_response")
	var handled atomic.Int32
	engineer.OnMessage(func(_ context.Context, from peer.ID, m protocol.AgentMessage) (json.RawMessage, error) {
		handled.Add(1)
		return json.Marshal(map[string]string{
			"subject": "Re: " + m.Subject,
			"body":    "Done: slog instead of fmt.Println, and TestAuthTimeout fixed in revision 2.",
		})
	})
	msg := protocol.AgentMessage{
		MessageID:        "msg-review-" + protocol.NewID(),
		Subject:          fmt.Sprintf("Review comments on PR #%d", prNumber),
		Body:             "src/auth.go logs with fmt.Println; please use log/slog. TestAuthTimeout must pass before merging.",
		Priority:         protocol.PriorityHigh,
		RequiresResponse: true,
		Context:          json.RawMessage(`{"bead_id":"bead-auth-feature","files":["src/auth.go","src/auth_test.go"],"action":"code_review"}`),
	}
	var answers [2]json.RawMessage
	for i := range answers {
		if answers[i], err = reviewer.SendMessage(ctx, engineer.AgentID(), msg, 5*time.Second); err != nil {
			return fmt.Errorf("agent_message: %w", err)
		}
	}
	var reply struct{ Subject, Body string }
	if err := json.Unmarshal(answers[0], &reply); err != nil {
		return fmt.Errorf("decode the engineer's answer: %w", err)
	}
	messageAnswered.Store(true)
	fmt.Fprintf(out, "  engineer -> reviewer: %s: %s\n", reply.Subject, reply.Body)
	fmt.Fprintf(out, "  sent twice as %s: same answer %v, handled %d time(s)\n", msg.MessageID, string(answers[0]) == string(answers[1]), handled.Load())

	// 6. The reviewer approves: a broadcast filtered to the engineer and QA personas.
	step(6, "reviewer approves PR #456 (notification pr_approved on "+topicApproved+", personas engineer and qa-engineer)")
	pubCtx, cancel = context.WithTimeout(ctx, 10*time.Second)
	peers, err = reviewer.SendNotification(pubCtx, topicApproved, "pr_approved",
		json.RawMessage(fmt.Sprintf(`{"pr_number":%d,"bead_id":"bead-auth-feature","status":"approved"}`, prNumber)),
		&protocol.Filter{PersonaTypes: []string{"engineer", "qa-engineer"}})
	cancel()
	if err != nil {
		return fmt.Errorf("pr_approved: %w", err)
	}
	fmt.Fprintf(out, "  sent to %d topic peers\n", peers)
	if rs, err = await(2); err != nil {
		return err
	}
	printNotified(rs)

	// 7. Consensus on merging among the three.
	step(7, "engineer asks the team: merge PR #456? (consensus, threshold 0.66)")
	result, err := engineer.Consensus(ctx, protocol.ConsensusRequest{
		Agents:    []string{engineer.AgentID(), qaNode.AgentID(), reviewer.AgentID()},
		Question:  fmt.Sprintf("Merge PR #%d (auth module) into main?", prNumber),
		Options:   mergeOptions,
		Threshold: 0.66,
		Deadline:  10 * time.Second,
		Context:   json.RawMessage(`{"bead_id":"bead-auth-feature","risk":"medium"}`),
	})
	if err != nil {
		return fmt.Errorf("consensus: %w", err)
	}
	for _, v := range result.Votes {
		if v.Error != "" {
			fmt.Fprintf(out, "  %s: no vote: %s\n", role[v.Agent], v.Error)
			continue
		}
		a, err := node.VerifyVote(v.Signed, v.Agent, mergeOptions)
		if err != nil {
			return fmt.Errorf("the vote of %s does not verify: %w", role[v.Agent], err)
		}
		fmt.Fprintf(out, "  %s votes %s (confidence %.2f, %q): signed vote verified\n", role[v.Agent], a.Vote, a.Confidence, a.Rationale)
	}
	var tally []string
	for _, o := range mergeOptions {
		tally = append(tally, fmt.Sprintf("%s %d", o, result.Tally[o]))
	}
	fmt.Fprintf(out, "  tally: %s\n", strings.Join(tally, ", "))
	fmt.Fprintf(out, "  outcome: %s, decision %q (%d/%d >= %.0f%%)\n", result.Outcome, result.Decision,
		result.Tally[result.Decision], len(result.Votes), result.Threshold*100)
	if result.Outcome == protocol.OutcomeReached && result.Decision == "approve" {
		fmt.Fprintf(out, "\nengineer merges PR #%d\n", prNumber)
	}
	return nil
}
