package protocol

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// DecodeOption configures one DecodeStrict.
type DecodeOption func(decodeConfig) decodeConfig

type decodeConfig struct {
	allowUnknown bool
	shareRaw     bool
}

// AllowUnknown lets objects carry members the Go type does not declare;
// they are checked for syntax and duplicates, then skipped. Formats that
// others extend (capability objects, payloads of seed 001 and 002) decode
// with it; formats we own alone (JSON-RPC params of mesh.*, capability and
// policy files) do not, so a misspelt member is an error rather than a
// setting silently dropped.
func AllowUnknown() DecodeOption {
	return func(c decodeConfig) decodeConfig { c.allowUnknown = true; return c }
}

// shareRaw makes each json.RawMessage in v a slice of data rather than a
// copy, its capacity cut to its length so that an append copies. It is for
// data the caller owns and leaves unchanged while v is in use: an
// envelope's payload, itself a copy of the received bytes, shares its
// bytes with the request's params or the response's result
// (DecodeRequest, DecodeResponse), where a copy each was a sixth of the
// bytes a signed call allocates.
func shareRaw() DecodeOption {
	return func(c decodeConfig) decodeConfig { c.shareRaw = true; return c }
}

// sharedRaw decodes a json.RawMessage as the exact bytes of the input.
// jsonv2.Unmarshal reads a []byte in place, so the value ReadValue returns
// is a slice of data (TestShareRaw holds it).
var sharedRaw = jsonv2.WithUnmarshalers(jsonv2.UnmarshalFromFunc(func(dec *jsontext.Decoder, r *json.RawMessage) error {
	v, err := dec.ReadValue()
	if err != nil {
		return err
	}
	*r = json.RawMessage(v[:len(v):len(v)])
	return nil
}))

// The sets of options DecodeStrict runs encoding/json/v2 with, joined
// once. v2 matches member names exactly, refuses duplicate names and
// invalid UTF-8 by default; unknown members are refused unless
// AllowUnknown.
var (
	strictOpts        = jsonv2.RejectUnknownMembers(true)
	lenientOpts       = jsonv2.RejectUnknownMembers(false)
	strictSharedOpts  = jsonv2.JoinOptions(strictOpts, sharedRaw)
	lenientSharedOpts = jsonv2.JoinOptions(lenientOpts, sharedRaw)
)

// DecodeStrict decodes the JSON value data into v, which must be a non-nil
// pointer, by v's json struct tags, and refuses what encoding/json (v1)
// would let through. It is encoding/json/v2 (github.com/go-json-experiment/json)
// with unknown members refused, plus the ",required" check:
//
//   - member names match tags exactly (encoding/json folds case);
//   - a member given twice is an error (encoding/json keeps the last);
//   - invalid UTF-8 is an error (encoding/json replaces it);
//   - a member the type does not declare is an error unless AllowUnknown;
//   - every member's JSON type must fit its field: a string for string
//     kinds, true or false for bool, an integer in range for integer kinds,
//     a number for floats, an array for slices, an object for structs and
//     maps; json.RawMessage takes any value, and types with their own
//     UnmarshalJSON (time.Time) judge their value;
//   - a member of the outer struct tagged `json:"name,required"` must be
//     present and not null.
//
// null is accepted for any member and sets it to its zero value (a
// json.RawMessage keeps the four bytes "null"). For a required member null
// is the same as absent, as JSON-RPC reads "params": null. Whatever
// DecodeStrict accepts, encoding/json.Unmarshal decodes to the same value
// in a fresh v.
//
// Errors are *FieldError, wrapping one of ErrSyntax, ErrWrongType,
// ErrUnknownMember, ErrDuplicateMember, ErrMissingMember, ErrTrailingData
// or ErrInvalidValue.
func DecodeStrict(data []byte, v any, opts ...DecodeOption) error {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return fmt.Errorf("protocol: DecodeStrict needs a non-nil pointer, not %T", v)
	}
	var cfg decodeConfig
	for _, o := range opts {
		cfg = o(cfg)
	}
	o := strictOpts
	switch {
	case cfg.allowUnknown && cfg.shareRaw:
		o = lenientSharedOpts
	case cfg.allowUnknown:
		o = lenientOpts
	case cfg.shareRaw:
		o = strictSharedOpts
	}
	if err := jsonv2.Unmarshal(data, v, o); err != nil {
		return fieldError(err, data)
	}
	if req := infoOf(rv.Type().Elem()).required; len(req) > 0 {
		return checkRequired(data, req)
	}
	return nil
}

// requiredReader is checkRequired's decoder, kept in requiredReaders: the
// bus checks every subscriber's answer, and a decoder a check was a tenth
// of the allocations of a bus round trip.
type requiredReader struct {
	src bytes.Reader
	dec jsontext.Decoder
}

var requiredReaders = sync.Pool{New: func() any { return new(requiredReader) }}

// maxKeptRequiredBuf bounds the buffer a pooled decoder keeps: one that
// read a large object does not pin its size.
const maxKeptRequiredBuf = 4 << 10

// checkRequired reads the members of the object data (which decoded
// already) and reports the first of required absent or null.
func checkRequired(data []byte, required []string) error {
	rr := requiredReaders.Get().(*requiredReader)
	rr.src.Reset(data)
	rr.dec.Reset(&rr.src)
	defer func() {
		rr.src.Reset(nil)
		if len(data) <= maxKeptRequiredBuf {
			requiredReaders.Put(rr)
		}
	}()
	dec := &rr.dec
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '{' {
		return nil // null, or not an object: decoding said what it was
	}
	var present uint64 // bit i: required[i] present and not null
	for dec.PeekKind() != '}' {
		name, err := dec.ReadToken()
		if err != nil {
			return fieldError(err, data)
		}
		i := indexOf(required, name.String())
		if i >= 0 && dec.PeekKind() != 'n' {
			present |= 1 << i
		}
		if err := dec.SkipValue(); err != nil {
			return fieldError(err, data)
		}
	}
	for i, name := range required {
		if present&(1<<i) == 0 {
			return &FieldError{Field: name, Err: ErrMissingMember, member: name}
		}
	}
	return nil
}

func indexOf(names []string, s string) int {
	for i, n := range names {
		if n == s {
			return i
		}
	}
	return -1
}

// fieldError turns an error of encoding/json/v2 into a *FieldError.
func fieldError(err error, data []byte) error {
	var se *jsontext.SyntacticError
	if errors.As(err, &se) {
		if errors.Is(se.Err, jsontext.ErrDuplicateName) {
			return &FieldError{Field: pointerPath(se.JSONPointer), Err: ErrDuplicateMember}
		}
		return syntaxError(se, data)
	}
	var me *jsonv2.SemanticError
	if !errors.As(err, &me) {
		return &FieldError{Err: ErrInvalidValue, Reason: truncate(strings.TrimPrefix(err.Error(), "json: "), 200)}
	}
	field := pointerPath(me.JSONPointer)
	if me.Err == jsonv2.ErrUnknownName {
		parent, member := field, ""
		if i := strings.LastIndexByte(string(me.JSONPointer), '/'); i >= 0 {
			parent = pointerPath(me.JSONPointer[:i])
			member = me.JSONPointer.LastToken()
		}
		return &FieldError{Field: field, Err: ErrUnknownMember, parent: parent, member: member}
	}
	var serr *jsontext.SyntacticError
	if errors.As(me.Err, &serr) {
		return syntaxError(serr, data)
	}
	if want, got, ok := wrongType(me); ok {
		return &FieldError{Field: field, Want: want, Got: got, Err: ErrWrongType}
	}
	reason := "invalid value"
	if me.Err != nil {
		reason = strings.TrimPrefix(me.Err.Error(), "json: ")
	}
	return &FieldError{Field: field, Reason: truncate(reason, 200), Err: ErrInvalidValue}
}

var (
	jsonU = reflect.TypeFor[json.Unmarshaler]()
	textU = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// wrongType reports whether me is a JSON value of the wrong type for its
// Go type, and names both in FieldError's words.
func wrongType(me *jsonv2.SemanticError) (want, got string, ok bool) {
	t := me.GoType
	if t == nil || me.JSONKind == 0 || me.JSONKind == 'n' {
		return "", "", false
	}
	switch me.JSONKind {
	case '"':
		got = "string"
	case 't', 'f':
		got = "bool"
	case '{':
		got = "object"
	case '[':
		got = "array"
	case '0':
		got = "number"
	}
	want = wantKind(t)
	pt := reflect.PointerTo(t)
	if t.Implements(jsonU) || pt.Implements(jsonU) {
		return "", "", false // its own UnmarshalJSON judged the value
	}
	if t.Implements(textU) || pt.Implements(textU) {
		return "a string", got, me.JSONKind != '"'
	}
	switch me.Err {
	case nil:
	case strconv.ErrSyntax, strconv.ErrRange:
		if me.JSONKind == '0' && me.JSONValue != nil {
			got = "number " + string(me.JSONValue)
		}
	default:
		return "", "", false
	}
	return want, got, true
}

// syntaxError words malformed JSON as encoding/json does, so messages read
// as they always have; a value followed by more is ErrTrailingData.
func syntaxError(se *jsontext.SyntacticError, data []byte) error {
	if _, err := jsontext.NewDecoder(bytes.NewReader(data)).ReadValue(); err == nil {
		return &FieldError{Err: ErrTrailingData}
	}
	var raw json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return &FieldError{Err: ErrSyntax, Reason: err.Error()}
	}
	return &FieldError{Err: ErrSyntax, Reason: strings.TrimPrefix(se.Error(), "jsontext: ")}
}

// pointerPath renders a JSON Pointer as FieldError.Field does:
// "/capabilities/0/name" is "capabilities[0].name". A token of digits is
// taken for an array index.
func pointerPath(p jsontext.Pointer) string {
	var b strings.Builder
	for tok := range p.Tokens() {
		if tok != "" && strings.Trim(tok, "0123456789") == "" {
			b.WriteString("[" + tok + "]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(tok)
	}
	return b.String()
}

// typeInfo is what DecodeStrict and MemberNames need of a struct type
// beyond v2: its member names and the required ones among them.
type typeInfo struct {
	names, required []string
}

var infos sync.Map // reflect.Type → *typeInfo

// infoOf returns t's typeInfo, worked out once per type.
func infoOf(t reflect.Type) *typeInfo {
	if i, ok := infos.Load(t); ok {
		return i.(*typeInfo)
	}
	info := &typeInfo{}
	if t.Kind() == reflect.Struct {
		var all []member
		all = members(all, t, 0, map[reflect.Type]bool{})
		for _, m := range all {
			if m.visible(all) {
				info.names = append(info.names, m.name)
				if m.required {
					info.required = append(info.required, m.name)
				}
			}
		}
	}
	if len(info.required) > 64 {
		panic(fmt.Sprintf("protocol: %v has more than 64 required members", t))
	}
	infos.Store(t, info)
	return info
}

// member is a JSON member of a struct, found depth embeddings down.
type member struct {
	name             string
	depth            int
	tagged, required bool
}

// visible reports whether m is the member of its name, as encoding/json
// rules: the shallowest wins, a tagged one among equals; a tie hides all.
func (m member) visible(all []member) bool {
	rivals, tagged := 0, 0
	for _, o := range all {
		switch {
		case o.name != m.name:
		case o.depth < m.depth:
			return false
		case o.depth == m.depth:
			rivals++
			if o.tagged {
				tagged++
			}
		}
	}
	return rivals == 1 || m.tagged && tagged == 1
}

// members appends the JSON members of struct t in declaration order:
// exported fields by tag name or Go name, "-" skipped, the fields of
// untagged embedded structs promoted.
func members(all []member, t reflect.Type, depth int, seen map[reflect.Type]bool) []member {
	if seen[t] {
		return all
	}
	seen[t] = true
	for i := 0; i < t.NumField(); i++ {
		sf := t.Field(i)
		tag := sf.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		et := sf.Type
		if et.Kind() == reflect.Pointer {
			et = et.Elem()
		}
		if sf.Anonymous && name == "" && et.Kind() == reflect.Struct {
			all = members(all, et, depth+1, seen)
			continue
		}
		if !sf.IsExported() {
			continue
		}
		m := member{name: name, depth: depth, tagged: name != ""}
		if name == "" {
			m.name = sf.Name
		}
		m.required = slices.Contains(strings.Split(opts, ","), "required")
		all = append(all, m)
	}
	return all
}

// MemberNames returns the member names DecodeStrict matches for the struct
// v points to (or is), in declaration order, promoted members included.
// It returns nil for other types.
func MemberNames(v any) []string {
	t := reflect.TypeOf(v)
	if t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.Kind() != reflect.Struct {
		return nil
	}
	return slices.Clone(infoOf(t).names)
}
