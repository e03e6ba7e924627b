package protocol

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

var schemaPrinter = message.NewPrinter(language.English)

// Schema is a compiled JSON Schema for a capability's input or output.
// A nil *Schema accepts everything, as seed 000's placeholder `{}` does.
type Schema struct {
	s *jsonschema.Schema
}

// noLoader refuses every external reference: schemas come from peers and
// must not make a node read files or the network.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("external schema references are not allowed (%s)", url)
}

// CompileSchema compiles a JSON Schema document (draft 2020-12 unless it
// says otherwise). Empty input, null and {} yield a nil Schema that accepts
// everything.
func CompileSchema(raw json.RawMessage) (*Schema, error) {
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 || string(trimmed) == "null" || string(trimmed) == "{}" || string(trimmed) == "true" {
		return nil, nil
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(trimmed))
	if err != nil {
		return nil, fmt.Errorf("protocol: schema is not JSON: %w", err)
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(noLoader{})
	c.DefaultDraft(jsonschema.Draft2020)
	const loc = "mem://capability/schema.json"
	if err := c.AddResource(loc, doc); err != nil {
		return nil, fmt.Errorf("protocol: schema: %w", err)
	}
	s, err := c.Compile(loc)
	if err != nil {
		return nil, fmt.Errorf("protocol: invalid schema: %w", err)
	}
	return &Schema{s: s}, nil
}

// Validate checks a JSON document against the schema. The error is a
// *Error with CodeInvalidMessage whose message carries the schema error and
// whose details list each failing location.
func (s *Schema) Validate(what string, doc json.RawMessage) error {
	if s == nil {
		return nil
	}
	if len(bytes.TrimSpace(doc)) == 0 {
		doc = json.RawMessage("null")
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return Errorf(CodeInvalidMessage, "%s is not JSON: %v", what, err)
	}
	err = s.s.Validate(v)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return Errorf(CodeInvalidMessage, "%s: %v", what, err)
	}
	var problems []schemaProblem
	collectLeaves(ve, &problems)
	// The validator walks maps, so causes come in random order; sort them
	// so that the same document always yields the same error bytes.
	slices.SortFunc(problems, func(a, b schemaProblem) int {
		return cmp.Or(strings.Compare(a.Location, b.Location), strings.Compare(a.Error, b.Error))
	})
	problems = slices.Compact(problems)
	msgs := make([]string, len(problems))
	for i, p := range problems {
		msgs[i] = fmt.Sprintf("at %s: %s", p.Location, p.Error)
	}
	return Errorf(CodeInvalidMessage, "%s do not match the schema: %s", what, strings.Join(msgs, "; ")).
		WithDetails(map[string]any{"schemaErrors": problems})
}

// schemaProblem is one entry of an error's details.schemaErrors.
type schemaProblem struct {
	Error    string `json:"error"`
	Location string `json:"location"`
}

func collectLeaves(ve *jsonschema.ValidationError, out *[]schemaProblem) {
	if len(ve.Causes) == 0 {
		*out = append(*out, schemaProblem{
			Location: "/" + strings.Join(ve.InstanceLocation, "/"),
			Error:    ve.ErrorKind.LocalizedString(schemaPrinter),
		})
		return
	}
	for _, c := range ve.Causes {
		collectLeaves(c, out)
	}
}
