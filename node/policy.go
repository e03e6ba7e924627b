package node

import (
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshagent/meshagent/protocol"
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
//	    {"name": "ci", "agents": ["12D3KooW…"], "allowed_capabilities": ["run_tests"]},
//	    {"name": "lobby", "agents": ["12D3KooWRelay…/lobby:*"], "rate_limit": "10/minute"}
//	  ]
//	}
//
// A requester gets the first rule naming it (directly or through a group),
// else the default rule, else no policy limits. Fields a rule leaves out do
// not restrict.
//
// Agents and group members are agent ids, or "<agent id>/<client>" for a
// client that agent vouches for in its signed request
// (protocol.MetaOnBehalfOf: a relay calling for its lobby agent alice
// vouches "lobby:alice"); a client ending in "*" is a prefix
// ("<relay>/lobby:*", "<relay>/*"). Every frame an agent sends counts
// against that agent's own rule (or the default) before its signature is
// checked. A request the agent vouches for is then also held to the first
// rule naming the client, with a token bucket per client: "10/minute" on
// "<relay>/lobby:*" lets each lobby agent make 10 a minute. That rule
// also decides the client's allowed_capabilities; a client no rule names
// has those of its agent's rule. rate_limit is "N/second", "N/minute", "N/hour" or "N/day",
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
	data, err := readBoundedFile("policy", file, maxPolicyFile)
	if err != nil {
		return nil, err
	}
	p, err := ParsePolicy(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return p, nil
}

// ParsePolicy decodes a policy strictly (protocol.DecodeStrict: unknown or
// repeated members are errors, so a typo never drops a limit) and checks
// it.
func ParsePolicy(data []byte) (*Policy, error) {
	var p Policy
	if err := protocol.DecodeStrict(data, &p); err != nil {
		if errors.Is(err, protocol.ErrTrailingData) {
			return nil, errors.New("policy: trailing data after the JSON object")
		}
		return nil, fmt.Errorf("policy: %w", err)
	}
	if _, err := compilePolicy(&p); err != nil {
		return nil, err
	}
	return &p, nil
}

// compiledPolicy is a Policy ready for the request path.
type compiledPolicy struct {
	byAgent map[peer.ID]*policyRule
	// byClient lists, per vouching agent, the entries naming its clients
	// in rule order, each with its rule.
	byClient map[peer.ID][]clientRule
	dflt     *policyRule
}

// clientRule is a policy entry naming an agent's client(s).
type clientRule struct {
	entry requesterEntry
	rule  *policyRule
}

// policyRule is a compiled PolicyRule with its own token buckets.
type policyRule struct {
	name    string
	rate    string // as written, for messages
	limiter *rateLimiters
	// clients holds the buckets of vouched clients, apart from the
	// agents' (hard-capped: the vouching agent chooses the names).
	clients  *rateLimiters
	maxBytes int
	sizeText string
	allowed  []string // nil: any
}

func compilePolicy(p *Policy) (*compiledPolicy, error) {
	if p == nil {
		return nil, nil
	}
	groups := map[string][]requesterEntry{}
	for g, members := range p.Groups {
		for _, m := range members {
			e, err := parseRequesterEntry(m)
			if err != nil {
				return nil, fmt.Errorf("policy: group %q: %w", g, err)
			}
			groups[g] = append(groups[g], e)
		}
	}
	cp := &compiledPolicy{byAgent: map[peer.ID]*policyRule{}, byClient: map[peer.ID][]clientRule{}}
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
		var entries []requesterEntry
		for _, a := range pr.Agents {
			e, err := parseRequesterEntry(a)
			if err != nil {
				return nil, fmt.Errorf("policy: %s: %w", label, err)
			}
			entries = append(entries, e)
		}
		for _, g := range pr.Groups {
			members, ok := groups[g]
			if !ok {
				return nil, fmt.Errorf("policy: %s: unknown group %q", label, g)
			}
			entries = append(entries, members...)
		}
		for _, e := range entries {
			if e.client != "" || e.wild {
				// In rule order, so the first rule naming a client wins.
				cp.byClient[e.agent] = append(cp.byClient[e.agent], clientRule{entry: e, rule: r})
				continue
			}
			if _, taken := cp.byAgent[e.agent]; !taken { // the first rule naming an agent wins
				cp.byAgent[e.agent] = r
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
		r.clients = newRateLimiters(float64(count)/period.Seconds(), burst)
		r.clients.hard = true
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
	if protocol.DecodeStrict(raw, &n) == nil {
		if n < 1 {
			return 0, fmt.Errorf("%d is not a positive size", n)
		}
		return n, nil
	}
	var s string
	if protocol.DecodeStrict(raw, &s) != nil {
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

// clientRule returns the first rule naming a vouched client, or nil.
func (cp *compiledPolicy) clientRule(r requester) *policyRule {
	if cp == nil || r.client == "" {
		return nil
	}
	for _, cr := range cp.byClient[r.agent] {
		if cr.entry.matches(r) {
			return cr.rule
		}
	}
	return nil
}

// ruleFor returns the rule that decides what a requester may call: for a
// vouched client the first rule naming it, else the rule of the agent
// (or the default).
func (cp *compiledPolicy) ruleFor(r requester) *policyRule {
	if cr := cp.clientRule(r); cr != nil {
		return cr
	}
	return cp.rule(r.agent)
}

// admitClient applies the size and rate limits of the rule naming a
// vouched client, with a token bucket per client, once the request's
// signature has been verified. Requests that vouch for no client, or for
// one no rule names, pass: admitFrame has limited their agent.
func (cp *compiledPolicy) admitClient(r requester, size int) error {
	pr := cp.clientRule(r)
	if pr == nil {
		return nil
	}
	if pr.maxBytes > 0 && size > pr.maxBytes {
		return protocol.Errorf(protocol.CodeRateLimited, "request of %d bytes exceeds max_request_size %s of policy %s", size, pr.sizeText, pr.name)
	}
	if pr.clients != nil && !pr.clients.allowKey(r.String()) {
		return protocol.Errorf(protocol.CodeRateLimited, "rate_limit %s of policy %s exceeded by %s", pr.rate, pr.name, r)
	}
	return nil
}

// admitFrame applies a rule's size and rate limits to a request frame,
// before its signature is verified.
func (r *policyRule) admitFrame(from peer.ID, size int) error {
	if err := r.admitSize(size); err != nil {
		return err
	}
	return r.admitRate(from)
}

// admitSize applies a rule's size limit to a request of size bytes.
func (r *policyRule) admitSize(size int) error {
	if r != nil && r.maxBytes > 0 && size > r.maxBytes {
		return protocol.Errorf(protocol.CodeRateLimited, "request of %d bytes exceeds max_request_size %s of policy %s", size, r.sizeText, r.name)
	}
	return nil
}

// admitRate applies a rule's rate limit to one more request from from.
func (r *policyRule) admitRate(from peer.ID) error {
	if r != nil && r.limiter != nil && !r.limiter.allow(from) {
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
