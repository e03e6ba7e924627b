package rpc_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/rpc"
)

// Tokens of the tests' tokens file.
const (
	adminToken  = "admin-token-0123456789"
	bridgeToken = "bridge-token-0123456789"
	meshToken   = "mesh-token-0123456789"
)

const testTokens = `{"tokens": [
  {"name": "ops", "token": "` + adminToken + `", "methods": ["admin"]},
  {"name": "bridge", "token": "` + bridgeToken + `", "topics": ["inbound:*", "agent:"]},
  {"name": "caller", "token": "` + meshToken + `", "methods": ["mesh.*"]}
]}`

func TestParseTokens(t *testing.T) {
	sum := sha256.Sum256([]byte(adminToken))
	good := `{"tokens":[{"name":"ops","sha256":"` + hex.EncodeToString(sum[:]) + `","methods":["admin"]}]}`
	if tk, err := rpc.ParseTokens([]byte(good)); err != nil || tk.Len() != 1 {
		t.Fatalf("a sha256 entry: %v", err)
	}
	for _, tc := range []struct{ name, file, want string }{
		{"not json", `{`, "not a JSON object"},
		{"array", `[]`, "not a JSON object"},
		{"unknown member", `{"tokens":[],"x":1}`, `unknown member "x"`},
		{"case-folded member", `{"TOKENS":[]}`, `unknown member "TOKENS"`},
		{"tokens not an array", `{"tokens":{}}`, "must be an array"},
		{"tokens missing", `{}`, "must be an array"},
		{"trailing data", `{"tokens":[]} {}`, "not a JSON object"},
		{"entry member", `{"tokens":[{"name":"a","token":"0123456789abcdef","Name":"b"}]}`, `unknown member "Name"`},
		{"name type", `{"tokens":[{"name":5,"token":"0123456789abcdef"}]}`, "token 0"},
		{"topics type", `{"tokens":[{"name":"a","token":"0123456789abcdef","topics":"inbound:*"}]}`, "token 0"},
		{"bad name", `{"tokens":[{"name":"a b","token":"0123456789abcdef"}]}`, `"name"`},
		{"duplicate name", `{"tokens":[{"name":"a","token":"0123456789abcdef"},{"name":"a","token":"0123456789abcdeg"}]}`, "used twice"},
		{"duplicate token", `{"tokens":[{"name":"a","token":"0123456789abcdef"},{"name":"b","token":"0123456789abcdef"}]}`, "given twice"},
		{"short token", `{"tokens":[{"name":"a","token":"short"}]}`, "16 to 512 bytes"},
		{"token with a space", `{"tokens":[{"name":"a","token":"0123456789 abcdef"}]}`, "printable ASCII"},
		{"both token and sha256", `{"tokens":[{"name":"a","token":"0123456789abcdef","sha256":"00"}]}`, "exactly one"},
		{"neither", `{"tokens":[{"name":"a"}]}`, "exactly one"},
		{"bad sha256", `{"tokens":[{"name":"a","sha256":"xyz"}]}`, "64 hex digits"},
		{"bad pattern", `{"tokens":[{"name":"a","token":"0123456789abcdef","topics":["inbound:["]}]}`, "malformed"},
		{"bad method", `{"tokens":[{"name":"a","token":"0123456789abcdef","methods":["mesh.["]}]}`, "not a method name"},
	} {
		_, err := rpc.ParseTokens([]byte(tc.file))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}

func TestCredentialGrants(t *testing.T) {
	c := &rpc.Credential{Name: "x", Methods: []string{"admin", "mesh.call"}, Topics: []string{"jobs.", "inbound:*"}}
	for m, want := range map[string]bool{"bus.history": true, "bus.replay": true, "mesh.call": true, "mesh.id": false, "admin": false} {
		if got := c.AllowsMethod(m); got != want {
			t.Errorf("AllowsMethod(%q) = %v", m, got)
		}
	}
	for topic, want := range map[string]bool{"jobs.1": true, "jobs.a/b": true, "inbound:1": true, "inbound:a/b": false, "outbound:1": false} {
		if got := c.AllowsTopic(topic); got != want {
			t.Errorf("AllowsTopic(%q) = %v", topic, got)
		}
	}
	var anon *rpc.Credential
	if anon.AllowsMethod("bus.history") || !anon.AllowsTopic("x") || !anon.AllowsPattern("*") {
		t.Error("a nil credential grants no method and every topic")
	}
}

// TestTokenTopicsMatchAsSubscribe: a token's topic patterns are matched
// by protocol.MatchTopic, the matcher of subscribe and of the mesh, on
// multi-level topics too; a subscription pattern is granted only when
// every topic it can receive is granted.
func TestTokenTopicsMatchAsSubscribe(t *testing.T) {
	grants := []string{"a.*", "jobs.", "inbound:chat-?", "team:[ab]x"}
	c := &rpc.Credential{Name: "x", Topics: grants}
	topics := []struct {
		topic string
		want  bool
	}{
		{"a.b", true},
		{"a.b.c", true}, // "*" crosses '.': subscribe's "a.*" receives it too
		{"a.b:c.d", true},
		{"a.", true},
		{"a", false},
		{"a/b", false},
		{"a.b/c", false}, // "*" never crosses '/'
		{"ab.c", false},
		{"jobs.1", true},
		{"jobs.x.y/z", true}, // a prefix grant takes everything after it
		{"jobs", false},
		{"inbound:chat-1", true},
		{"inbound:chat-12", false},
		{"inbound:chat-/", false},
		{"team:ax", true},
		{"team:cx", false},
	}
	for _, tc := range topics {
		if got := c.AllowsTopic(tc.topic); got != tc.want {
			t.Errorf("AllowsTopic(%q) = %v, want %v", tc.topic, got, tc.want)
		}
		matched := false
		for _, g := range grants {
			matched = matched || protocol.MatchTopic(g, tc.topic)
		}
		if matched != tc.want {
			t.Errorf("%q: the token says %v, the subscribe matcher %v", tc.topic, tc.want, matched)
		}
	}
	for _, tc := range []struct {
		pattern string
		want    bool
	}{
		{"a.*", true},
		{"a.b.*", true},
		{"a.*.c", true},
		{"a.?", true},
		{"a.b.c", true},
		{"a.b.", false},   // a prefix: it would take "a.b./x"
		{"a.[^x]", false}, // a class matches '/': it would take "a./"
		{`a.\*`, true},    // a literal '*'
		{`a.\/`, false},
		{"a.[a-z]*", true},
		{"a.[^/]", true},
		{"a.[.-0]", false}, // the range holds '/'
		{"a.[^a-z]", false},
		{"a.*/x", false},
		{"a*", false},
		{"*", false},
		{"jobs.", true},
		{"jobs.x.", true},
		{"jobs.*", true},
		{"jobs.[^x]/y", true},
		{"job", false},
		{"inbound:chat-?", true},
		{"inbound:chat-1", true},
		{"inbound:chat-*", false},
		{"team:[ab]x", true},
		{"team:[a-c]x", false},
	} {
		if got := c.AllowsPattern(tc.pattern); got != tc.want {
			t.Errorf("AllowsPattern(%q) = %v, want %v", tc.pattern, got, tc.want)
		}
	}
}

// FuzzAllowsPatternSound: a subscription pattern a credential grants
// receives no topic the credential does not grant.
func FuzzAllowsPatternSound(f *testing.F) {
	for _, s := range [][3]string{
		{"a.*", "a.[^x]", "a./"},
		{"a.*", "a.b.*", "a.b.c"},
		{"jobs.", "jobs.*", "jobs.1"},
		{"inbound:*", "inbound:?", "inbound:/"},
		{"x:y", "x:y", "x:y"},
	} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, grant, pattern, topic string) {
		c := &rpc.Credential{Name: "x", Topics: []string{grant}}
		if grant == "" || !protocol.ValidPattern(grant) || !protocol.ValidPattern(pattern) {
			return
		}
		if c.AllowsPattern(pattern) && protocol.MatchTopic(pattern, topic) && !c.AllowsTopic(topic) {
			t.Fatalf("grant %q allows pattern %q, which receives %q, a topic it does not allow", grant, pattern, topic)
		}
	})
}

// FuzzParseTokens: any input is a tokens set or an error, never a panic,
// and every token of a parsed set passes its own credential's checks.
func FuzzParseTokens(f *testing.F) {
	f.Add([]byte(testTokens))
	f.Add([]byte(`{"tokens":[{"name":"a","sha256":"` + strings.Repeat("0", 64) + `"}]}`))
	f.Add([]byte(`{"tokens":[{"name":"a","token":"0123456789abcdef","topics":["a:*","b."],"methods":["*"]}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		tk, err := rpc.ParseTokens(data)
		if err != nil {
			return
		}
		if tk.Len() > rpc.MaxTokens {
			t.Fatalf("%d tokens", tk.Len())
		}
	})
}

// BenchmarkAuthenticate1024 measures one upgrade's token check against a
// full tokens file (MaxTokens entries, each compared in constant time).
func BenchmarkAuthenticate1024(b *testing.B) {
	var sb strings.Builder
	sb.WriteString(`{"tokens":[`)
	for i := range rpc.MaxTokens {
		if i > 0 {
			sb.WriteString(",")
		}
		fmt.Fprintf(&sb, `{"name":"t%d","token":"token-%016d"}`, i, i)
	}
	sb.WriteString(`]}`)
	tk, err := rpc.ParseTokens([]byte(sb.String()))
	if err != nil {
		b.Fatal(err)
	}
	r := httptest.NewRequest(http.MethodGet, "/?token="+fmt.Sprintf("token-%016d", rpc.MaxTokens-1), nil)
	for b.Loop() {
		if _, err := tk.Authenticate(r); err != nil {
			b.Fatal(err)
		}
	}
}
