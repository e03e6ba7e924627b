package sign

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strconv"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/gowebpki/jcs"
)

// MaxDepth bounds the nesting of objects and arrays in signed material.
const MaxDepth = 64

// Canonicalize returns the RFC 8785 canonical form of a JSON document. It
// rejects invalid JSON, duplicate keys and invalid UTF-8. Canonical input is
// returned as is (after the fast check), so the common case costs one pass.
func Canonicalize(doc []byte) ([]byte, error) {
	if CheckCanonical(doc) == nil {
		return doc, nil
	}
	out, err := jcs.Transform(doc)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidJSON, err)
	}
	// The transformed form must also pass our stricter rules (case-folded
	// duplicate keys, depth), or a receiver would refuse what we signed.
	if err := CheckCanonical(out); err != nil {
		return nil, err
	}
	return out, nil
}

// CheckCanonical reports whether doc is exactly one JSON value in RFC 8785
// canonical form that also obeys meshagent's strictness rules (see the
// package doc). It runs in one pass without allocating for ASCII keys.
func CheckCanonical(doc []byte) error {
	c := checker{b: doc}
	if err := c.value(0); err != nil {
		return err
	}
	if c.i != len(c.b) {
		return c.fail("trailing data after the value")
	}
	return nil
}

type checker struct {
	b []byte
	i int
}

func (c *checker) fail(why string) error {
	return fmt.Errorf("%w: %s at byte %d", ErrNotCanonical, why, c.i)
}

func (c *checker) value(depth int) error {
	if c.i >= len(c.b) {
		return c.fail("unexpected end")
	}
	switch ch := c.b[c.i]; {
	case ch == '{':
		if depth >= MaxDepth {
			return c.fail("nesting too deep")
		}
		return c.object(depth + 1)
	case ch == '[':
		if depth >= MaxDepth {
			return c.fail("nesting too deep")
		}
		return c.array(depth + 1)
	case ch == '"':
		_, _, err := c.str()
		return err
	case ch == 't':
		return c.lit("true")
	case ch == 'f':
		return c.lit("false")
	case ch == 'n':
		return c.lit("null")
	case ch == '-' || (ch >= '0' && ch <= '9'):
		return c.number()
	default:
		return c.fail(fmt.Sprintf("unexpected character %q", ch))
	}
}

func (c *checker) lit(s string) error {
	if !bytes.HasPrefix(c.b[c.i:], []byte(s)) {
		return c.fail("invalid literal")
	}
	c.i += len(s)
	return nil
}

func (c *checker) array(depth int) error {
	c.i++ // [
	if c.i < len(c.b) && c.b[c.i] == ']' {
		c.i++
		return nil
	}
	for {
		if err := c.value(depth); err != nil {
			return err
		}
		if c.i >= len(c.b) {
			return c.fail("unterminated array")
		}
		switch c.b[c.i] {
		case ',':
			c.i++
		case ']':
			c.i++
			return nil
		default:
			return c.fail("expected , or ] (no whitespace allowed)")
		}
	}
}

// object checks members, key order (UTF-16 code units, RFC 8785 §3.2.3),
// uniqueness and case-folded uniqueness.
func (c *checker) object(depth int) error {
	c.i++ // {
	if c.i < len(c.b) && c.b[c.i] == '}' {
		c.i++
		return nil
	}
	var (
		n      int    // members so far
		prev   []byte // the previous key: raw bytes (ASCII without escapes) or decoded
		small  [foldLinearMax][]byte
		keys   = small[:0] // the keys so far, while the object is small
		folded map[string][]byte
	)
	for {
		if c.i >= len(c.b) || c.b[c.i] != '"' {
			return c.fail("expected a string key")
		}
		start := c.i
		raw, simple, err := c.str()
		if err != nil {
			return err
		}
		key := raw
		if !simple {
			key = decodeString(raw)
		}
		if n > 0 {
			if cmp := compareUTF16(prev, key, simple && isASCII(prev)); cmp >= 0 {
				c.i = start
				if cmp == 0 {
					return c.fail(fmt.Sprintf("duplicate key %q", key))
				}
				return c.fail(fmt.Sprintf("key %q out of order", key))
			}
		}
		// Keys equal under case folding need not be adjacent in sorted
		// order ("B" sorts between "A" and "a"). Small objects compare
		// linearly; larger ones switch to a set of folded keys, so that an
		// object with many members costs linear time, not quadratic.
		if folded == nil && len(keys) < foldLinearMax {
			for _, k := range keys {
				if bytes.EqualFold(k, key) {
					c.i = start
					return c.fail(fmt.Sprintf("keys %q and %q differ only in case", k, key))
				}
			}
			keys = append(keys, key)
		} else {
			if folded == nil {
				folded = make(map[string][]byte, 2*len(keys))
				for _, k := range keys {
					folded[string(foldKey(k))] = k
				}
				keys = nil
			}
			f := foldKey(key)
			if k, dup := folded[string(f)]; dup {
				c.i = start
				return c.fail(fmt.Sprintf("keys %q and %q differ only in case", k, key))
			}
			folded[string(f)] = key
		}
		prev = key
		n++
		if c.i >= len(c.b) || c.b[c.i] != ':' {
			return c.fail("expected : (no whitespace allowed)")
		}
		c.i++
		if err := c.value(depth); err != nil {
			return err
		}
		if c.i >= len(c.b) {
			return c.fail("unterminated object")
		}
		switch c.b[c.i] {
		case ',':
			c.i++
		case '}':
			c.i++
			return nil
		default:
			return c.fail("expected , or } (no whitespace allowed)")
		}
	}
}

// str scans a string starting at the opening quote. It returns the raw
// contents between the quotes and whether they are plain ASCII with no
// escapes (so they compare bytewise).
func (c *checker) str() (raw []byte, simple bool, err error) {
	c.i++ // opening quote
	start := c.i
	simple = true
	for c.i < len(c.b) {
		c.i += PlainStringRun(c.b[c.i:])
		if c.i == len(c.b) {
			break
		}
		ch := c.b[c.i]
		switch {
		case ch == '"':
			raw = c.b[start:c.i]
			c.i++
			return raw, simple, nil
		case ch < 0x20:
			return nil, false, c.fail("control character must be escaped")
		case ch == '\\':
			simple = false
			if c.i+1 >= len(c.b) {
				return nil, false, c.fail("unterminated escape")
			}
			switch e := c.b[c.i+1]; e {
			case '"', '\\', 'b', 'f', 'n', 'r', 't':
				c.i += 2
			case 'u':
				// Canonical form escapes only control characters without a
				// short form, as \u00xx in lowercase hex.
				if c.i+6 > len(c.b) {
					return nil, false, c.fail("unterminated \\u escape")
				}
				h := c.b[c.i+2 : c.i+6]
				if h[0] != '0' || h[1] != '0' || !isLowerHex(h[2]) || !isLowerHex(h[3]) {
					return nil, false, c.fail("non-canonical \\u escape")
				}
				v, _ := strconv.ParseUint(string(h), 16, 16)
				if v >= 0x20 || v == '\b' || v == '\f' || v == '\n' || v == '\r' || v == '\t' {
					return nil, false, c.fail("non-canonical \\u escape")
				}
				c.i += 6
			default:
				return nil, false, c.fail("non-canonical escape")
			}
		case ch < utf8.RuneSelf:
			c.i++
		default:
			simple = false
			r, size := utf8.DecodeRune(c.b[c.i:])
			if r == utf8.RuneError && size <= 1 {
				return nil, false, c.fail("invalid UTF-8")
			}
			c.i += size
		}
	}
	return nil, false, c.fail("unterminated string")
}

// PlainStringRun returns how many bytes at the start of b, a multiple of
// eight, a JSON string holds as they are (printable ASCII but the quote
// and the backslash), checked eight at a time: the bulk of a message is
// such text, and a byte at a time the string scan cost more than the rest
// of the parse. The canonical check here and protocol's strict decoder
// both scan strings with it.
func PlainStringRun(b []byte) int {
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	i := 0
	for ; i+8 <= len(b); i += 8 {
		x := binary.LittleEndian.Uint64(b[i:])
		q, bs := x^(lo*'"'), x^(lo*'\\')
		// Each term is non-zero iff some byte is a control character, a
		// quote, a backslash, or not ASCII (exact for the word as a whole).
		if ((x-lo*0x20)&^x|(q-lo)&^q|(bs-lo)&^bs|x)&hi != 0 {
			break
		}
	}
	return i
}

// foldLinearMax is the number of keys up to which an object's keys are
// checked for case-folded duplicates by linear comparison.
const foldLinearMax = 16

// foldKey maps a key to a representative of its class under simple Unicode
// case folding, the relation of bytes.EqualFold and of encoding/json's
// case-insensitive key matching: every rune becomes the smallest rune of
// its folding orbit. The key is valid UTF-8 (checked by str).
func foldKey(key []byte) []byte {
	out := make([]byte, 0, len(key))
	for i := 0; i < len(key); {
		if ch := key[i]; ch < utf8.RuneSelf {
			if 'a' <= ch && ch <= 'z' {
				ch -= 'a' - 'A'
			}
			out = append(out, ch)
			i++
			continue
		}
		r, n := utf8.DecodeRune(key[i:])
		out = utf8.AppendRune(out, foldRune(r))
		i += n
	}
	return out
}

// foldRune returns the smallest rune of r's simple case-folding orbit.
func foldRune(r rune) rune {
	least := r
	for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
		least = min(least, f)
	}
	return least
}

func isLowerHex(b byte) bool { return (b >= '0' && b <= '9') || (b >= 'a' && b <= 'f') }

// number checks that the token is what ECMAScript's Number.prototype.toString
// prints for the same double (RFC 8785 §3.2.2.3).
func (c *checker) number() error {
	start := c.i
	if c.b[c.i] == '-' {
		c.i++
	}
	intStart := c.i
	for c.i < len(c.b) && c.b[c.i] >= '0' && c.b[c.i] <= '9' {
		c.i++
	}
	if c.i == intStart {
		return c.fail("invalid number")
	}
	plainInt := true
	for c.i < len(c.b) {
		ch := c.b[c.i]
		if (ch >= '0' && ch <= '9') || ch == '.' || ch == 'e' || ch == 'E' || ch == '+' || ch == '-' {
			plainInt = false
			c.i++
			continue
		}
		break
	}
	tok := c.b[start:c.i]
	// Fast path: small integers without leading zeros are canonical as is.
	if plainInt && len(tok)-(intStart-start) <= 15 {
		if (tok[intStart-start] == '0' && len(tok)-(intStart-start) > 1) || string(tok) == "-0" {
			c.i = start
			return c.fail("non-canonical number")
		}
		return nil
	}
	f, err := strconv.ParseFloat(string(tok), 64)
	if err != nil {
		c.i = start
		return c.fail("invalid number")
	}
	want, err := jcs.NumberToJSON(f)
	if err != nil || want != string(tok) {
		c.i = start
		return c.fail("non-canonical number")
	}
	return nil
}

func isASCII(b []byte) bool {
	for _, ch := range b {
		if ch >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// compareUTF16 orders two decoded keys by UTF-16 code units. ASCII-only
// keys compare bytewise; only code points above U+FFFF order differently
// in UTF-8 and UTF-16.
func compareUTF16(a, b []byte, ascii bool) int {
	if ascii || (isASCII(a) && isASCII(b)) {
		return bytes.Compare(a, b)
	}
	ua := utf16.Encode([]rune(string(a)))
	ub := utf16.Encode([]rune(string(b)))
	for i := 0; i < len(ua) && i < len(ub); i++ {
		if ua[i] != ub[i] {
			if ua[i] < ub[i] {
				return -1
			}
			return 1
		}
	}
	return len(ua) - len(ub)
}

// decodeString unescapes the contents of a string already checked by str.
func decodeString(raw []byte) []byte {
	if bytes.IndexByte(raw, '\\') < 0 {
		return raw
	}
	out := make([]byte, 0, len(raw))
	for i := 0; i < len(raw); i++ {
		ch := raw[i]
		if ch != '\\' {
			out = append(out, ch)
			continue
		}
		i++
		switch raw[i] {
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			v, _ := strconv.ParseUint(string(raw[i+1:i+5]), 16, 8)
			out = append(out, byte(v))
			i += 4
		default: // " and \
			out = append(out, raw[i])
		}
	}
	return out
}
