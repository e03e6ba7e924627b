package rpc

import (
	"math"
	"slices"
	"strconv"
)

// A handler's answer is often a small map of flat values
// ({"processed": true}, say). encoding/json reaches one through
// reflection, sorts a copy of its keys and grows an encoder's stack; on a
// subscriber answering every message that was a large part of its CPU.
// appendFlatMap writes such a map itself, byte for byte what marshal
// would, and leaves everything else to marshal.

// maxFlatMap bounds the maps appendFlatMap takes: past it, sorting the
// keys is where the time goes either way.
const maxFlatMap = 16

// appendFlatMap appends m encoded as marshal would encode it, and
// reports whether it could: every key must be printable ASCII without a
// quote or a backslash, and every value nil, a bool, such a string, an
// int, an int64 or a finite float64, and m not nil (nil is null).
// Otherwise it returns b unchanged and false.
func appendFlatMap(b []byte, m map[string]any) ([]byte, bool) {
	if m == nil || len(m) > maxFlatMap {
		return b, false
	}
	var keyArray [maxFlatMap]string
	keys := keyArray[:0]
	size := 2 // the braces
	for k, v := range m {
		if !plainString(k) || !flatValue(v) {
			return b, false
		}
		keys = append(keys, k)
		size += len(k) + 4 + flatSize(v) // quotes, colon, comma
	}
	slices.Sort(keys)
	b = slices.Grow(b, size)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = append(b, k...)
		b = append(b, '"', ':')
		b = appendFlatValue(b, m[k])
	}
	return append(b, '}'), true
}

// flatValue reports whether appendFlatValue writes v.
func flatValue(v any) bool {
	switch v := v.(type) {
	case nil, bool, int, int64:
		return true
	case string:
		return plainString(v)
	case float64:
		return !math.IsNaN(v) && !math.IsInf(v, 0)
	}
	return false
}

// flatSize is about the bytes appendFlatValue writes for v: exact but
// for numbers, which it bounds.
func flatSize(v any) int {
	if s, ok := v.(string); ok {
		return len(s) + 2
	}
	return 24
}

// appendFlatValue appends v, for which flatValue holds, as encoding/json
// writes it.
func appendFlatValue(b []byte, v any) []byte {
	switch v := v.(type) {
	case nil:
		return append(b, "null"...)
	case bool:
		return strconv.AppendBool(b, v)
	case int:
		return strconv.AppendInt(b, int64(v), 10)
	case int64:
		return strconv.AppendInt(b, v, 10)
	case string:
		b = append(b, '"')
		b = append(b, v...)
		return append(b, '"')
	case float64:
		return appendFloat(b, v)
	}
	panic("rpc: appendFlatValue of a value flatValue refuses")
}

// appendFloat appends a finite f as encoding/json writes a float64:
// ES6 number formatting, exponents without a leading zero.
func appendFloat(b []byte, f float64) []byte {
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// clean up e-09 to e-9
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}
