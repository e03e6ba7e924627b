package jsonobj

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestElements(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		want string // value;… as walked
		ok   bool
	}{
		{`[]`, ``, true},
		{`[ ]`, ``, true},
		{`[1,"a,]",[2,{"b":"]"}],{"c":null},true, null ,-1.5e3]`, `1;"a,]";[2,{"b":"]"}];{"c":null};true;null;-1.5e3;`, true},
		{`[ "\"\\" ]`, `"\"\\";`, true},
		{`{"a":1}`, ``, false},
		{`"x"`, ``, false},
		{``, ``, false},
	} {
		var b strings.Builder
		ok := Elements([]byte(tc.raw), func(v []byte) { b.WriteString(string(v) + ";") })
		if ok != tc.ok || (ok && b.String() != tc.want) {
			t.Errorf("Elements(%s) = %q, %v; want %q, %v", tc.raw, b.String(), ok, tc.want, tc.ok)
		}
	}
}

// FuzzElements checks the walk against encoding/json on every valid JSON
// array: the same elements, byte for byte.
func FuzzElements(f *testing.F) {
	for _, s := range []string{`[]`, `[1,2]`, `[ [1,{"b":"}\"]"}] , true,null ]`, `["\\"]`, `[{}]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var want []json.RawMessage
		if !json.Valid(raw) || json.Unmarshal(raw, &want) != nil || want == nil {
			return
		}
		raw = []byte(strings.Trim(string(raw), " \t\r\n"))
		var got []string
		if !Elements(raw, func(v []byte) { got = append(got, string(v)) }) {
			t.Fatalf("Elements(%s) refused an array", raw)
		}
		if len(got) != len(want) {
			t.Fatalf("Elements(%s) = %q, want %q", raw, got, want)
		}
		for i, v := range want {
			if got[i] != string(v) {
				t.Fatalf("Elements(%s)[%d] = %s, want %s", raw, i, got[i], v)
			}
		}
	})
}
