package protocol

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestCompileSchemaAcceptAll(t *testing.T) {
	for _, raw := range []string{"", "  ", "null", "{}", " {} ", "true"} {
		t.Run(raw, func(t *testing.T) {
			s, err := CompileSchema(json.RawMessage(raw))
			if err != nil {
				t.Fatal(err)
			}
			if s != nil {
				t.Fatalf("CompileSchema(%q) = %v, want nil", raw, s)
			}
			for _, doc := range []string{`{"anything":[1,2]}`, `null`, `3`, ``} {
				if err := s.Validate("params", json.RawMessage(doc)); err != nil {
					t.Errorf("nil schema refused %s: %v", doc, err)
				}
			}
		})
	}
}

const testSchema = `{
	"type": "object",
	"properties": {
		"code": {"type": "string", "minLength": 1},
		"count": {"type": "integer", "minimum": 1},
		"language": {"enum": ["go", "javascript"]}
	},
	"required": ["code"],
	"additionalProperties": false
}`

func TestSchemaValidate(t *testing.T) {
	s, err := CompileSchema(json.RawMessage(testSchema))
	if err != nil {
		t.Fatal(err)
	}
	if s == nil {
		t.Fatal("CompileSchema returned nil for a real schema")
	}
	tests := []struct {
		name      string
		doc       string
		locations []string // failing instance locations; nil means valid
		msg       string   // substring of the message
	}{
		{"minimal", `{"code":"x"}`, nil, ""},
		{"full", `{"code":"x","count":3,"language":"go"}`, nil, ""},
		{"integer as float", `{"code":"x","count":2.0}`, nil, ""},
		{"missing required", `{"count":3}`, []string{"/"}, "code"},
		{"wrong type", `{"code":5}`, []string{"/code"}, "at /code"},
		{"below minimum", `{"code":"x","count":0}`, []string{"/count"}, "at /count"},
		{"not an integer", `{"code":"x","count":1.5}`, []string{"/count"}, "at /count"},
		{"additional property", `{"code":"x","extra":true}`, []string{"/"}, "extra"},
		{"enum", `{"code":"x","language":"cobol"}`, []string{"/language"}, "at /language"},
		{"two failures", `{"code":"","count":-1}`, []string{"/code", "/count"}, "at /count"},
		{"not an object", `[1]`, []string{"/"}, "object"},
		{"empty document is null", ``, []string{"/"}, "null"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := s.Validate("params", json.RawMessage(tc.doc))
			if tc.locations == nil {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			wantCode(t, err, CodeInvalidMessage)
			var pe *Error
			errors.As(err, &pe)
			if !strings.HasPrefix(pe.Message, "params do not match the schema: ") {
				t.Errorf("message %q does not say what failed", pe.Message)
			}
			if !strings.Contains(pe.Message, tc.msg) {
				t.Errorf("message %q does not mention %q", pe.Message, tc.msg)
			}
			var details struct {
				SchemaErrors []struct {
					Location string `json:"location"`
					Error    string `json:"error"`
				} `json:"schemaErrors"`
			}
			if err := json.Unmarshal(pe.Details, &details); err != nil {
				t.Fatalf("details %s: %v", pe.Details, err)
			}
			var got []string
			for _, se := range details.SchemaErrors {
				if se.Error == "" {
					t.Errorf("schema error at %s has no text", se.Location)
				}
				if !strings.Contains(pe.Message, "at "+se.Location+": "+se.Error) {
					t.Errorf("message %q lacks %s: %s", pe.Message, se.Location, se.Error)
				}
				got = append(got, se.Location)
			}
			if strings.Join(got, ",") != strings.Join(tc.locations, ",") {
				t.Errorf("locations %v, want %v", got, tc.locations)
			}
		})
	}
}

func TestSchemaValidateNotJSON(t *testing.T) {
	s, err := CompileSchema(json.RawMessage(testSchema))
	if err != nil {
		t.Fatal(err)
	}
	err = s.Validate("result", json.RawMessage(`{"code":`))
	wantCode(t, err, CodeInvalidMessage)
	if !strings.Contains(err.Error(), "result is not JSON") {
		t.Errorf("error %q", err)
	}
}

func TestSchemaNestedLocation(t *testing.T) {
	s, err := CompileSchema(json.RawMessage(`{"type":"object","properties":{"items":{"type":"array","items":{"type":"object","properties":{"n":{"type":"integer"}}}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	err = s.Validate("params", json.RawMessage(`{"items":[{"n":1},{"n":"two"}]}`))
	wantCode(t, err, CodeInvalidMessage)
	if !strings.Contains(err.Error(), "at /items/1/n") {
		t.Errorf("error %q does not name /items/1/n", err)
	}
}

func TestCompileSchemaDraft(t *testing.T) {
	// Without $schema, draft 2020-12 applies: prefixItems is a keyword.
	s, err := CompileSchema(json.RawMessage(`{"prefixItems":[{"type":"string"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Validate("params", json.RawMessage(`[1]`)); err == nil {
		t.Error("prefixItems ignored: default draft is not 2020-12")
	}
	// An older draft named by $schema is honoured without fetching it.
	s, err = CompileSchema(json.RawMessage(`{"$schema":"http://json-schema.org/draft-07/schema#","items":[{"type":"string"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Validate("params", json.RawMessage(`[1]`)); err == nil {
		t.Error("draft-07 tuple items ignored")
	}
}

func TestCompileSchemaRefusesExternalRefs(t *testing.T) {
	for _, tc := range []struct {
		name   string
		schema string
	}{
		{"file", `{"$ref":"file:///etc/passwd"}`},
		{"http", `{"$ref":"http://example.com/schema.json"}`},
		{"https", `{"properties":{"a":{"$ref":"https://example.com/s.json#/defs/a"}}}`},
		{"relative", `{"$ref":"other.json"}`},
		{"relative to $id", `{"$id":"http://example.com/root.json","$ref":"leaf.json"}`},
		{"unknown metaschema", `{"$schema":"http://example.com/meta.json"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := CompileSchema(json.RawMessage(tc.schema))
			if err == nil {
				t.Fatalf("CompileSchema accepted %s", tc.schema)
			}
			if s != nil {
				t.Error("CompileSchema returned a schema with an error")
			}
			if !strings.Contains(err.Error(), "external schema references are not allowed") {
				t.Errorf("error %q does not say external references are refused", err)
			}
		})
	}
}

func TestCompileSchemaLocalRef(t *testing.T) {
	s, err := CompileSchema(json.RawMessage(`{"$defs":{"pos":{"type":"integer","minimum":1}},"properties":{"n":{"$ref":"#/$defs/pos"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Validate("params", json.RawMessage(`{"n":2}`)); err != nil {
		t.Error(err)
	}
	if err := s.Validate("params", json.RawMessage(`{"n":0}`)); err == nil {
		t.Error("local $ref not applied")
	}
}

func TestCompileSchemaInvalid(t *testing.T) {
	for _, tc := range []struct {
		name, schema, msg string
	}{
		{"not JSON", `{"type":`, "not JSON"},
		{"type is a number", `{"type":5}`, "invalid schema"},
		{"unknown type", `{"type":"strung"}`, "invalid schema"},
		{"minimum is a string", `{"minimum":"one"}`, "invalid schema"},
		{"required is not an array", `{"required":"code"}`, "invalid schema"},
		{"bad pattern", `{"pattern":"("}`, "invalid schema"},
		{"dangling local ref", `{"$ref":"#/$defs/missing"}`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := CompileSchema(json.RawMessage(tc.schema))
			if err == nil {
				t.Fatalf("CompileSchema accepted %s", tc.schema)
			}
			if s != nil {
				t.Error("CompileSchema returned a schema with an error")
			}
			if !strings.HasPrefix(err.Error(), "protocol: ") || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("error %q", err)
			}
		})
	}
}

func TestSchemaErrorIsDeterministic(t *testing.T) {
	s, err := CompileSchema(json.RawMessage(`{"type":"object","properties":{
		"a":{"type":"integer"},"b":{"type":"integer"},"c":{"type":"integer"},
		"d":{"type":"integer"},"e":{"type":"integer"},"f":{"type":"integer"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	doc := json.RawMessage(`{"a":"x","b":"x","c":"x","d":"x","e":"x","f":"x"}`)
	first := s.Validate("params", doc).(*Error)
	for range 50 {
		got := s.Validate("params", doc).(*Error)
		if got.Message != first.Message || string(got.Details) != string(first.Details) {
			t.Fatalf("same document, different errors:\n%s\n%s", first.Message, got.Message)
		}
	}
	if !strings.Contains(first.Message, "at /a: ") || strings.Index(first.Message, "/a") > strings.Index(first.Message, "/f") {
		t.Errorf("failures not in location order: %s", first.Message)
	}
}
