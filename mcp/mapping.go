package mcp

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/meshagent/meshagent/protocol"
)

// MaxToolNameLen is the longest tool name MCP allows (and the SDK checks).
const MaxToolNameLen = 128

// validNameByte reports whether b may appear in a tool name: [A-Za-z0-9_.-].
func validNameByte(b byte) bool {
	return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '_' || b == '.' || b == '-'
}

// SanitizeName maps a capability name to an MCP tool name: every character
// outside [A-Za-z0-9_.-] becomes "_" (one per character, not per byte), and
// a result over MaxToolNameLen is cut and ends in "_" and 8 hex digits of
// the SHA-256 of the capability name, so two long names that share a
// prefix stay apart.
func SanitizeName(capability string) string {
	var b strings.Builder
	for _, r := range capability {
		if r < 0x80 && validNameByte(byte(r)) {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	s := b.String()
	if s == "" {
		s = "_"
	}
	if len(s) > MaxToolNameLen {
		sum := sha256.Sum256([]byte(capability))
		s = s[:MaxToolNameLen-9] + "_" + hex.EncodeToString(sum[:4])
	}
	return s
}

// withSuffix appends suffix to base, cutting base so that the whole stays
// within MaxToolNameLen.
func withSuffix(base, suffix string) string {
	if len(base)+len(suffix) > MaxToolNameLen {
		base = base[:MaxToolNameLen-len(suffix)]
	}
	return base + suffix
}

// AssignNames gives each capability name a distinct tool name. Names that
// are already valid tool names keep them; the others take SanitizeName's
// form, and when that is taken, the first free of "_2", "_3"… in the
// sorted order of the capability names. The result maps capability name to
// tool name.
func AssignNames(capabilities []string) map[string]string {
	names := slices.Clone(capabilities)
	slices.Sort(names)
	names = slices.Compact(names)
	out := make(map[string]string, len(names))
	taken := make(map[string]bool, len(names))
	for _, n := range names {
		if SanitizeName(n) == n {
			out[n] = n
			taken[n] = true
		}
	}
	for _, n := range names {
		if _, ok := out[n]; ok {
			continue
		}
		base := SanitizeName(n)
		name := base
		for k := 2; taken[name]; k++ {
			name = withSuffix(base, "_"+strconv.Itoa(k))
		}
		out[n] = name
		taken[name] = true
	}
	return out
}

// schemaKind says how a capability's schema maps onto an MCP schema.
type schemaKind int

const (
	// schemaNone: the capability has no schema (absent, null, {} or true).
	schemaNone schemaKind = iota
	// schemaObject: an object schema ("type": "object"), passed through.
	schemaObject
	// schemaWrapped: any other schema, wrapped as one member.
	schemaWrapped
)

// classifySchema reads a capability's schema. It refuses what is not a
// JSON Schema document (a number, a string, false) and what does not
// compile (protocol.CompileSchema: draft 2020-12, no external references).
func classifySchema(raw json.RawMessage) (schemaKind, *protocol.Schema, error) {
	t := bytes.TrimSpace(raw)
	switch string(t) {
	case "", "null", "{}", "true":
		return schemaNone, nil, nil
	}
	if t[0] != '{' {
		return 0, nil, fmt.Errorf("schema is not a JSON object or true")
	}
	// A map, not a struct: encoding/json matches struct fields without
	// regard to case, and {"TYPE":"object"} is no object schema.
	var head map[string]json.RawMessage
	if err := json.Unmarshal(t, &head); err != nil {
		return 0, nil, fmt.Errorf("schema is not JSON: %w", err)
	}
	s, err := protocol.CompileSchema(t)
	if err != nil {
		return 0, nil, err
	}
	if string(bytes.TrimSpace(head["type"])) == `"object"` {
		return schemaObject, s, nil
	}
	return schemaWrapped, s, nil
}

// wrapSchema is {"type":"object","properties":{member:S},"required":[member]}.
func wrapSchema(member string, s json.RawMessage) json.RawMessage {
	var b bytes.Buffer
	b.WriteString(`{"type":"object","properties":{`)
	m, _ := json.Marshal(member)
	b.Write(m)
	b.WriteByte(':')
	_ = json.Compact(&b, s)
	b.WriteString(`},"required":[`)
	b.Write(m)
	b.WriteString(`]}`)
	return b.Bytes()
}

// emptyObjectSchema is the input schema of a capability without one.
var emptyObjectSchema = json.RawMessage(`{"type":"object"}`)

// Tool is a capability as an MCP tool: what tools/list shows and how a
// tools/call maps onto a mesh call.
type Tool struct {
	// Capability is the mesh capability's name.
	Capability string
	// MCP is the tool as listed. Its schemas are json.RawMessage.
	MCP *sdk.Tool
	in  schemaKind
	inS *protocol.Schema
	out schemaKind
	// outS validates results when the capability has an output schema.
	outS *protocol.Schema
}

// MapTool maps capability c onto the tool named name (see AssignNames).
// Description: c's, or "mesh capability NAME". Input schema: c's object
// schema unchanged; {"type":"object"} when it has none; any other schema S
// wrapped as {"type":"object","properties":{"value":S},"required":["value"]}.
// Output schema likewise, with "result" for the member and none when c has
// none. A schema that is not a compilable JSON Schema is an error: the tool
// is left out, so a peer's schema never reaches the SDK unchecked (its
// AddTool panics on a non-object input schema).
func MapTool(c protocol.Capability, name string) (*Tool, error) {
	t := &Tool{Capability: c.Name}
	var err error
	if t.in, t.inS, err = classifySchema(c.InputSchema); err != nil {
		return nil, fmt.Errorf("capability %q: input_schema: %w", c.Name, err)
	}
	if t.out, t.outS, err = classifySchema(c.OutputSchema); err != nil {
		return nil, fmt.Errorf("capability %q: output_schema: %w", c.Name, err)
	}
	desc := c.Description
	if strings.TrimSpace(desc) == "" {
		desc = "mesh capability " + c.Name
	}
	tool := &sdk.Tool{Name: name, Description: desc}
	switch t.in {
	case schemaNone:
		tool.InputSchema = emptyObjectSchema
	case schemaObject:
		tool.InputSchema = json.RawMessage(bytes.TrimSpace(c.InputSchema))
	case schemaWrapped:
		tool.InputSchema = wrapSchema("value", bytes.TrimSpace(c.InputSchema))
	}
	switch t.out {
	case schemaObject:
		tool.OutputSchema = json.RawMessage(bytes.TrimSpace(c.OutputSchema))
	case schemaWrapped:
		tool.OutputSchema = wrapSchema("result", bytes.TrimSpace(c.OutputSchema))
	}
	t.MCP = tool
	return t, nil
}

// Params turns a tools/call's arguments into the mesh call's params,
// checked against the capability's input schema: an object schema (or
// none) takes the arguments as they are; a wrapped one takes the "value"
// member. A violation is a *protocol.Error with code INVALID_MESSAGE.
func (t *Tool) Params(args json.RawMessage) (json.RawMessage, error) {
	a := bytes.TrimSpace(args)
	if len(a) == 0 || string(a) == "null" {
		a = []byte("{}")
	}
	if a[0] != '{' {
		return nil, protocol.Errorf(protocol.CodeInvalidMessage, "arguments must be a JSON object")
	}
	var params json.RawMessage = a
	if t.in == schemaWrapped {
		var w map[string]json.RawMessage
		if err := json.Unmarshal(a, &w); err != nil {
			return nil, protocol.Errorf(protocol.CodeInvalidMessage, "arguments: %v", err)
		}
		v, ok := w["value"]
		if !ok || len(w) != 1 {
			return nil, protocol.Errorf(protocol.CodeInvalidMessage, `arguments must be {"value": …} and nothing else`)
		}
		params = v
	}
	if t.in == schemaNone {
		if string(a) == "{}" {
			return nil, nil
		}
		return params, nil
	}
	if err := t.inS.Validate("arguments", params); err != nil {
		return nil, err
	}
	return params, nil
}

// Result turns a mesh result into a tools/call result: structuredContent
// is the result when it is an object and the capability has no non-object
// output schema, else {"result": v}; one text item holds the same JSON. A
// result that breaks the output schema is an error result.
func (t *Tool) Result(result json.RawMessage) *sdk.CallToolResult {
	r := bytes.TrimSpace(result)
	if len(r) == 0 {
		r = []byte("null")
	}
	if t.outS != nil {
		if err := t.outS.Validate("result", r); err != nil {
			return ErrorResult(protocol.Errorf(protocol.CodeInternalError, "the provider's %s", protocol.AsError(err).Message))
		}
	}
	var structured json.RawMessage
	switch {
	case t.out == schemaObject && r[0] != '{':
		return ErrorResult(protocol.Errorf(protocol.CodeInternalError, "the provider's result is not the object its output schema says"))
	case r[0] == '{' && t.out != schemaWrapped:
		structured = r
	default:
		structured = wrapValue(r)
	}
	return &sdk.CallToolResult{
		StructuredContent: structured,
		Content:           []sdk.Content{&sdk.TextContent{Text: string(structured)}},
	}
}

// wrapValue is {"result": v}.
func wrapValue(v json.RawMessage) json.RawMessage {
	var b bytes.Buffer
	b.WriteString(`{"result":`)
	_ = json.Compact(&b, v)
	b.WriteByte('}')
	return b.Bytes()
}

// ErrorResult is a tools/call result for a mesh error: isError and the
// text "CODE: message".
func ErrorResult(err error) *sdk.CallToolResult {
	pe := protocol.AsError(err)
	return &sdk.CallToolResult{
		IsError: true,
		Content: []sdk.Content{&sdk.TextContent{Text: string(pe.Code) + ": " + pe.Message}},
	}
}
