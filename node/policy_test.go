package node_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/meshagent/meshagent/internal/meshtest"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
)

func TestParsePolicy(t *testing.T) {
	id := meshtest.ID(t, 1).String()
	for _, tc := range []struct {
		name, policy, err string
	}{
		{"empty", `{}`, ""},
		{"full", `{"groups":{"g":["` + id + `"]},"default":{"rate_limit":"60/minute"},
			"rules":[{"name":"r","groups":["g"],"rate_limit":"100/hour","burst":5,"max_request_size":"50KB","allowed_capabilities":["a","b:*"]}]}`, ""},
		{"size as bytes", `{"default":{"max_request_size":1024}}`, ""},
		{"all capabilities", `{"default":{"allowed_capabilities":["all"]}}`, ""},
		{"unknown field", `{"default":{"rate":"1/s"}}`, `unknown field "rate"`},
		{"bad rate", `{"default":{"rate_limit":"fast"}}`, `rate_limit "fast" must look like 100/hour`},
		{"bad period", `{"default":{"rate_limit":"5/week"}}`, `must look like 100/hour`},
		{"zero rate", `{"default":{"rate_limit":"0/s"}}`, `must look like`},
		{"burst alone", `{"default":{"burst":3}}`, `burst without rate_limit`},
		{"bad size", `{"default":{"max_request_size":"lots"}}`, `not a size`},
		{"negative size", `{"default":{"max_request_size":-1}}`, `not a positive size`},
		{"rule for nobody", `{"rules":[{"rate_limit":"1/s"}]}`, `rule 1 names no agents or groups`},
		{"default with agents", `{"default":{"agents":["` + id + `"]}}`, `takes no agents`},
		{"unknown group", `{"rules":[{"groups":["x"]}]}`, `unknown group "x"`},
		{"bad agent", `{"rules":[{"agents":["bob"]}]}`, `bob`},
		{"bad pattern", `{"default":{"allowed_capabilities":["a["]}}`, `bad pattern`},
		{"trailing data", `{} {}`, `trailing data`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := node.ParsePolicy([]byte(tc.policy))
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("error %v, want one containing %q", err, tc.err)
			}
		})
	}
}

// TestPolicy enforces a policy on two requesters and then changes it
// without a restart.
func TestPolicy(t *testing.T) {
	echo := func(name string) node.Service {
		return node.Service{Capability: protocol.Capability{Name: name}, Handler: node.EchoHandler()}
	}
	reviewer, stranger := meshtest.Node(t, 71), meshtest.Node(t, 72)
	policy := func(s string) *node.Policy {
		p, err := node.ParsePolicy([]byte(s))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	provider := meshtest.Node(t, 70, node.WithServices(echo("review"), echo("analyze:deep"), echo("deploy")),
		node.WithPolicy(policy(`{
			"groups": {"reviewers": ["`+reviewer.PublicKeyBase64()+`"]},
			"default": {"rate_limit": "2/minute", "allowed_capabilities": ["review"]},
			"rules": [{"name": "reviewers", "groups": ["reviewers"], "max_request_size": "1KB",
			           "allowed_capabilities": ["review", "analyze:*"]}]}`)))
	meshtest.Connect(t, reviewer, provider)
	meshtest.Connect(t, stranger, provider)
	call := func(from *node.Node, capability, params string) error {
		_, err := from.Call(meshtest.Context(t, 10*time.Second), protocol.CallRequest{To: provider.AgentID(), Action: capability, Params: json.RawMessage(params)})
		return err
	}
	want := func(err error, code protocol.Code, msg string) {
		t.Helper()
		pe := protocol.AsError(err)
		if err == nil || pe.Code != code || !strings.Contains(pe.Message, msg) {
			t.Fatalf("got %v, want %s mentioning %q", err, code, msg)
		}
	}

	// The reviewers' rule: its patterns, its size, no rate limit.
	for range 5 {
		if err := call(reviewer, "analyze:deep", `{}`); err != nil {
			t.Fatalf("reviewer analyze:deep: %v", err)
		}
	}
	want(call(reviewer, "deploy", `{}`), protocol.CodeUnauthorized, "policy reviewers does not allow")
	want(call(reviewer, "review", `{"text":"`+strings.Repeat("x", 2000)+`"}`), protocol.CodeRateLimited, "max_request_size 1KB of policy reviewers")

	// Everyone else: the default rule.
	want(call(stranger, "analyze:deep", `{}`), protocol.CodeUnauthorized, "policy default does not allow")
	// The refused call above took a token: one left of two.
	if err := call(stranger, "review", `{}`); err != nil {
		t.Fatalf("stranger review: %v", err)
	}
	want(call(stranger, "review", `{}`), protocol.CodeRateLimited, "rate_limit 2/minute of policy default")

	// A new policy takes effect at once.
	if err := provider.SetPolicy(policy(`{"default": {"allowed_capabilities": ["deploy"]}}`)); err != nil {
		t.Fatal(err)
	}
	if err := call(stranger, "deploy", `{}`); err != nil {
		t.Fatalf("stranger deploy after the change: %v", err)
	}
	want(call(reviewer, "review", `{}`), protocol.CodeUnauthorized, "policy default does not allow")
	if err := provider.SetPolicy(nil); err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"review", "deploy", "analyze:deep"} {
		if err := call(stranger, c, `{}`); err != nil {
			t.Errorf("without a policy, %s: %v", c, err)
		}
	}
}
