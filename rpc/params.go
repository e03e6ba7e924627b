package rpc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/meshagent/meshagent/protocol"
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

// ObjectParams decodes a method's params, which must be an object, into
// the struct v points to, as DecodeParams does; absent params are an
// error too. Its error is the *Error to answer with (CodeInvalidParams),
// naming shape, what the method takes, such as `{"beadId"}`.
func ObjectParams(r *Request, v any, shape string) error {
	if len(r.Params) == 0 || r.Params[0] != '{' {
		return Errorf(CodeInvalidParams, "invalid params: %s takes %s", r.Method, shape)
	}
	if err := decodeStrict(r.Params, v); err != nil {
		return Errorf(CodeInvalidParams, "invalid params: %s: %v (it takes %s)", r.Method, err, shape)
	}
	return nil
}

// NoParams accepts absent params, {} and [], for a method that takes
// none; other params are the *Error to answer with (CodeInvalidParams).
func NoParams(req *Request) error {
	switch p := string(bytes.Join(bytes.Fields(req.Params), nil)); p {
	case "", "{}", "[]":
		return nil
	}
	return Errorf(CodeInvalidParams, "invalid params: %s takes no params", req.Method)
}

// decodeStrict decodes a JSON object into the struct v points to and
// words what is wrong as `unknown field "x"` or `"x" must be a whole
// number, not string`.
func decodeStrict(raw json.RawMessage, v any) error {
	fe := DecodeMembers(raw, v)
	switch {
	case fe == nil:
		return nil
	case fe.Err == protocol.ErrUnknownMember:
		return fmt.Errorf("unknown field %q", fe.Name())
	case fe.Err == protocol.ErrWrongType && fe.Field != "":
		return fmt.Errorf("%q must be %s, not %s", structPath(fe.Field), paramKind(fe.Want), fe.Got)
	case fe.Err == protocol.ErrInvalidValue:
		return errors.New(fe.Reason)
	}
	return fe
}

// DecodeMembers decodes params into the struct v points to with
// protocol.DecodeStrict: member names exact, no member twice, none the
// struct does not declare, every JSON type checked, so that the exported
// params structs are what the methods read. When several things are
// wrong, an unknown member (the first in sorted order) is the one
// reported, as the methods always have. Methods served outside this
// package (the bus's) word its *protocol.FieldError their own way.
func DecodeMembers(raw json.RawMessage, v any) *protocol.FieldError {
	err := protocol.DecodeStrict(raw, v)
	if err == nil {
		return nil
	}
	var fe *protocol.FieldError
	if !errors.As(err, &fe) {
		return &protocol.FieldError{Reason: err.Error()}
	}
	if fe.Err == protocol.ErrSyntax {
		return fe
	}
	if name := firstUnknown(raw, v); name != "" {
		return &protocol.FieldError{Field: name, Err: protocol.ErrUnknownMember}
	}
	return fe
}

// firstUnknown returns the first member of raw, in sorted order, that v
// does not declare; only asked once a decode has failed.
func firstUnknown(raw json.RawMessage, v any) string {
	var members map[string]json.RawMessage
	if protocol.DecodeStrict(raw, &members) != nil {
		return ""
	}
	known := protocol.MemberNames(v)
	for _, k := range slices.Sorted(maps.Keys(members)) {
		if !slices.Contains(known, k) {
			return k
		}
	}
	return ""
}

// structPath drops array indexes from a member path ("agents[1]" is
// "agents"), as the messages always named members.
func structPath(field string) string {
	for {
		i := strings.IndexByte(field, '[')
		if i < 0 {
			return field
		}
		j := strings.IndexByte(field[i:], ']')
		if j < 0 {
			return field
		}
		field = field[:i] + field[i+j+1:]
	}
}

// paramKind words a FieldError's Want as these messages do.
func paramKind(want string) string {
	if want == "an integer" {
		return "a whole number"
	}
	return want
}

// paramError words what DecodeMembers found for a method whose members are
// named in takes ("agentId, capability, params, timeoutMs"): an unknown
// member, a missing required one (tagged ",required"), a duplicate, or a
// string member of another type. Members with a message of their own are
// the caller's.
func paramError(method, takes string, fe *protocol.FieldError) error {
	switch {
	case fe.Err == protocol.ErrUnknownMember:
		return Errorf(CodeInvalidParams, "invalid params: unknown field %q (%s takes %s)", fe.Name(), method, takes)
	case fe.Err == protocol.ErrMissingMember:
		return Errorf(CodeInvalidParams, "invalid params: %q is required", fe.Field)
	case fe.Err == protocol.ErrWrongType && fe.Want == "a string":
		return Errorf(CodeInvalidParams, "invalid params: %q must be a string", structPath(fe.Field))
	}
	return Errorf(CodeInvalidParams, "invalid params: %v", fe)
}

// quotedMembers lists the members of the struct v points to, sorted and
// quoted: `"filter", "payload", "timeoutMs", "topic"`.
func quotedMembers(v any) string {
	names := slices.Sorted(slices.Values(protocol.MemberNames(v)))
	for i, n := range names {
		names[i] = fmt.Sprintf("%q", n)
	}
	return strings.Join(names, ", ")
}

// nonEmpty checks a required string member (its presence is the
// decoder's: tagged ",required") is non-empty and short.
func nonEmpty(name, v string) error {
	switch {
	case v == "":
		return Errorf(CodeInvalidParams, "invalid params: %q is empty", name)
	case len(v) > MaxTopicLen:
		return Errorf(CodeInvalidParams, "invalid params: %q is longer than %d bytes", name, MaxTopicLen)
	}
	return nil
}

// paramShape is how one method words what is wrong with its params.
type paramShape struct {
	method string
	object string // the message for params that are not an object
	takes  string // the members, as an unknown-member message lists them
	// member, if set, words a problem with one member its own way; nil
	// (or a nil error) leaves it to paramError.
	member func(fe *protocol.FieldError) error
}

// objectShape words params as "mesh.x takes an object {"a", "b"}", the
// members being those of the struct v points to.
func objectShape(method string, v any) paramShape {
	takes := quotedMembers(v)
	return paramShape{method: method, object: fmt.Sprintf("%s takes an object {%s}", method, takes), takes: takes}
}

// decode decodes params that must be an object into the struct v points
// to (DecodeMembers) and answers what is wrong in the method's words.
func (s paramShape) decode(raw json.RawMessage, v any) error {
	if len(raw) == 0 || raw[0] != '{' {
		return Errorf(CodeInvalidParams, "invalid params: %s", s.object)
	}
	fe := DecodeMembers(raw, v)
	switch {
	case fe == nil:
		return nil
	case fe.Err == protocol.ErrSyntax:
		return Errorf(CodeInvalidParams, "invalid params: %s", s.object)
	case s.member != nil && !(fe.Field == fe.Name() && (fe.Err == protocol.ErrUnknownMember || fe.Err == protocol.ErrDuplicateMember)):
		// Members with words of their own: anything wrong in or with
		// them but a top-level unknown or repeated name.
		if err := s.member(fe); err != nil {
			return err
		}
	}
	return paramError(s.method, s.takes, fe)
}

// under reports whether a FieldError is about member name or something
// inside it.
func under(fe *protocol.FieldError, name string) bool {
	rest, ok := strings.CutPrefix(fe.Field, name)
	return ok && (rest == "" || rest[0] == '.' || rest[0] == '[')
}

// timeoutMember words a timeoutMs of the wrong type for mesh.call and
// mesh.discover: a number that is not a whole one in range gets range's
// message, anything else "must be a number of milliseconds".
func timeoutMember(rangeError func() error) func(*protocol.FieldError) error {
	return func(fe *protocol.FieldError) error {
		switch {
		case !under(fe, "timeoutMs"):
			return nil
		case strings.HasPrefix(fe.Got, "number "):
			return rangeError()
		}
		return Errorf(CodeInvalidParams, `invalid params: "timeoutMs" must be a number of milliseconds`)
	}
}
