package protocol

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/go-json-experiment/json/jsontext"
)

type strictInner struct {
	A string `json:"a"`
	B []int  `json:"b,omitempty"`
}

type StrictEmbed struct {
	E int `json:"e"`
}

// strictTarget has a field of every kind DecodeStrict has rules for, and a
// few it hands to encoding/json.
type strictTarget struct {
	StrictEmbed
	S     string          `json:"s"`
	I     int8            `json:"i"`
	U     uint16          `json:"u"`
	F     float32         `json:"f"`
	D     float64         `json:"d"`
	B     bool            `json:"b"`
	P     *string         `json:"p"`
	L     []string        `json:"l"`
	M     map[string]int  `json:"m"`
	R     json.RawMessage `json:"r"`
	N     strictInner     `json:"n"`
	NP    *strictInner    `json:"np"`
	NL    []strictInner   `json:"nl"`
	T     time.Time       `json:"t"`
	TP    *time.Time      `json:"tp"`
	Any   any             `json:"any"`
	Bytes []byte          `json:"bytes"`
	Typ   MessageType     `json:"typ"`
	Arr   [2]int          `json:"arr"`
	Skip  string          `json:"-"`
	Plain string
	priv  string //nolint:unused // unexported fields are never decoded
}

type strictRequired struct {
	ID     string          `json:"id,required"`
	Params json.RawMessage `json:"params,omitempty"`
	Opt    *int            `json:"opt"`
}

func TestDecodeStrict(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		opts     []DecodeOption
		want     error  // sentinel, nil for success
		msg      string // part of the error message
	}{
		{"empty object", `{}`, nil, nil, ""},
		{"all kinds", `{"e":1,"s":"x\u0041","i":-8,"u":9,"f":1.5,"d":-2e3,"b":true,"p":"q","l":["a"],"m":{"k":1},"r":[1, {"x":null}],
			"n":{"a":"b","b":[1]},"np":{"a":"c"},"nl":[{"a":"d"}],"t":"2025-01-02T03:04:05Z","tp":null,"any":{"z":[1]},"bytes":"AQI=",
			"typ":"request","arr":[1,2],"Plain":"p"}`, nil, nil, ""},
		{"null everywhere", `{"s":null,"i":null,"b":null,"p":null,"l":null,"m":null,"r":null,"n":null,"t":null,"any":null}`, nil, nil, ""},
		{"top-level null", `null`, nil, nil, ""},
		{"whitespace", " \t\n{ \"s\" : \"x\" }\r\n", nil, nil, ""},
		{"case differs", `{"S":"x"}`, nil, ErrUnknownMember, `unknown field "S"`},
		{"case differs, allowed", `{"S":"x"}`, []DecodeOption{AllowUnknown()}, nil, ""},
		{"unknown", `{"s":"x","zz":1}`, nil, ErrUnknownMember, `unknown field "zz"`},
		{"unknown nested", `{"n":{"a":"b","c":1}}`, nil, ErrUnknownMember, `unknown field "c" in "n"`},
		{"unknown in array", `{"nl":[{"a":"b"},{"q":1}]}`, nil, ErrUnknownMember, `unknown field "q" in "nl[1]"`},
		{"unknown allowed", `{"s":"x","zz":{"deep":[1,2,{"a":"}"}]}}`, []DecodeOption{AllowUnknown()}, nil, ""},
		{"duplicate", `{"s":"x","s":"y"}`, nil, ErrDuplicateMember, `duplicate member "s"`},
		{"duplicate by escape", `{"s":"x","\u0073":"y"}`, nil, ErrDuplicateMember, `duplicate member "s"`},
		{"duplicate null", `{"p":null,"p":"y"}`, nil, ErrDuplicateMember, `"p"`},
		{"duplicate unknown", `{"zz":1,"zz":2}`, []DecodeOption{AllowUnknown()}, ErrDuplicateMember, `"zz"`},
		{"duplicate map key", `{"m":{"a":1,"a":2}}`, nil, ErrDuplicateMember, `"m.a"`},
		{"duplicate embedded", `{"e":1,"e":2}`, nil, ErrDuplicateMember, `"e"`},
		{"string for int", `{"i":"1"}`, nil, ErrWrongType, `member "i" must be an integer, not a string`},
		{"fraction for int", `{"i":1.5}`, nil, ErrWrongType, `not a non-integer or out-of-range number`},
		{"overflow int8", `{"i":128}`, nil, ErrWrongType, `out-of-range`},
		{"negative uint", `{"u":-1}`, nil, ErrWrongType, `member "u" must be an integer`},
		{"float32 overflow", `{"f":1e39}`, nil, ErrWrongType, `"f" must be a number`},
		{"number for string", `{"s":1}`, nil, ErrWrongType, `member "s" must be a string, not a number`},
		{"object for string", `{"typ":{}}`, nil, ErrWrongType, `"typ" must be a string, not an object`},
		{"string for bool", `{"b":"true"}`, nil, ErrWrongType, `must be a boolean, not a string`},
		{"object for slice", `{"l":{}}`, nil, ErrWrongType, `"l" must be an array, not an object`},
		{"number in slice", `{"l":["a",2]}`, nil, ErrWrongType, `"l[1]" must be a string, not a number`},
		{"array for struct", `{"n":[]}`, nil, ErrWrongType, `"n" must be an object, not an array`},
		{"deep wrong type", `{"nl":[{"b":[1,"x"]}]}`, nil, ErrWrongType, `"nl[0].b[1]" must be an integer`},
		{"array for map", `{"m":[]}`, nil, ErrWrongType, `"m" must be an object, not an array`},
		{"top-level array", `[]`, nil, ErrWrongType, `must be an object, not an array`},
		{"delegated wrong type", `{"arr":["x"]}`, nil, ErrWrongType, `"arr[0]" must be an integer, not a string`},
		{"bad time", `{"t":"yesterday"}`, nil, ErrInvalidValue, `member "t"`},
		{"syntax", `{"s":}`, nil, ErrSyntax, `invalid character '}'`},
		{"syntax in skipped", `{"zz":[1,]}`, []DecodeOption{AllowUnknown()}, ErrSyntax, `invalid character`},
		{"bad escape", `{"s":"\x"}`, nil, ErrSyntax, ``},
		{"control char", "{\"s\":\"a\x01\"}", nil, ErrSyntax, ``},
		{"leading zero", `{"i":01}`, nil, ErrSyntax, ``},
		{"empty", ``, nil, ErrSyntax, `unexpected end of JSON input`},
		{"truncated", `{"s":"x"`, nil, ErrSyntax, `unexpected end`},
		{"trailing", `{} {}`, nil, ErrTrailingData, `trailing data`},
		{"bad literal", `{"b":tru}`, nil, ErrSyntax, ``},
		{"too deep", `{"r":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}`, nil, ErrSyntax, `depth`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var v strictTarget
			err := DecodeStrict([]byte(tc.in), &v, tc.opts...)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("DecodeStrict(%s): %v", tc.in, err)
				}
				if tc.opts == nil { // encoding/json reads "S" as "s"
					checkAgrees(t, []byte(tc.in), &v)
				}
				return
			}
			var fe *FieldError
			if !errors.Is(err, tc.want) || !errors.As(err, &fe) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("DecodeStrict(%.80s) = %v, want %v mentioning %q", tc.in, err, tc.want, tc.msg)
			}
		})
	}
}

// checkAgrees asserts that encoding/json decodes in to what DecodeStrict
// decoded into got.
func checkAgrees(t *testing.T, in []byte, got *strictTarget) {
	t.Helper()
	var want strictTarget
	if err := json.Unmarshal(in, &want); err != nil {
		t.Fatalf("DecodeStrict accepted %q, encoding/json refused it: %v", in, err)
	}
	if !reflect.DeepEqual(*got, want) {
		t.Fatalf("decoders disagree on %q:\n strict %+v\n json   %+v", in, *got, want)
	}
}

func TestDecodeStrictValues(t *testing.T) {
	var v strictTarget
	in := `{"e":7,"s":"\u00e9\n","p":"q","l":[],"m":{},"r":null,"n":null,"Plain":"x","tp":null}`
	if err := DecodeStrict([]byte(in), &v); err != nil {
		t.Fatal(err)
	}
	switch {
	case v.E != 7 || v.S != "é\n" || v.P == nil || *v.P != "q" || v.Plain != "x":
		t.Fatalf("scalars %+v", v)
	case v.L == nil || len(v.L) != 0 || v.M == nil || len(v.M) != 0:
		t.Fatalf("an empty array or object must decode to an empty, non-nil value: %#v %#v", v.L, v.M)
	case string(v.R) != "null":
		t.Fatalf("RawMessage null = %q, want the bytes null", v.R)
	}
	// null sets a value to its zero value, as encoding/json/v2 does.
	v.S, v.I = "cleared", 3
	if err := DecodeStrict([]byte(`{"s":null,"i":null,"p":null}`), &v); err != nil {
		t.Fatal(err)
	}
	if v.S != "" || v.I != 0 || v.P != nil {
		t.Fatalf("after nulls: %+v", v)
	}
}

func TestDecodeStrictRequired(t *testing.T) {
	for _, tc := range []struct{ in, err string }{
		{`{"id":"a"}`, ""},
		{`{"id":"a","params":null,"opt":null}`, ""},
		{`{}`, `member "id" is required`},
		{`{"id":null}`, `member "id" is required`},
		{`{"params":{}}`, `member "id" is required`},
	} {
		var v strictRequired
		err := DecodeStrict([]byte(tc.in), &v)
		if tc.err == "" && err != nil || tc.err != "" && (err == nil || !errors.Is(err, ErrMissingMember) || err.Error() != tc.err) {
			t.Errorf("DecodeStrict(%s) = %v, want %q", tc.in, err, tc.err)
		}
	}
}

type recursive struct {
	Name     string       `json:"name"`
	Children []*recursive `json:"children,omitempty"`
}

type outerA struct{ X int }
type outerB struct{ X int }

// shadows mirrors encoding/json's rules for promoted fields: a shallow
// field hides a deep one, and two at one depth hide each other.
type shadows struct {
	outerA
	outerB
	StrictEmbed
	E string `json:"e"`
}

func TestDecodeStrictTypes(t *testing.T) {
	var r recursive
	if err := DecodeStrict([]byte(`{"name":"a","children":[{"name":"b","children":[{"name":"c"}]}]}`), &r); err != nil {
		t.Fatal(err)
	}
	if r.Children[0].Children[0].Name != "c" {
		t.Fatalf("recursive %+v", r)
	}
	var s shadows
	if err := DecodeStrict([]byte(`{"e":"shallow"}`), &s); err != nil || s.E != "shallow" || s.StrictEmbed.E != 0 {
		t.Fatalf("shadowed: %+v %v", s, err)
	}
	if err := DecodeStrict([]byte(`{"X":1}`), &s); !errors.Is(err, ErrUnknownMember) {
		t.Fatalf("an ambiguous promoted name must not be a member: %v", err)
	}
	var list []strictInner
	if err := DecodeStrict([]byte(`[{"a":"x"},{"a":"y"}]`), &list); err != nil || len(list) != 2 || list[1].A != "y" {
		t.Fatalf("top-level array: %+v %v", list, err)
	}
	if err := DecodeStrict([]byte(`{}`), strictTarget{}); err == nil {
		t.Fatal("a non-pointer target must be refused")
	}
}

func TestDecodePayloadMessages(t *testing.T) {
	for _, tc := range []struct{ in, msg string }{
		{`{"action":1}`, `request payload: member "action" must be a string, not a number`},
		{`{"timeout":"1"}`, `request payload: member "timeout" must be an integer, not a string`},
		{`{"timeout":1.5}`, `request payload: member "timeout" must be an integer, not a non-integer or out-of-range number`},
		{`[]`, `request payload must be an object, not an array`},
		{`{"action":`, `request payload is not valid JSON: unexpected end of JSON input`},
		{`{"action":"a","action":"b"}`, `request payload: duplicate member "action"`},
	} {
		var r Request
		err := DecodePayload([]byte(tc.in), "request payload", &r)
		var pe *Error
		if !errors.As(err, &pe) || pe.Code != CodeInvalidMessage || pe.Message != tc.msg {
			t.Errorf("DecodePayload(%s) = %v, want INVALID_MESSAGE %q", tc.in, err, tc.msg)
		}
	}
}

// FuzzDecodeStrict checks that DecodeStrict never panics, that it refuses
// as malformed only what encoding/json/v2's jsontext refuses too (RFC 8259
// with UTF-8 required), and that whatever it accepts encoding/json (v1)
// decodes to the same value.
func FuzzDecodeStrict(f *testing.F) {
	for _, s := range []string{
		`{}`, `null`, `[]`, `{"s":"x","i":1,"u":2,"f":1.5,"d":1e10,"b":false}`,
		`{"p":"x","l":["a","b"],"m":{"a":1},"r":{"x":[1,true,null]},"n":{"a":"b","b":[1,2]}}`,
		`{"np":{"a":"x"},"nl":[{"a":"y"}],"t":"2025-01-01T00:00:00Z","any":[1,"x",{}],"bytes":"AA==","arr":[1]}`,
		`{"e":1,"Plain":"y","typ":"notify","tp":"2025-01-01T00:00:00.5+01:00"}`,
		`{"s":"\u00e9\ud83d\ude00\"","S":1}`, `{"i":-0,"u":65535,"f":-1e-7,"d":1E+2}`,
		"{\"s\":\"\xff\"}", `{"s":"a","s":"b"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		var v strictTarget
		err := DecodeStrict(in, &v)
		if err == nil {
			checkAgrees(t, in, &v)
		} else {
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v is not a *FieldError", err)
			}
			if (errors.Is(err, ErrSyntax) || errors.Is(err, ErrTrailingData)) && jsontext.Value(in).IsValid() {
				t.Fatalf("DecodeStrict called valid JSON %q malformed: %v", in, err)
			}
		}
		var lenient strictTarget
		if err := DecodeStrict(in, &lenient, AllowUnknown()); err == nil && !jsontext.Value(in).IsValid() {
			t.Fatalf("DecodeStrict accepted malformed JSON %q", in)
		}
	})
}

func TestFieldErrorName(t *testing.T) {
	for _, tc := range []struct{ in, field, name string }{
		{`{"zz":1}`, "zz", "zz"},
		{`{"n":{"c":1}}`, "n.c", "c"},
		{`{"l":[1]}`, "l[0]", ""},
		{`{"nl":[{"a":1}]}`, "nl[0].a", "a"},
	} {
		var fe *FieldError
		if err := DecodeStrict([]byte(tc.in), new(strictTarget)); !errors.As(err, &fe) || fe.Field != tc.field || fe.Name() != tc.name {
			t.Errorf("DecodeStrict(%s) = %v: Field %q Name %q, want %q %q", tc.in, err, fe.Field, fe.Name(), tc.field, tc.name)
		}
	}
	if got := MemberNames(&shadows{}); strings.Join(got, ",") != "e" {
		t.Errorf("MemberNames(shadows) = %v, want [e]", got)
	}
	if got := MemberNames(strictRequired{}); strings.Join(got, ",") != "id,params,opt" {
		t.Errorf("MemberNames(strictRequired) = %v", got)
	}
}

type hiddenEmbed struct {
	H string `json:"h"`
}

type oddTypes struct {
	hiddenEmbed
	U  json.Unmarshaler    `json:"u"`
	TU *time.Time          `json:"tu"`
	K  map[MessageType]int `json:"k"`
}

func TestDecodeStrictOddTypes(t *testing.T) {
	var v oddTypes
	if err := DecodeStrict([]byte(`{"h":"x","u":null,"tu":"2025-01-01T00:00:00Z","k":{"request":1}}`), &v); err != nil {
		t.Fatal(err)
	}
	if v.H != "x" || v.TU == nil || v.K[TypeRequest] != 1 {
		t.Fatalf("decoded %+v", v)
	}
	if err := DecodeStrict([]byte(`{"u":{}}`), &v); err == nil {
		t.Fatal("an object into a nil interface with methods must be refused, as encoding/json does")
	}
}

// TestShareRaw: with shareRaw a json.RawMessage is a slice of the input,
// whose capacity ends with it, and decodes to what a copy holds; without
// it, a copy. A null keeps its four bytes either way, and the errors are
// the same.
func TestShareRaw(t *testing.T) {
	type payload struct {
		Params  json.RawMessage   `json:"params"`
		Details json.RawMessage   `json:"details,omitempty"`
		List    []json.RawMessage `json:"list,omitempty"`
	}
	data := []byte(`{"params": {"a":[1,"x"]} ,"details":null,"list":["s",{}],"other":1}`)
	var shared, copied payload
	if err := DecodeStrict(data, &shared, AllowUnknown(), shareRaw()); err != nil {
		t.Fatal(err)
	}
	if err := DecodeStrict(data, &copied, AllowUnknown()); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(shared, copied) {
		t.Fatalf("shared %+v, copied %+v", shared, copied)
	}
	if string(shared.Params) != `{"a":[1,"x"]}` || string(shared.Details) != "null" || len(shared.List) != 2 {
		t.Fatalf("decoded %+v", shared)
	}
	within := func(b []byte) bool {
		return len(b) > 0 && cap(b) == len(b) && &b[0] == &data[strings.Index(string(data), string(b))]
	}
	if !within(shared.Params) || !within(shared.Details) || !within(shared.List[1]) {
		t.Error("shareRaw copied a value")
	}
	if &copied.Params[0] == &shared.Params[0] {
		t.Error("without shareRaw a value shares the input")
	}
	_ = append(shared.Params, '!')
	if !strings.HasPrefix(string(data[strings.Index(string(data), "}"):]), "} ,") {
		t.Error("an append to a shared value wrote over the input")
	}

	for _, bad := range []string{`{"params":{"a":}}`, `{"params":"\xff"}`, `{"params":1,"params":2}`} {
		var p payload
		errShared := DecodeStrict([]byte(bad), &p, AllowUnknown(), shareRaw())
		errCopied := DecodeStrict([]byte(bad), &p, AllowUnknown())
		if errShared == nil || errCopied == nil || errShared.Error() != errCopied.Error() {
			t.Errorf("%q: shared %v, copied %v", bad, errShared, errCopied)
		}
	}
	var strict payload
	if err := DecodeStrict(data, &strict, shareRaw()); !errors.Is(err, ErrUnknownMember) {
		t.Errorf("shareRaw without AllowUnknown took an unknown member: %v", err)
	}
}

// TestAllocsCheckRequired: the check of required members, run on
// every subscriber's answer the bus reads, keeps its decoders instead of
// allocating one a check: 16 allocations each without them. (None with
// them; the race detector adds 3 of its own, hence a bound above 0.)
func TestAllocsCheckRequired(t *testing.T) {
	data := []byte(`{"type":"response","result":{"ok":true},"extra":[1,2]}`)
	required := []string{"type"}
	if err := checkRequired(data, required); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(200, func() { _ = checkRequired(data, required) }); n > 4 {
		t.Errorf("%.2f allocations a check, want none", n)
	}
}
