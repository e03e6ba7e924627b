package rpc

import (
	"bytes"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzObjectFields checks objectFields against encoding/json on every
// valid JSON object: the same members, byte for byte, or a refusal.
func FuzzObjectFields(f *testing.F) {
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
	for _, s := range []string{`{}`, ` { } `, `{"a":1,"a":2}`, `{"a" : [1,{"b":"}\"]"}] , "c":true,"d":null,"e":-1.5e3}`, `{"\u0069d":1}`, `{"é":1}`, `{"a":"\\"}`, `{"a":{}}`, `{"a":[]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		raw = trimJSONSpace(raw)
		if len(raw) == 0 || raw[0] != '{' || !json.Valid(raw) {
			return
		}
		got, ok := objectFields(raw)
		if !ok {
			return
		}
		var want map[string]json.RawMessage
		if err := json.Unmarshal(raw, &want); err != nil {
			t.Fatal(err)
		}
		if !maps.EqualFunc(got, want, func(a, b json.RawMessage) bool { return bytes.Equal(a, b) }) {
			t.Fatalf("objectFields(%s) = %q, want %q", raw, got, want)
		}
	})
}
