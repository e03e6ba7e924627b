package jsonobj

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestMembers(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		want string // key=value;… as walked
		ok   bool
	}{
		{`{}`, ``, true},
		{` {  } `[1:], ``, true},
		{`{"a":1,"b":"x,}","c":[1,{"d":"]"}],"e":{"f":null},"g":true}`, `a=1;b="x,}";c=[1,{"d":"]"}];e={"f":null};g=true;`, true},
		{`{"a" : -1.5e3 , "a":"\"\\"}`, `a=-1.5e3;a="\"\\";`, true},
		{`{"\u0061":1}`, ``, false},
		{`{"é":1}`, ``, false},
		{`[1]`, ``, false},
		{`"x"`, ``, false},
	} {
		var b strings.Builder
		ok := Members([]byte(tc.raw), func(k, v []byte) { b.WriteString(string(k) + "=" + string(v) + ";") })
		if ok != tc.ok || (ok && b.String() != tc.want) {
			t.Errorf("Members(%s) = %q, %v; want %q, %v", tc.raw, b.String(), ok, tc.want, tc.ok)
		}
	}
}

// FuzzMembers checks the walk against encoding/json on every valid JSON
// object it does not refuse: the same members (the last of a repeated
// key), byte for byte.
func FuzzMembers(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":1,"a":2}`, `{"a" : [1,{"b":"}\"]"}] , "c":true,"d":null}`, `{"\u0069d":1}`, `{"a":"\\"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var want map[string]json.RawMessage
		if !json.Valid(raw) || json.Unmarshal(raw, &want) != nil || want == nil {
			return
		}
		raw = []byte(strings.Trim(string(raw), " \t\r\n"))
		got := map[string]string{}
		if !Members(raw, func(k, v []byte) { got[string(k)] = string(v) }) {
			return
		}
		if len(got) != len(want) {
			t.Fatalf("Members(%s) = %q, want %q", raw, got, want)
		}
		for k, v := range want {
			if got[k] != string(v) {
				t.Fatalf("Members(%s)[%q] = %s, want %s", raw, k, got[k], v)
			}
		}
	})
}
