package jsonobj

// maxDepth is encoding/json's bound on nesting: a value nested deeper is
// invalid to json.Valid, so it is here.
const maxDepth = 10000

// Valid reports whether b is one JSON value, with white space around it
// allowed: exactly what json.Valid reports (which does not check that
// strings are UTF-8, nor does Valid). It walks b once, without the
// scanner's call per byte: checking every frame was a visible part of a
// busy connection's CPU.
func Valid(b []byte) bool {
	var open [64]byte
	stack := open[:0] // the containers around i: '{' or '['
	i := skipSpace(b, 0)
	for {
		// A value starts at i.
		if i >= len(b) {
			return false
		}
		ok := true
		switch c := b[i]; {
		case c == '{' || c == '[':
			if len(stack) >= maxDepth {
				return false
			}
			closer := byte('}')
			if c == '[' {
				closer = ']'
			}
			i = skipSpace(b, i+1)
			if i < len(b) && b[i] == closer {
				i++
				break
			}
			stack = append(stack, c)
			if c == '{' {
				if i, ok = member(b, i); !ok {
					return false
				}
			}
			continue
		case c == '"':
			i, ok = stringEnd(b, i)
		case c == '-' || c >= '0' && c <= '9':
			i, ok = numberEnd(b, i)
		case c == 't':
			i, ok = literalEnd(b, i, "true")
		case c == 'f':
			i, ok = literalEnd(b, i, "false")
		case c == 'n':
			i, ok = literalEnd(b, i, "null")
		default:
			return false
		}
		if !ok {
			return false
		}
		// A value ended at i: close containers until one goes on.
		for {
			i = skipSpace(b, i)
			if len(stack) == 0 {
				return i == len(b)
			}
			if i >= len(b) {
				return false
			}
			top := stack[len(stack)-1]
			if b[i] == ',' {
				i = skipSpace(b, i+1)
				if top == '{' {
					if i, ok = member(b, i); !ok {
						return false
					}
				}
				break
			}
			if top == '{' && b[i] != '}' || top == '[' && b[i] != ']' {
				return false
			}
			stack = stack[:len(stack)-1]
			i++
		}
	}
}

// member checks a member's key and colon at i and returns the index of
// its value (after white space).
func member(b []byte, i int) (int, bool) {
	if i >= len(b) || b[i] != '"' {
		return 0, false
	}
	i, ok := stringEnd(b, i)
	if !ok {
		return 0, false
	}
	i = skipSpace(b, i)
	if i >= len(b) || b[i] != ':' {
		return 0, false
	}
	return skipSpace(b, i+1), true
}

// stringEnd returns the index just past the string starting at b[i] ==
// '"', checking its escapes and that it holds no control character.
func stringEnd(b []byte, i int) (int, bool) {
	for i++; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			return i + 1, true
		case c < 0x20:
			return 0, false
		case c == '\\':
			i++
			if i >= len(b) {
				return 0, false
			}
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if i+4 >= len(b) {
					return 0, false
				}
				for _, h := range b[i+1 : i+5] {
					if !isHex(h) {
						return 0, false
					}
				}
				i += 4
			default:
				return 0, false
			}
		}
	}
	return 0, false
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// numberEnd returns the index just past the number starting at i:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func numberEnd(b []byte, i int) (int, bool) {
	if b[i] == '-' {
		i++
	}
	switch {
	case i >= len(b):
		return 0, false
	case b[i] == '0':
		i++
	case b[i] >= '1' && b[i] <= '9':
		i = digitsEnd(b, i+1)
	default:
		return 0, false
	}
	if i < len(b) && b[i] == '.' {
		j := digitsEnd(b, i+1)
		if j == i+1 {
			return 0, false
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := digitsEnd(b, i)
		if j == i {
			return 0, false
		}
		i = j
	}
	return i, true
}

func digitsEnd(b []byte, i int) int {
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i
}

// literalEnd returns the index just past lit at i.
func literalEnd(b []byte, i int, lit string) (int, bool) {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return 0, false
	}
	return i + len(lit), true
}
