package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

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

// team is the three agents, started and introduced to each other.
type team struct {
	engineer, qa, reviewer *node.Node
	role                   map[string]string // agent id -> role
	// What QA's and the reviewer's votes depend on.
	testsPassed, commentsAnswered atomic.Bool
}

// startTeam starts QA (test_execution), the reviewer and the engineer,
// each with its consensus.vote, and waits until every agent has the
// others' signed hello.
func startTeam(ctx context.Context) (_ *team, err error) {
	t := &team{}
	defer func() {
		if err != nil {
			err = errors.Join(err, t.Close())
		}
	}()
	t.qa, err = newAgent("qa", "qa-engineer", nil,
		node.Service{Capability: protocol.Capability{Name: TestExecution, Description: "runs a test suite",
			InputSchema: json.RawMessage(testInput), OutputSchema: json.RawMessage(testOutput)}, Handler: runTests(&t.testsPassed)},
		voter(&t.testsPassed, protocol.VoteAnswer{Vote: "approve", Rationale: "all 15 auth tests pass", Confidence: 0.8},
			protocol.VoteAnswer{Vote: "reject", Rationale: "tests fail", Confidence: 0.8}))
	if err != nil {
		return nil, err
	}
	t.reviewer, err = newAgent("reviewer", "code-reviewer", t.qa.Addrs(), voter(&t.commentsAnswered,
		protocol.VoteAnswer{Vote: "approve", Rationale: "review comments addressed", Confidence: 0.85},
		protocol.VoteAnswer{Vote: "defer", Rationale: "review comments open", Confidence: 0.85}))
	if err != nil {
		return nil, err
	}
	fixed := protocol.VoteAnswer{Vote: "approve", Rationale: "the fix is in revision 2", Confidence: 0.9}
	t.engineer, err = newAgent("engineer", "engineer", append(t.qa.Addrs(), t.reviewer.Addrs()...), voter(&t.testsPassed, fixed, fixed))
	if err != nil {
		return nil, err
	}
	all := []*node.Node{t.engineer, t.qa, t.reviewer}
	t.role = map[string]string{t.engineer.AgentID(): "engineer", t.qa.AgentID(): "qa", t.reviewer.AgentID(): "reviewer"}
	for _, a := range all {
		for _, b := range all {
			if a == b {
				continue
			}
			if _, err := a.WaitHello(ctx, b.ID()); err != nil {
				return nil, fmt.Errorf("%s has no hello from %s: %w", t.role[a.AgentID()], t.role[b.AgentID()], err)
			}
		}
	}
	return t, nil
}

// Close stops the agents started.
func (t *team) Close() error {
	var errs []error
	for _, n := range []*node.Node{t.engineer, t.reviewer, t.qa} {
		if n != nil {
			errs = append(errs, n.Close())
		}
	}
	return errors.Join(errs...)
}
