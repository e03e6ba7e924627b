package protocol

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
)

// DecodeOption configures one DecodeStrict. It works on a copy of the
// configuration so that nothing of a decode escapes to the heap.
type DecodeOption func(decodeConfig) decodeConfig

type decodeConfig struct {
	allowUnknown bool
	alias        bool
	// known are strings the caller holds already: a string value equal
	// to one of them (as written, without escapes) is decoded as that
	// string rather than a copy of it.
	known [2]string
	// canonical: the data passed sign.CheckCanonical (scanner.canonical).
	canonical bool
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

// AliasInput lets the json.RawMessage values decoded share data's memory
// instead of each being a copy, as encoding/json makes. Use it only for
// data nobody modifies or reuses while a decoded value lives: a buffer a
// reader fills again for the next frame must not be decoded with it.
func AliasInput() DecodeOption {
	return func(c decodeConfig) decodeConfig { c.alias = true; return c }
}

// DecodeStrict decodes the JSON value data into v, which must be a non-nil
// pointer, by v's json struct tags, and refuses what encoding/json would
// let through:
//
//   - member names match tags exactly (encoding/json folds case);
//   - a member given twice is an error (encoding/json keeps the last);
//   - a member the type does not declare is an error unless AllowUnknown;
//   - every member's JSON type must fit its field: a string for string
//     kinds, true or false for bool, an integer in range for integer kinds,
//     a number for floats, an array for slices, an object for structs and
//     maps with string keys; json.RawMessage takes any value, and types
//     with their own UnmarshalJSON (time.Time) judge their value;
//   - a field tagged `json:"name,required"` must be present and not null.
//
// null is accepted for any member and means what encoding/json makes of
// it: it leaves strings, numbers, booleans and structs as they were, sets
// pointers, slices and maps to nil, and a json.RawMessage keeps the four
// bytes "null". For a required member null is the same as absent, as
// JSON-RPC reads "params": null. Whatever DecodeStrict accepts,
// encoding/json.Unmarshal decodes to the same value.
//
// Errors are *FieldError, wrapping one of ErrSyntax, ErrWrongType,
// ErrUnknownMember, ErrDuplicateMember, ErrMissingMember, ErrTrailingData
// or ErrInvalidValue. Only the JSON text is read; the reflection each type
// needs is worked out once and cached.
func DecodeStrict(data []byte, v any, opts ...DecodeOption) error {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return fmt.Errorf("protocol: DecodeStrict needs a non-nil pointer, not %T", v)
	}
	var cfg decodeConfig
	for _, o := range opts {
		cfg = o(cfg)
	}
	return decodeStrict(data, rv, cfg)
}

// decodeStrict is DecodeStrict into rv, a non-nil pointer, configured by
// cfg.
func decodeStrict(data []byte, rv reflect.Value, cfg decodeConfig) error {
	d := decoder{scanner: scanner{data: data, canonical: cfg.canonical}, cfg: cfg}
	err := d.value(planFor(rv.Type().Elem()), rv.Elem())
	if err == nil {
		if d.ws(); d.pos < len(data) {
			err = &FieldError{Err: ErrTrailingData}
		}
	}
	if err != nil {
		return finish(err, data)
	}
	return nil
}

// finish gives a syntax error the description encoding/json has for it,
// so messages read as they always have.
func finish(err error, data []byte) error {
	if err != errSyntax {
		return err
	}
	var raw json.RawMessage
	if jerr := json.Unmarshal(data, &raw); jerr != nil {
		return &FieldError{Err: ErrSyntax, Reason: jerr.Error()}
	}
	return &FieldError{Err: ErrSyntax, Reason: "malformed JSON"}
}

// pathElem is one step from the outer value to the one being decoded: a
// member name, or an array index when name is empty.
type pathElem struct {
	name string
	idx  int
}

type decoder struct {
	scanner
	cfg decodeConfig
	// The path is kept in a fixed array while it is short, so that the
	// decoder stays on the stack; deeper steps go to more.
	path  [16]pathElem
	more  []pathElem
	steps int
}

func (d *decoder) push(e pathElem) {
	if d.steps < len(d.path) {
		d.path[d.steps] = e
	} else {
		d.more = append(d.more[:d.steps-len(d.path)], e)
	}
	d.steps++
}

func (d *decoder) pop() { d.steps-- }

// step returns the innermost step.
func (d *decoder) step() *pathElem { return d.stepAt(d.steps - 1) }

func (d *decoder) stepAt(i int) *pathElem {
	if i < len(d.path) {
		return &d.path[i]
	}
	return &d.more[i-len(d.path)]
}

// at renders the current path as "capabilities[0].name".
func (d *decoder) at() string {
	var b strings.Builder
	for i := 0; i < d.steps; i++ {
		e := d.stepAt(i)
		if e.name == "" {
			b.WriteByte('[')
			b.WriteString(strconv.Itoa(e.idx))
			b.WriteByte(']')
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(e.name)
	}
	return b.String()
}

// wrongType reports the value under pos as the wrong JSON type for p.
// number is the text of a number that did not fit p.
func (d *decoder) wrongType(p *plan, c byte, number []byte) error {
	var got string
	switch {
	case c == '"':
		got = "string"
	case c == 't' || c == 'f':
		got = "bool"
	case c == '{':
		got = "object"
	case c == '[':
		got = "array"
	case number != nil:
		got = "number " + string(number)
	case c == '-' || isDigit(c):
		got = "number"
	default:
		return errSyntax
	}
	want := wantKind(p.t)
	if p.kind == kText {
		want = "a string"
	}
	return &FieldError{Field: d.at(), Want: want, Got: got, Err: ErrWrongType}
}

// value decodes the next value into v, which has plan p.
func (d *decoder) value(p *plan, v reflect.Value) error {
	c := d.peek()
	if c == 'n' && p.kind != kJSON && p.kind != kRaw && p.kind != kDelegate {
		if err := d.literal("null"); err != nil {
			return err
		}
		switch p.kind {
		case kPointer, kSlice, kMap:
			v.SetZero()
		}
		return nil
	}
	switch p.kind {
	case kString:
		s, err := d.stringValue(p, c)
		if err != nil {
			return err
		}
		v.SetString(s)
	case kBool:
		switch c {
		case 't':
			if err := d.literal("true"); err != nil {
				return err
			}
			v.SetBool(true)
		case 'f':
			if err := d.literal("false"); err != nil {
				return err
			}
			v.SetBool(false)
		default:
			return d.wrongType(p, c, nil)
		}
	case kInt, kUint, kFloat:
		return d.number(p, v, c)
	case kRaw:
		raw, err := d.skip()
		if err != nil {
			return err
		}
		if d.cfg.alias {
			// Capped, so that appending to the value copies rather
			// than overwrite the input after it.
			raw = raw[:len(raw):len(raw)]
		} else {
			raw = bytes.Clone(raw)
		}
		v.SetBytes(raw)
	case kJSON:
		raw, err := d.skip()
		if err != nil {
			return err
		}
		if err := v.Addr().Interface().(json.Unmarshaler).UnmarshalJSON(raw); err != nil {
			return d.invalid(err)
		}
	case kText:
		s, err := d.stringValue(p, c)
		if err != nil {
			return err
		}
		if err := v.Addr().Interface().(encoding.TextUnmarshaler).UnmarshalText([]byte(s)); err != nil {
			return d.invalid(err)
		}
	case kPointer:
		if v.IsNil() {
			v.Set(reflect.New(p.t.Elem()))
		}
		return d.value(p.elem, v.Elem())
	case kSlice:
		if c != '[' {
			return d.wrongType(p, c, nil)
		}
		return d.slice(p, v)
	case kMap:
		if c != '{' {
			return d.wrongType(p, c, nil)
		}
		return d.mapValue(p, v)
	case kStruct:
		if c != '{' {
			return d.wrongType(p, c, nil)
		}
		return d.object(p, v)
	default:
		return d.delegate(v)
	}
	return nil
}

// stringValue reads a string for a field of plan p; c is its first byte.
func (d *decoder) stringValue(p *plan, c byte) (string, error) {
	if c != '"' {
		return "", d.wrongType(p, c, nil)
	}
	raw, slow, err := d.str()
	if err != nil {
		return "", err
	}
	if !slow {
		b := raw[1 : len(raw)-1]
		for _, k := range d.cfg.known {
			if k != "" && string(b) == k { // which does not allocate
				return k, nil
			}
		}
	}
	return unquote(raw, slow)
}

// number decodes a JSON number into an integer or float field the way
// encoding/json does: integers must be written without fraction or
// exponent and fit the field.
func (d *decoder) number(p *plan, v reflect.Value, c byte) error {
	if c != '-' && !isDigit(c) {
		return d.wrongType(p, c, nil)
	}
	n, err := d.num()
	if err != nil {
		return err
	}
	switch p.kind {
	case kInt:
		i, err := strconv.ParseInt(string(n), 10, 64)
		if err != nil || v.OverflowInt(i) {
			return d.wrongType(p, c, n)
		}
		v.SetInt(i)
	case kUint:
		u, err := strconv.ParseUint(string(n), 10, 64)
		if err != nil || v.OverflowUint(u) {
			return d.wrongType(p, c, n)
		}
		v.SetUint(u)
	default:
		f, err := strconv.ParseFloat(string(n), v.Type().Bits())
		if err != nil || v.OverflowFloat(f) {
			return d.wrongType(p, c, n)
		}
		v.SetFloat(f)
	}
	return nil
}

// invalid reports an error from a type's own UnmarshalJSON or
// UnmarshalText.
func (d *decoder) invalid(err error) error {
	return &FieldError{Field: d.at(), Reason: truncate(strings.TrimPrefix(err.Error(), "json: "), 200), Err: ErrInvalidValue}
}

// delegate hands a value the decoder has no rules of its own for (an
// interface, a byte slice, an array, a map with other keys) to
// encoding/json, after checking its syntax.
func (d *decoder) delegate(v reflect.Value) error {
	raw, err := d.skip()
	if err != nil {
		return err
	}
	err = json.Unmarshal(raw, v.Addr().Interface())
	if err == nil {
		return nil
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		field := d.at()
		if te.Field != "" {
			field = strings.TrimPrefix(field+"."+te.Field, ".")
		}
		return &FieldError{Field: field, Want: wantKind(te.Type), Got: te.Value, Err: ErrWrongType}
	}
	return d.invalid(err)
}

func (d *decoder) slice(p *plan, v reflect.Value) error {
	if err := d.enter(); err != nil {
		return err
	}
	d.pos++
	if v.IsNil() {
		v.Set(reflect.MakeSlice(p.t, 0, 0))
	} else {
		v.SetLen(0)
	}
	if d.peek() == ']' {
		d.pos++
		d.depth--
		return nil
	}
	d.push(pathElem{})
	for i := 0; ; i++ {
		d.step().idx = i
		if v.Len() == v.Cap() {
			v.Grow(1)
		}
		v.SetLen(i + 1)
		e := v.Index(i)
		e.SetZero()
		if err := d.value(p.elem, e); err != nil {
			return err
		}
		switch d.peek() {
		case ',':
			d.pos++
		case ']':
			d.pos++
			d.depth--
			d.pop()
			return nil
		default:
			return errSyntax
		}
	}
}

// key reads a member name and the colon after it. The name aliases the
// input unless it had escapes.
func (d *decoder) key() ([]byte, error) {
	if d.peek() != '"' {
		return nil, errSyntax
	}
	raw, slow, err := d.str()
	if err != nil {
		return nil, err
	}
	if err := d.expect(':'); err != nil {
		return nil, err
	}
	if !slow {
		return raw[1 : len(raw)-1], nil
	}
	s, err := unquote(raw, true)
	return []byte(s), err
}

func (d *decoder) mapValue(p *plan, v reflect.Value) error {
	if err := d.enter(); err != nil {
		return err
	}
	d.pos++
	if v.IsNil() {
		v.Set(reflect.MakeMap(p.t))
	}
	var seen map[string]bool
	if v.Len() > 0 {
		seen = map[string]bool{} // the map had members before: tell ours apart
	}
	if d.peek() == '}' {
		d.pos++
		d.depth--
		return nil
	}
	kt, et := p.t.Key(), p.t.Elem()
	d.push(pathElem{})
	for {
		name, err := d.key()
		if err != nil {
			return err
		}
		k := reflect.ValueOf(string(name)).Convert(kt)
		d.step().name = string(name)
		if seen != nil && seen[string(name)] || seen == nil && v.MapIndex(k).IsValid() {
			return &FieldError{Field: d.at(), Err: ErrDuplicateMember}
		}
		if seen != nil {
			seen[string(name)] = true
		}
		e := reflect.New(et).Elem()
		if err := d.value(p.elem, e); err != nil {
			return err
		}
		v.SetMapIndex(k, e)
		switch d.peek() {
		case ',':
			d.pos++
		case '}':
			d.pos++
			d.depth--
			d.pop()
			return nil
		default:
			return errSyntax
		}
	}
}

// object decodes a JSON object into a struct.
func (d *decoder) object(p *plan, v reflect.Value) error {
	if err := d.enter(); err != nil {
		return err
	}
	d.pos++
	var seen, present bitset
	seen.init(len(p.fields))
	present.init(len(p.fields))
	var unknown []string
	if d.peek() == '}' {
		d.pos++
	} else {
		for {
			name, err := d.key()
			if err != nil {
				return err
			}
			if i := p.field(name); i >= 0 {
				f := &p.fields[i]
				if seen.has(i) {
					return d.memberError(f.name, ErrDuplicateMember)
				}
				seen.set(i)
				if d.peek() != 'n' {
					present.set(i)
				}
				d.push(pathElem{name: f.name})
				if err := d.value(f.plan, fieldByIndex(v, f.index)); err != nil {
					return err
				}
				d.pop()
			} else {
				if !d.cfg.allowUnknown {
					return d.memberError(string(name), ErrUnknownMember)
				}
				for _, u := range unknown {
					if u == string(name) {
						return d.memberError(u, ErrDuplicateMember)
					}
				}
				unknown = append(unknown, string(name))
				if _, err := d.skip(); err != nil {
					return err
				}
			}
			if c := d.peek(); c == ',' {
				d.pos++
				continue
			} else if c != '}' {
				return errSyntax
			}
			d.pos++
			break
		}
	}
	d.depth--
	for _, i := range p.required {
		if !present.has(i) {
			return d.memberError(p.fields[i].name, ErrMissingMember)
		}
	}
	return nil
}

// memberError reports a member of the object being decoded.
func (d *decoder) memberError(name string, kind error) error {
	parent := d.at()
	d.push(pathElem{name: name})
	return &FieldError{Field: d.at(), Err: kind, parent: parent, member: name}
}

// fieldByIndex returns the field at index, allocating embedded pointers on
// the way as encoding/json does.
func fieldByIndex(v reflect.Value, index []int) reflect.Value {
	if len(index) == 1 {
		return v.Field(index[0])
	}
	for i, x := range index {
		if i > 0 && v.Kind() == reflect.Pointer {
			if v.IsNil() {
				v.Set(reflect.New(v.Type().Elem()))
			}
			v = v.Elem()
		}
		v = v.Field(x)
	}
	return v
}

// bitset marks struct fields; most structs fit in one word.
type bitset struct {
	w    uint64
	more []bool
}

func (b *bitset) init(n int) {
	if n > 64 {
		b.more = make([]bool, n)
	}
}

func (b *bitset) has(i int) bool {
	if b.more != nil {
		return b.more[i]
	}
	return b.w&(1<<i) != 0
}

func (b *bitset) set(i int) {
	if b.more != nil {
		b.more[i] = true
		return
	}
	b.w |= 1 << i
}
