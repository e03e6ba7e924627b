package jsonobj

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

var validCases = []string{
	``, ` `, `{}`, `[]`, ` { } `, `[ ]`, `{"a":1}`, `{"a" : [1, 2.5, -0, 1e3, 1E+3, 1e-3, true, false, null]}`,
	`{"a":1,}`, `{"a":1 "b":2}`, `{"a"}`, `{"a":}`, `{a:1}`, `{"a":1}}`, `[1,]`, `[,1]`, `[1 2]`, `[`, `]`, `{`,
	`"x"`, `"\u00e9\n\t\"\\\/\b\f\r"`, `"\u00g0"`, `"\x"`, `"a` + "\x01" + `"`, `"` + "\xff" + `"`, `"\u12"`, `"\`,
	`01`, `-`, `-0`, `-01`, `1.`, `.5`, `1.5e`, `1e+`, `+1`, `1 2`, `tru`, `true`, `truex`, `nul`, `null `, `fals`,
	"\t[\r\n1\n]\t", `[[[]]]`, `[[[]]`, `{"a":{"b":{"c":[{}]}}}`, `{"a":{"b":{"c":[{}]}}`, `"\ud800"`, `{"":""}`,
}

func TestValidAsEncodingJSON(t *testing.T) {
	for _, c := range validCases {
		if got, want := Valid([]byte(c)), json.Valid([]byte(c)); got != want {
			t.Errorf("Valid(%q) = %v, json.Valid says %v", c, got, want)
		}
	}
	for _, depth := range []int{maxDepth - 1, maxDepth, maxDepth + 1} {
		for _, c := range []string{strings.Repeat("[", depth) + strings.Repeat("]", depth), strings.Repeat(`{"a":`, depth) + "1" + strings.Repeat("}", depth), strings.Repeat("[", depth-1) + "{}" + strings.Repeat("]", depth-1)} {
			if got, want := Valid([]byte(c)), json.Valid([]byte(c)); got != want {
				t.Errorf("Valid at depth %d (%.12s…) = %v, json.Valid says %v", depth, c, got, want)
			}
		}
	}
}

// FuzzValid checks Valid against json.Valid on every input.
func FuzzValid(f *testing.F) {
	for _, c := range validCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := Valid(b), json.Valid(b); got != want {
			t.Fatalf("Valid(%q) = %v, json.Valid says %v", b, got, want)
		}
		// A valid frame with white space trimmed or a byte cut stays in agreement.
		trimmed := bytes.TrimSpace(b)
		if got, want := Valid(trimmed), json.Valid(trimmed); got != want {
			t.Fatalf("Valid(%q) = %v, json.Valid says %v", trimmed, got, want)
		}
	})
}

func BenchmarkValid(b *testing.B) {
	frame := []byte(`{"jsonrpc":"2.0","id":12,"method":"processMessage","params":{"topic":"bench:rt","payload":{"type":"plaintext_message","text":"message 1234"},"from":"sender-1","messageId":"0195a3c2f1d2a1b2c3d4e5f6a7b8c9d0"}}`)
	b.Run("jsonobj", func(b *testing.B) {
		for b.Loop() {
			Valid(frame)
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		for b.Loop() {
			json.Valid(frame)
		}
	})
}
