package rpc

import (
	"bytes"
	"encoding/json"
	"math"
	"testing"
)

// referenceMarshal is what marshal wrote before appendFlatMap: an
// Encoder without HTML escaping.
func referenceMarshal(t testing.TB, v any) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatalf("reference encode of %#v: %v", v, err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// checkFlatMap checks that marshal writes m as encoding/json does,
// whether or not appendFlatMap takes it.
func checkFlatMap(t testing.TB, m map[string]any) {
	t.Helper()
	got, err := marshal(m)
	if err != nil {
		t.Fatalf("marshal(%#v): %v", m, err)
	}
	if want := referenceMarshal(t, m); !bytes.Equal(got, want) {
		t.Fatalf("marshal(%#v) = %s, want %s", m, got, want)
	}
}

func TestFlatMapAsEncodingJSON(t *testing.T) {
	for _, m := range []map[string]any{
		nil,
		{},
		{"processed": true},
		{"b": false, "a": nil, "c": "text <&> 'q'", "d": 3, "e": int64(-9)},
		{"f": 0.0, "g": -0.0, "h": 1e21, "i": 1e-7, "j": 123456789.125, "k": 5e-324, "l": math.MaxFloat64},
		{"esc": "a\"b"}, {"esc": "a\\b"}, {"ctl": "\n"}, {"utf8": "é"}, {"bad": "\xff"},
		{"a\"": 1}, {"é": 1}, {"nested": map[string]any{"x": 1}}, {"u": uint(3)}, {"s": []int{1}},
		{"k0": 0, "k1": 1, "k2": 2, "k3": 3, "k4": 4, "k5": 5, "k6": 6, "k7": 7, "k8": 8, "k9": 9, "k10": 10, "k11": 11, "k12": 12, "k13": 13, "k14": 14, "k15": 15, "k16": 16},
	} {
		checkFlatMap(t, m)
	}
	if _, ok := appendFlatMap(nil, map[string]any{"processed": true}); !ok {
		t.Error("appendFlatMap refused a flat map")
	}
}

// FuzzFlatMap checks marshal of flat maps against encoding/json, for the
// maps appendFlatMap takes and those it leaves to encoding/json.
func FuzzFlatMap(f *testing.F) {
	f.Add("processed", "ok", "k", 1.5, int64(7), true)
	f.Add("a\"", "\u2028", "", 1e-7, int64(-1), false)
	f.Add("<", "\xff", "é", 1e21, int64(math.MinInt64), true)
	f.Fuzz(func(t *testing.T, k1, s, k2 string, x float64, n int64, b bool) {
		m := map[string]any{k1: s, k2: b, k1 + "n": n, k2 + "x": nil}
		if !math.IsNaN(x) && !math.IsInf(x, 0) {
			m["x"+k2] = x
		}
		checkFlatMap(t, m)
	})
}
