package rpc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"
)

// DecodeParams decodes a method's params, an object with known members
// only, into the struct v points to (absent params are an empty object).
// Its error is the *Error to answer with (CodeInvalidParams).
func DecodeParams(method string, raw json.RawMessage, v any) error {
	if len(raw) == 0 || isNull(raw) {
		return nil
	}
	if raw[0] != '{' {
		return Errorf(CodeInvalidParams, "invalid params: %s takes an object", method)
	}
	if err := decodeStrict(raw, v); err != nil {
		return Errorf(CodeInvalidParams, "invalid params: %s: %v", method, err)
	}
	return nil
}

// decodeStrict decodes a JSON object into the struct v points to,
// refusing members that are not exactly (case included: encoding/json
// alone would take "TASKID" for "taskId") the names of v's fields, and
// members of the wrong JSON type.
func decodeStrict(raw json.RawMessage, v any) error {
	var w map[string]json.RawMessage
	if err := json.Unmarshal(raw, &w); err != nil {
		return err
	}
	known := jsonFieldNames(reflect.TypeOf(v).Elem())
	for _, k := range slices.Sorted(maps.Keys(w)) {
		if !known[k] {
			return fmt.Errorf("unknown field %q", k)
		}
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return fmt.Errorf("%q must be %s, not %s", te.Field, jsonKind(te.Type), te.Value)
		}
		return err
	}
	return nil
}

// jsonFieldNames returns the JSON member names of struct type t.
func jsonFieldNames(t reflect.Type) map[string]bool {
	out := map[string]bool{}
	for f := range t.Fields() {
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch name {
		case "-":
			continue
		case "":
			name = f.Name
		}
		out[name] = true
	}
	return out
}

// jsonKind names the JSON type a Go type decodes from.
func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		if t == reflect.TypeFor[time.Time]() {
			return "an RFC 3339 time string"
		}
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		if t == reflect.TypeFor[time.Time]() {
			return "an RFC 3339 time string"
		}
		return "an object"
	}
	return t.String()
}
