package protocol

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestCapabilityValidate(t *testing.T) {
	tests := []struct {
		name string
		c    Capability
		want string // substring of the error; "" means valid
	}{
		{"minimal", Capability{Name: "translate"}, ""},
		{"uri name", Capability{Name: "myagent:translation/en-de"}, ""},
		{"name at limit", Capability{Name: strings.Repeat("n", MaxCapabilityNameLen)}, ""},
		{"empty schemas", Capability{Name: "x", InputSchema: json.RawMessage(`{}`), OutputSchema: json.RawMessage(`{}`)}, ""},
		{"null schemas", Capability{Name: "x", InputSchema: json.RawMessage(`null`), OutputSchema: json.RawMessage(`null`)}, ""},
		{"boolean schemas", Capability{Name: "x", InputSchema: json.RawMessage(`true`), OutputSchema: json.RawMessage(`false`)}, ""},
		{"real schema", Capability{Name: "x", InputSchema: json.RawMessage(`{"type":"object","required":["q"]}`)}, ""},

		{"empty name", Capability{}, "name is required"},
		{"long name", Capability{Name: strings.Repeat("n", MaxCapabilityNameLen+1)}, "longer than"},
		{"leading space", Capability{Name: " x"}, "whitespace"},
		{"trailing newline", Capability{Name: "x\n"}, "whitespace"},
		{"inner space", Capability{Name: "code review"}, "whitespace"},
		{"inner tab", Capability{Name: "code\treview"}, "whitespace"},
		{"inner no-break space", Capability{Name: "code\u00a0review"}, "whitespace"},
		{"inner line separator", Capability{Name: "code\u2028review"}, "whitespace"},
		{"control character", Capability{Name: "code\x00review"}, "control"},
		{"escape character", Capability{Name: "code\x1b[31mreview"}, "control"},
		{"invalid UTF-8", Capability{Name: "code\xffreview"}, "UTF-8"},
		{"input schema string", Capability{Name: "x", InputSchema: json.RawMessage(`"object"`)}, "input_schema must be a JSON Schema object"},
		{"input schema array", Capability{Name: "x", InputSchema: json.RawMessage(`[]`)}, "input_schema must be a JSON Schema object"},
		{"output schema number", Capability{Name: "x", OutputSchema: json.RawMessage(`1`)}, "output_schema must be a JSON Schema object"},
		{"input schema not JSON", Capability{Name: "x", InputSchema: json.RawMessage(`{`)}, "input_schema is not JSON"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.c.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			wantCode(t, err, CodeInvalidMessage)
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not mention %q", err, tc.want)
			}
		})
	}
}

func TestCapabilityValidateLongNameMessage(t *testing.T) {
	c := Capability{Name: strings.Repeat("é", MaxCapabilityNameLen)}
	err := c.Validate()
	wantCode(t, err, CodeInvalidMessage)
	if len(err.Error()) > 200 {
		t.Errorf("error echoes %d bytes of the name", len(err.Error()))
	}
}

func TestCapabilityAuthorized(t *testing.T) {
	alice, bob := testSigner(t, 1).ID().String(), testSigner(t, 2).ID().String()
	tests := []struct {
		name   string
		ids    []string
		public bool
		allow  map[string]bool
	}{
		{"nil list is public", nil, true, map[string]bool{alice: true, bob: true, "": true}},
		{"empty list is public", []string{}, true, map[string]bool{alice: true, bob: true}},
		{"one agent", []string{alice}, false, map[string]bool{alice: true, bob: false, "": false}},
		{"two agents", []string{alice, bob}, false, map[string]bool{alice: true, bob: true, "x": false}},
		{"exact match only", []string{alice}, false, map[string]bool{strings.ToLower(alice): false, alice + " ": false}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := Capability{Name: "x", AuthorizedRequesterIDs: tc.ids}
			if got := c.Public(); got != tc.public {
				t.Errorf("Public() = %v", got)
			}
			for id, want := range tc.allow {
				if got := c.Authorized(id); got != want {
					t.Errorf("Authorized(%q) = %v, want %v", id, got, want)
				}
			}
		})
	}
}

func TestCapabilityMatches(t *testing.T) {
	c := Capability{Name: "myagent:code-review", Keywords: []string{"review", "lint"}}
	for q, want := range map[string]bool{
		"myagent:code-review": true,
		"review":              true,
		"lint":                true,
		"code-review":         false,
		"Review":              false,
		"":                    false,
		"myagent":             false,
	} {
		if got := c.Matches(q); got != want {
			t.Errorf("Matches(%q) = %v, want %v", q, got, want)
		}
	}
	if got := c.String(); got != "capability(myagent:code-review)" {
		t.Errorf("String() = %q", got)
	}
}

func TestCapabilityJSONSeed000(t *testing.T) {
	// A capability as seed 000 §7 writes it.
	in := []byte(`{
		"name": "find_cheapest_item_price_v2",
		"description": "Finds the cheapest price",
		"input_schema": {"type": "object", "properties": {"item": {"type": "string"}}},
		"output_schema": {},
		"keywords": ["price", "shopping"],
		"authorized_requester_ids": ["agent-a", "agent-b"]
	}`)
	var c Capability
	if err := json.Unmarshal(in, &c); err != nil {
		t.Fatal(err)
	}
	if c.Name != "find_cheapest_item_price_v2" || c.Description != "Finds the cheapest price" ||
		len(c.Keywords) != 2 || len(c.AuthorizedRequesterIDs) != 2 || len(c.InputSchema) == 0 ||
		string(c.OutputSchema) != `{}` {
		t.Fatalf("decoded %+v", c)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	out, err := MarshalCanonical(c)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"authorized_requester_ids":["agent-a","agent-b"],"description":"Finds the cheapest price",` +
		`"input_schema":{"properties":{"item":{"type":"string"}},"type":"object"},"keywords":["price","shopping"],` +
		`"name":"find_cheapest_item_price_v2","output_schema":{}}`
	if string(out) != want {
		t.Errorf("round trip\n%s\nwant\n%s", out, want)
	}
	// encoding/json already writes the fields in canonical order.
	plain, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, plain); err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(compact.Bytes(), []byte(`{"authorized_requester_ids":`)) {
		t.Errorf("field order: %s", plain)
	}

	// Null and omitted optional fields mean the same: public, no keywords.
	for _, doc := range []string{
		`{"name":"x","authorized_requester_ids":null,"keywords":null}`,
		`{"name":"x"}`,
	} {
		var c Capability
		if err := json.Unmarshal([]byte(doc), &c); err != nil {
			t.Fatal(err)
		}
		if !c.Public() || c.Matches("anything") {
			t.Errorf("%s: public=%v", doc, c.Public())
		}
		out, _ := MarshalCanonical(c)
		if string(out) != `{"name":"x"}` {
			t.Errorf("%s re-encodes as %s", doc, out)
		}
	}
}
