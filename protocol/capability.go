package protocol

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxCapabilityNameLen bounds a capability name, so names stay usable as DHT
// keys and log fields.
const MaxCapabilityNameLen = 256

// Capability is seed 000's capability object. Name may be a URI such as
// "myagent:code-review" (seed 002); it is what a request's action names.
type Capability struct {
	// AuthorizedRequesterIDs lists the agent ids allowed to call. Empty or
	// null means public (seed 000 §7 reads an empty list as public too).
	AuthorizedRequesterIDs []string `json:"authorized_requester_ids,omitempty"`
	Description            string   `json:"description,omitempty"`
	// Idempotent says that running a request twice does no more than
	// running it once, so a caller choosing a provider (call --any) may
	// send it to another provider after a transport failure mid-call.
	// Absent means false: a request that reached a provider is never run
	// elsewhere. Not part of seed 000; omitted when false, so capability
	// objects without it encode as before.
	Idempotent   bool            `json:"idempotent,omitempty"`
	InputSchema  json.RawMessage `json:"input_schema,omitempty"`
	Keywords     []string        `json:"keywords,omitempty"`
	Name         string          `json:"name"`
	OutputSchema json.RawMessage `json:"output_schema,omitempty"`
}

// Validate checks the fields a receiver relies on.
func (c *Capability) Validate() error {
	if c.Name == "" {
		return Errorf(CodeInvalidMessage, "capability: name is required")
	}
	if len(c.Name) > MaxCapabilityNameLen {
		return Errorf(CodeInvalidMessage, "capability %q: name longer than %d bytes", c.Name[:32]+"…", MaxCapabilityNameLen)
	}
	if !utf8.ValidString(c.Name) {
		return Errorf(CodeInvalidMessage, "capability %q: name is not valid UTF-8", c.Name)
	}
	// Names are DHT keys, log fields and CLI arguments: any Unicode space
	// or control character would make two names look alike or garble a
	// terminal.
	if strings.ContainsFunc(c.Name, unicode.IsSpace) {
		return Errorf(CodeInvalidMessage, "capability %q: name must not contain whitespace", c.Name)
	}
	if strings.ContainsFunc(c.Name, unicode.IsControl) {
		return Errorf(CodeInvalidMessage, "capability %q: name must not contain control characters", c.Name)
	}
	for _, s := range []struct {
		field string
		raw   json.RawMessage
	}{{"input_schema", c.InputSchema}, {"output_schema", c.OutputSchema}} {
		if len(s.raw) == 0 || string(s.raw) == "null" {
			continue
		}
		var v any
		if err := json.Unmarshal(s.raw, &v); err != nil {
			return Errorf(CodeInvalidMessage, "capability %q: %s is not JSON: %v", c.Name, s.field, err)
		}
		switch v.(type) {
		case map[string]any, bool:
		default:
			return Errorf(CodeInvalidMessage, "capability %q: %s must be a JSON Schema object", c.Name, s.field)
		}
	}
	return nil
}

// Public reports whether any agent may call the capability.
func (c *Capability) Public() bool { return len(c.AuthorizedRequesterIDs) == 0 }

// Authorized reports whether agentID may call the capability. Both forms of
// an agent id are compared in their normalised peer ID form by the caller;
// this compares strings exactly.
func (c *Capability) Authorized(agentID string) bool {
	return c.Public() || slices.Contains(c.AuthorizedRequesterIDs, agentID)
}

// Matches reports whether the capability answers a discovery query: its name
// equals q, or one of its keywords does.
func (c *Capability) Matches(q string) bool {
	return c.Name == q || slices.Contains(c.Keywords, q)
}

// String returns the capability name.
func (c *Capability) String() string { return fmt.Sprintf("capability(%s)", c.Name) }
