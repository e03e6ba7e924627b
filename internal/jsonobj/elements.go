package jsonobj

// Elements calls f with each element of raw, a valid JSON array, in
// order, as written (a slice of raw). It reports false, possibly after
// some calls, when raw is not an array.
func Elements(raw []byte, f func(value []byte)) bool {
	if len(raw) == 0 || raw[0] != '[' {
		return false
	}
	i := skipSpace(raw, 1)
	if i < len(raw) && raw[i] == ']' {
		return true
	}
	for i < len(raw) {
		end, ok := valueEnd(raw, i)
		if !ok || end == i {
			return false
		}
		f(raw[i:end:end])
		var done bool
		if i, done, ok = afterValue(raw, end, ']'); done || !ok {
			return ok
		}
	}
	return false
}
