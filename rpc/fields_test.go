package rpc

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzObjectEnvelope checks objectEnvelope (encoding/json/v2) against
// encoding/json (v1) on every valid JSON object of valid UTF-8: the same
// members, byte for byte, a repeated one the last; and jsonString against
// v1 wherever v2 decodes a string (v2 refuses escaped lone surrogates,
// which v1 replaces).
func FuzzObjectEnvelope(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.txt"))
	for _, file := range files {
		src, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		for line := range strings.SplitSeq(string(src), "\n") {
			if _, frame, ok := strings.Cut(line, " "); ok && strings.HasPrefix(frame, "{") {
				f.Add([]byte(frame))
			}
		}
	}
	for _, s := range []string{`{}`, ` { } `, `{"a":1,"a":2}`, `{"a" : [1,{"b":"}\"]"}] , "c":true,"d":null,"e":-1.5e3}`, `{"\u0069d":1}`, `{"é":1}`, `{"a":"\\"}`, `{"a":{}}`, `{"a":[]}`, `{"jsonrpc":"2\u002e0","method":"a\"b","id":"\u00e9"}`, `{"method":"é","id":"\ud800"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		raw = trimJSONSpace(raw)
		if len(raw) == 0 || raw[0] != '{' || !json.Valid(raw) || !utf8.Valid(raw) {
			return
		}
		got, err := objectEnvelope(raw)
		if err != nil {
			if !strings.Contains(err.Error(), "surrogate") {
				t.Fatalf("objectEnvelope(%s) refused a valid object: %v", raw, err)
			}
			return
		}
		var f map[string]json.RawMessage
		if err := json.Unmarshal(raw, &f); err != nil {
			t.Fatal(err)
		}
		want := map[string]json.RawMessage{}
		for k, v := range f {
			switch k {
			case "jsonrpc", "id", "method", "params", "result", "error":
				want[k] = v
			}
		}
		have := map[string]json.RawMessage{}
		for k, v := range map[string][]byte{"jsonrpc": got.Version, "id": got.ID, "method": got.Method, "params": got.Params, "result": got.Result, "error": got.Error} {
			if v != nil {
				have[k] = v
			}
		}
		if !reflect.DeepEqual(have, want) {
			t.Fatalf("objectEnvelope(%s) = %s, want %s", raw, have, want)
		}
		for _, v := range [][]byte{got.Version, got.Method, got.ID} {
			if len(v) == 0 {
				continue
			}
			var s string
			wantErr := json.Unmarshal(v, &s)
			if gs, err := jsonString(v); err == nil && (wantErr != nil || gs != s) || err != nil && wantErr == nil && !strings.Contains(err.Error(), "surrogate") {
				t.Fatalf("jsonString(%s) = %q, %v; json.Unmarshal: %q, %v", v, gs, err, s, wantErr)
			}
		}
	})
}
