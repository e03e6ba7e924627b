package beadctx

import (
	"errors"
	"testing"
)

// TestMergePatchRFC7396AppendixA runs every example of RFC 7396's
// appendix A.
func TestMergePatchRFC7396AppendixA(t *testing.T) {
	for _, tc := range []struct{ target, patch, want string }{
		{`{"a":"b"}`, `{"a":"c"}`, `{"a":"c"}`},
		{`{"a":"b"}`, `{"b":"c"}`, `{"a":"b","b":"c"}`},
		{`{"a":"b"}`, `{"a":null}`, `{}`},
		{`{"a":"b","b":"c"}`, `{"a":null}`, `{"b":"c"}`},
		{`{"a":["b"]}`, `{"a":"c"}`, `{"a":"c"}`},
		{`{"a":"c"}`, `{"a":["b"]}`, `{"a":["b"]}`},
		{`{"a":{"b":"c"}}`, `{"a":{"b":"d","c":null}}`, `{"a":{"b":"d"}}`},
		{`{"a":[{"b":"c"}]}`, `{"a":[1]}`, `{"a":[1]}`},
		{`["a","b"]`, `["c","d"]`, `["c","d"]`},
		{`{"a":"b"}`, `["c"]`, `["c"]`},
		{`{"a":"foo"}`, `null`, `null`},
		{`{"a":"foo"}`, `"bar"`, `"bar"`},
		{`{"e":null}`, `{"a":1}`, `{"a":1,"e":null}`},
		{`[1,2]`, `{"a":"b","c":null}`, `{"a":"b"}`},
		{`{}`, `{"a":{"bb":{"ccc":null}}}`, `{"a":{"bb":{}}}`},
		// Beyond the appendix: an absent target, arrays kept as written,
		// no HTML escaping.
		{``, `{"a":{"b":null}}`, `{"a":{}}`},
		{`{"a":1}`, `{"b":[null, {"c":null}]}`, `{"a":1,"b":[null,{"c":null}]}`},
		{`{}`, `{"x":"<&>"}`, `{"x":"<&>"}`},
	} {
		got, err := MergePatch([]byte(tc.target), []byte(tc.patch))
		if err != nil {
			t.Errorf("MergePatch(%s, %s): %v", tc.target, tc.patch, err)
			continue
		}
		if string(got) != tc.want {
			t.Errorf("MergePatch(%s, %s) = %s, want %s", tc.target, tc.patch, got, tc.want)
		}
	}
}

// TestMergePatchRefusesAmbiguousJSON: duplicate names (at any depth),
// invalid UTF-8 and broken JSON are errors, never a guess.
func TestMergePatchRefusesAmbiguousJSON(t *testing.T) {
	for _, patch := range []string{`{"a":1,"a":2}`, `{"a":{"b":1,"b":2}}`, "{\"a\":\"\xff\"}", `{"a":`, `[1,`} {
		if _, err := MergePatch([]byte(`{}`), []byte(patch)); !errors.Is(err, ErrInvalid) {
			t.Errorf("MergePatch({}, %q) = %v, want ErrInvalid", patch, err)
		}
	}
}
