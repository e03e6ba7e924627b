package node

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/sign"
)

// Policy sets, per requester agent or group, what other agents may ask of
// this one: seed 003's agent registry (rate_limit, max_request_size,
// allowed_targets), in JSON. It comes on top of Limits and the
// capabilities' authorized_requester_ids: a request must pass all of them.
//
//	{
//	  "groups": {"reviewers": ["12D3KooW…", "<base64 key>"]},
//	  "default": {"rate_limit": "60/minute"},
//	  "rules": [
//	    {"name": "reviewers", "groups": ["reviewers"], "rate_limit": "100/hour",
//	     "max_request_size": "50KB", "allowed_capabilities": ["review", "analyze:*"]},
//	    {"name": "ci", "agents": ["12D3KooW…"], "allowed_capabilities": ["run_tests"]}
//	  ]
//	}
//
// A requester gets the first rule naming it (directly or through a group),
// else the default rule, else no policy limits. Fields a rule leaves out do
// not restrict. rate_limit is "N/second", "N/minute", "N/hour" or "N/day",
// a token bucket holding N (burst overrides it); max_request_size is bytes,
// or a number with B, KB or MB (1024-based); allowed_capabilities are
// capability names or path.Match patterns, "*" (or seed 003's "all")
// allowing any. A request over a limit is answered RATE_LIMITED, a
// capability not allowed UNAUTHORIZED, each naming the rule and the limit.
type Policy struct {
	Groups  map[string][]string `json:"groups,omitempty"`
	Default *PolicyRule         `json:"default,omitempty"`
	Rules   []PolicyRule        `json:"rules,omitempty"`
}

// PolicyRule is one entry of a Policy.
type PolicyRule struct {
	// Name labels the rule in errors; default "rule <n>" or "default".
	Name   string   `json:"name,omitempty"`
	Agents []string `json:"agents,omitempty"`
	Groups []string `json:"groups,omitempty"`
	// RateLimit is "N/second|minute|hour|day".
	RateLimit string `json:"rate_limit,omitempty"`
	// Burst is the bucket size; default N of RateLimit.
	Burst int `json:"burst,omitempty"`
	// MaxRequestSize bounds a signed request: 1024, "50KB", "1MB".
	MaxRequestSize json.RawMessage `json:"max_request_size,omitempty"`
	// AllowedCapabilities lists capability names or patterns; absent
	// means any.
	AllowedCapabilities []string `json:"allowed_capabilities,omitempty"`
}

// maxPolicyFile bounds a policy file.
const maxPolicyFile = 1 << 20

// LoadPolicy reads and checks a policy file.
func LoadPolicy(file string) (*Policy, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxPolicyFile+1))
	if err != nil {
		return nil, fmt.Errorf("policy: read %s: %w", file, err)
	}
	if len(data) > maxPolicyFile {
		return nil, fmt.Errorf("policy: %s is larger than %d bytes", file, maxPolicyFile)
	}
	p, err := ParsePolicy(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return p, nil
}

// ParsePolicy decodes a policy strictly (unknown fields are errors, so a
// typo never drops a limit) and checks it.
func ParsePolicy(data []byte) (*Policy, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var p Policy
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	if dec.More() {
		return nil, errors.New("policy: trailing data after the JSON object")
	}
	if _, err := compilePolicy(&p); err != nil {
		return nil, err
	}
	return &p, nil
}

// compiledPolicy is a Policy ready for the request path.
type compiledPolicy struct {
	byAgent map[peer.ID]*policyRule
	dflt    *policyRule
}

// policyRule is a compiled PolicyRule with its own token buckets.
type policyRule struct {
	name     string
	rate     string // as written, for messages
	limiter  *rateLimiters
	maxBytes int
	sizeText string
	allowed  []string // nil: any
}

func compilePolicy(p *Policy) (*compiledPolicy, error) {
	if p == nil {
		return nil, nil
	}
	groups := map[string][]peer.ID{}
	for g, members := range p.Groups {
		for _, m := range members {
			id, err := sign.ParseAgentID(m)
			if err != nil {
				return nil, fmt.Errorf("policy: group %q: %w", g, err)
			}
			groups[g] = append(groups[g], id)
		}
	}
	cp := &compiledPolicy{byAgent: map[peer.ID]*policyRule{}}
	if p.Default != nil {
		if len(p.Default.Agents)+len(p.Default.Groups) > 0 {
			return nil, errors.New("policy: the default rule applies to everyone; it takes no agents or groups")
		}
		r, err := compileRule(*p.Default, "default")
		if err != nil {
			return nil, err
		}
		cp.dflt = r
	}
	for i, pr := range p.Rules {
		label := pr.Name
		if label == "" {
			label = "rule " + strconv.Itoa(i+1)
		}
		if len(pr.Agents)+len(pr.Groups) == 0 {
			return nil, fmt.Errorf("policy: %s names no agents or groups (use \"default\" for everyone)", label)
		}
		r, err := compileRule(pr, label)
		if err != nil {
			return nil, err
		}
		var ids []peer.ID
		for _, a := range pr.Agents {
			id, err := sign.ParseAgentID(a)
			if err != nil {
				return nil, fmt.Errorf("policy: %s: %w", label, err)
			}
			ids = append(ids, id)
		}
		for _, g := range pr.Groups {
			members, ok := groups[g]
			if !ok {
				return nil, fmt.Errorf("policy: %s: unknown group %q", label, g)
			}
			ids = append(ids, members...)
		}
		for _, id := range ids {
			if _, taken := cp.byAgent[id]; !taken { // the first rule naming an agent wins
				cp.byAgent[id] = r
			}
		}
	}
	return cp, nil
}

var ratePeriods = map[string]time.Duration{
	"s": time.Second, "sec": time.Second, "second": time.Second,
	"m": time.Minute, "min": time.Minute, "minute": time.Minute,
	"h": time.Hour, "hour": time.Hour,
	"d": 24 * time.Hour, "day": 24 * time.Hour,
}

func compileRule(pr PolicyRule, label string) (*policyRule, error) {
	r := &policyRule{name: label, rate: pr.RateLimit}
	if pr.RateLimit != "" {
		n, per, ok := strings.Cut(strings.TrimSpace(pr.RateLimit), "/")
		count, err := strconv.Atoi(strings.TrimSpace(n))
		period, known := ratePeriods[strings.ToLower(strings.TrimSpace(per))]
		if !ok || err != nil || count < 1 || !known {
			return nil, fmt.Errorf("policy: %s: rate_limit %q must look like 100/hour (second, minute, hour or day)", label, pr.RateLimit)
		}
		burst := pr.Burst
		if burst == 0 {
			burst = count
		}
		if burst < 1 {
			return nil, fmt.Errorf("policy: %s: burst must be positive", label)
		}
		r.limiter = newRateLimiters(float64(count)/period.Seconds(), burst)
	} else if pr.Burst != 0 {
		return nil, fmt.Errorf("policy: %s: burst without rate_limit", label)
	}
	if len(pr.MaxRequestSize) > 0 {
		n, err := parseSize(pr.MaxRequestSize)
		if err != nil {
			return nil, fmt.Errorf("policy: %s: max_request_size: %w", label, err)
		}
		r.maxBytes, r.sizeText = n, strings.Trim(string(pr.MaxRequestSize), `"`)
	}
	if pr.AllowedCapabilities != nil {
		r.allowed = []string{}
		for _, c := range pr.AllowedCapabilities {
			if c == "all" || c == "*" {
				r.allowed = nil
				break
			}
			if _, err := path.Match(c, ""); err != nil || c == "" {
				return nil, fmt.Errorf("policy: %s: allowed_capabilities: bad pattern %q", label, c)
			}
			r.allowed = append(r.allowed, c)
		}
	}
	return r, nil
}

// parseSize reads a byte count: a JSON number, or a string such as "50KB".
func parseSize(raw json.RawMessage) (int, error) {
	var n int
	if json.Unmarshal(raw, &n) == nil {
		if n < 1 {
			return 0, fmt.Errorf("%d is not a positive size", n)
		}
		return n, nil
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return 0, fmt.Errorf("%s is neither a number of bytes nor a string such as \"50KB\"", raw)
	}
	t := strings.ToUpper(strings.TrimSpace(s))
	mult := 1
	for _, u := range []struct {
		suffix string
		mult   int
	}{{"MB", 1 << 20}, {"KB", 1 << 10}, {"B", 1}} {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	v, err := strconv.Atoi(t)
	if err != nil || v < 1 || v > (1<<30)/mult {
		return 0, fmt.Errorf("%q is not a size such as 1024, \"50KB\" or \"1MB\"", s)
	}
	return v * mult, nil
}

// rule returns the rule that applies to a requester, or nil.
func (cp *compiledPolicy) rule(p peer.ID) *policyRule {
	if cp == nil {
		return nil
	}
	if r, ok := cp.byAgent[p]; ok {
		return r
	}
	return cp.dflt
}

// admitFrame applies a rule's size and rate limits to a request frame,
// before its signature is verified.
func (r *policyRule) admitFrame(from peer.ID, size int) error {
	if r == nil {
		return nil
	}
	if r.maxBytes > 0 && size > r.maxBytes {
		return protocol.Errorf(protocol.CodeRateLimited, "request of %d bytes exceeds max_request_size %s of policy %s", size, r.sizeText, r.name)
	}
	if r.limiter != nil && !r.limiter.allow(from) {
		return protocol.Errorf(protocol.CodeRateLimited, "rate_limit %s of policy %s exceeded by %s", r.rate, r.name, from)
	}
	return nil
}

// allows reports whether a rule lets its requesters call a capability.
func (r *policyRule) allows(capability string) bool {
	if r == nil || r.allowed == nil {
		return true
	}
	for _, pat := range r.allowed {
		if ok, _ := path.Match(pat, capability); ok {
			return true
		}
	}
	return false
}

// SetPolicy replaces the requester policy (nil removes it). Requests
// already admitted are not affected; rate buckets start full again.
func (n *Node) SetPolicy(p *Policy) error {
	cp, err := compilePolicy(p)
	if err != nil {
		return err
	}
	n.policy.Store(cp)
	n.log.Info("policy set", "rules", policyRuleCount(p))
	return nil
}

func policyRuleCount(p *Policy) int {
	if p == nil {
		return 0
	}
	c := len(p.Rules)
	if p.Default != nil {
		c++
	}
	return c
}
