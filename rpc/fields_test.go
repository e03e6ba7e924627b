package rpc

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// FuzzObjectEnvelope checks objectEnvelope against encoding/json on every
// valid JSON object: the same members, byte for byte.
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
		if len(raw) == 0 || raw[0] != '{' || !json.Valid(raw) {
			return
		}
		got, ok := objectEnvelope(raw)
		if !ok {
			t.Fatalf("objectEnvelope(%s) refused a valid object", raw)
		}
		var f map[string]json.RawMessage
		if err := json.Unmarshal(raw, &f); err != nil {
			t.Fatal(err)
		}
		var want envelope
		for k, v := range f {
			want.set(k, v)
		}
		if !reflect.DeepEqual(normal(got), normal(want)) {
			t.Fatalf("objectEnvelope(%s) = %+v, want %+v", raw, got, want)
		}
		for _, v := range []json.RawMessage{got.version, got.method, got.id} {
			if len(v) == 0 {
				continue
			}
			var s string
			wantErr := json.Unmarshal(v, &s)
			if gs, err := jsonString(v); (err == nil) != (wantErr == nil) || gs != s {
				t.Fatalf("jsonString(%s) = %q, %v; json.Unmarshal: %q, %v", v, gs, err, s, wantErr)
			}
		}
	})
}

// normal makes an envelope's members comparable: the same bytes, whether
// a slice of the frame or a copy.
func normal(e envelope) envelope {
	for _, v := range []*json.RawMessage{&e.version, &e.id, &e.method, &e.params, &e.result, &e.err} {
		if *v != nil {
			*v = append(json.RawMessage{}, *v...)
		}
	}
	return e
}
