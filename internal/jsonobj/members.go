package jsonobj

// Members calls f with each member of raw, a valid JSON object, in order:
// the key as written between its quotes and the value as written, both
// slices of raw. A repeated key is passed each time (encoding/json keeps
// the last). It reports false, possibly after some calls, when raw is not
// an object it can walk: a key with an escape or a byte beyond ASCII, or
// anything but an object.
func Members(raw []byte, f func(key, value []byte)) bool {
	if len(raw) == 0 || raw[0] != '{' {
		return false
	}
	i := skipSpace(raw, 1)
	if i < len(raw) && raw[i] == '}' {
		return true
	}
	for i < len(raw) {
		if raw[i] != '"' {
			return false
		}
		k := i + 1
		for k < len(raw) && raw[k] != '"' {
			if raw[k] == '\\' || raw[k] >= 0x80 {
				return false
			}
			k++
		}
		key := raw[i+1 : k]
		i = skipSpace(raw, k+1)
		if i >= len(raw) || raw[i] != ':' {
			return false
		}
		i = skipSpace(raw, i+1)
		end, ok := valueEnd(raw, i)
		if !ok {
			return false
		}
		f(key, raw[i:end:end])
		var done bool
		if i, done, ok = afterValue(raw, end, '}'); done || !ok {
			return ok
		}
	}
	return false
}

// afterValue reads what follows a value ending at end in an object or
// array that closes with close: a comma (i is where the next one starts)
// or the close (done).
func afterValue(raw []byte, end int, close byte) (i int, done, ok bool) {
	i = skipSpace(raw, end)
	switch {
	case i >= len(raw):
		return i, false, false
	case raw[i] == ',':
		return skipSpace(raw, i+1), false, true
	case raw[i] == close:
		return i, true, true
	}
	return i, false, false
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
