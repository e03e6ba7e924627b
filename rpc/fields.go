package rpc

import "encoding/json"

// objectFields splits raw, a valid JSON object, into its members as
// json.Unmarshal into a map[string]json.RawMessage would (a repeated key:
// the last one wins), in one pass and without copying the values. It
// reports false, and leaves the work to encoding/json, for a key that
// has an escape or a byte beyond ASCII, whose decoding it does not
// repeat.
func objectFields(raw []byte) (map[string]json.RawMessage, bool) {
	f := make(map[string]json.RawMessage, 4)
	i := skipSpace(raw, 1)
	if i < len(raw) && raw[i] == '}' {
		return f, true
	}
	for i < len(raw) {
		if raw[i] != '"' {
			return nil, false
		}
		k := i + 1
		for k < len(raw) && raw[k] != '"' {
			if raw[k] == '\\' || raw[k] >= 0x80 {
				return nil, false
			}
			k++
		}
		key := string(raw[i+1 : k])
		i = skipSpace(raw, k+1)
		if i >= len(raw) || raw[i] != ':' {
			return nil, false
		}
		i = skipSpace(raw, i+1)
		end, ok := valueEnd(raw, i)
		if !ok {
			return nil, false
		}
		f[key] = raw[i:end:end]
		i = skipSpace(raw, end)
		if i >= len(raw) {
			return nil, false
		}
		switch raw[i] {
		case ',':
			i = skipSpace(raw, i+1)
		case '}':
			return f, true
		default:
			return nil, false
		}
	}
	return nil, false
}

// skipSpace returns the index of the first byte at or after i that is
// not JSON white space.
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// valueEnd returns the index just past the valid JSON value starting at
// i.
func valueEnd(b []byte, i int) (int, bool) {
	depth := 0
	for i < len(b) {
		switch c := b[i]; c {
		case '"':
			i++
			for i < len(b) && b[i] != '"' {
				if b[i] == '\\' {
					i++
				}
				i++
			}
			if i >= len(b) {
				return 0, false
			}
			i++
		case '{', '[':
			depth++
			i++
		case '}', ']':
			if depth == 0 {
				return i, true
			}
			depth--
			i++
		case ',':
			if depth == 0 {
				return i, true
			}
			i++
		case ' ', '\t', '\n', '\r':
			if depth == 0 {
				return i, true
			}
			i++
		default:
			i++
		}
		if depth == 0 && i > 0 && (b[i-1] == '"' || b[i-1] == '}' || b[i-1] == ']') {
			return i, true
		}
	}
	return i, depth == 0
}
