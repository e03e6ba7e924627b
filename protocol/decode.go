package protocol

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"

	"github.com/meshagent/meshagent/sign"
)

// wireEnvelope is an Envelope as it is signed: the members seed 002 names,
// spelt exactly, and no embedded signature.
type wireEnvelope struct {
	From      Sender          `json:"from"`
	ID        string          `json:"id"`
	Metadata  json.RawMessage `json:"metadata,omitempty"`
	Payload   json.RawMessage `json:"payload"`
	Protocol  string          `json:"protocol"`
	Timestamp string          `json:"timestamp"`
	To        *Recipient      `json:"to,omitempty"`
	Type      MessageType     `json:"type"`
}

// decodeEnvelope decodes signed envelope bytes strictly: a member whose
// name is not spelt exactly as seed 002 spells it is refused, in the
// envelope as in its from and to objects. encoding/json matches names
// case-insensitively and skips unknown ones, so without this a Go receiver
// would act on "From" or ignore "extra" while the signature covers them and
// other implementations read the bytes differently. Extensions belong in
// payload or metadata. Errors are DecodeStrict's; envelopeError words them.
// Whatever it accepts, json.Unmarshal reads the same
// (TestDecodeEnvelopeMatchesJSON, FuzzDecodeEnvelopeMatchesJSON).
func decodeEnvelope(body []byte) (*Envelope, error) {
	// The wire form escapes to the heap: it and the envelope are one
	// allocation.
	b := new(struct {
		e Envelope
		w wireEnvelope
	})
	w := &b.w
	if err := DecodeStrict(body, w); err != nil {
		return nil, err
	}
	b.e = Envelope{From: w.From, ID: w.ID, Metadata: w.Metadata, Payload: w.Payload, Protocol: w.Protocol,
		Timestamp: w.Timestamp, To: w.To, Type: w.Type}
	return &b.e, nil
}

// envelopeError turns a DecodeStrict error on envelope bytes into the
// INVALID_MESSAGE receivers answer with.
func envelopeError(err error) error {
	var fe *FieldError
	if !errors.As(err, &fe) {
		return Errorf(CodeInvalidMessage, "envelope: %v", err)
	}
	switch {
	case fe.Err == ErrUnknownMember && fe.Field == sign.SignatureField:
		return Errorf(CodeInvalidMessage, "signed bytes must not contain a signature member")
	case fe.Err == ErrUnknownMember && fe.parent == "":
		return Errorf(CodeInvalidMessage, "unknown envelope member %q", truncate(fe.member, 40))
	case fe.Err == ErrUnknownMember:
		return Errorf(CodeInvalidMessage, "unknown member %q in %s", truncate(fe.member, 40), fe.parent)
	case fe.Err == ErrWrongType && fe.Field == "":
		return Errorf(CodeInvalidMessage, "envelope must be %s, not %s", fe.Want, fe.Got)
	case fe.Err == ErrWrongType:
		return Errorf(CodeInvalidMessage, "envelope: %s must be %s", truncate(fe.Field, 80), fe.Want)
	}
	return Errorf(CodeInvalidMessage, "envelope: %s", truncate(fe.Error(), 200))
}

// DecodePayload decodes a JSON value received from the network (an
// envelope's payload, a request's params, a response's result) into v with
// DecodeStrict: member names are exact, duplicates are refused and the JSON
// type of every member v declares is checked. A wrong type (a number where
// a string belongs, a string where an object does) is an INVALID_MESSAGE
// *Error naming the member, for example
// `request payload: member "action" must be a string, not a number`.
// Members v does not declare are skipped, so that peers may add extensions
// (seed 002); v's own checks decide what is required. what names the value
// in messages. A missing value (nil or empty raw) is an error; JSON null
// leaves v unchanged.
func DecodePayload(raw []byte, what string, v any) error {
	return decodePayload(raw, what, v, AllowUnknown())
}

// decodePayload is DecodePayload with opts, which must include
// AllowUnknown.
func decodePayload(raw []byte, what string, v any, opts ...DecodeOption) error {
	if len(raw) == 0 {
		return Errorf(CodeInvalidMessage, "%s is missing", what)
	}
	err := DecodeStrict(raw, v, opts...)
	if err == nil {
		return nil
	}
	var fe *FieldError
	if !errors.As(err, &fe) {
		return Errorf(CodeInvalidMessage, "%s: %v", what, err)
	}
	switch {
	case fe.Err == ErrWrongType && fe.Field == "":
		return Errorf(CodeInvalidMessage, "%s must be %s, not %s", what, fe.Want, jsonKind(fe.Got))
	case fe.Err == ErrWrongType:
		return Errorf(CodeInvalidMessage, "%s: member %q must be %s, not %s", what, truncate(fe.Field, 80), fe.Want, jsonKind(fe.Got))
	case fe.Err == ErrSyntax:
		return Errorf(CodeInvalidMessage, "%s is not valid JSON: %s", what, truncate(fe.Reason, 200))
	}
	// Errors from a type's own UnmarshalJSON (time.Time, say) keep their
	// text; they never carry more than a short quote of the input.
	return Errorf(CodeInvalidMessage, "%s: %s", what, truncate(fe.Error(), 200))
}

// jsonKind names the JSON type of a FieldError's Got, which is worded as
// json.UnmarshalTypeError's Value ("number", "number 1.5", "string",
// "bool", "array", "object").
func jsonKind(value string) string {
	switch {
	case strings.HasPrefix(value, "number"):
		if value != "number" {
			return "a non-integer or out-of-range number"
		}
		return "a number"
	case value == "bool":
		return "a boolean"
	case value == "array", value == "object":
		return "an " + value
	case value == "string":
		return "a string"
	}
	return truncate(value, 40)
}

// wantKind names the JSON type that decodes into t.
func wantKind(t reflect.Type) string {
	if t == nil {
		return "another type"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Struct, reflect.Map:
		return "an object"
	}
	return "another type"
}
