package protocol

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"

	"github.com/meshagent/meshagent/sign"
)

// maxDepth is how deeply arrays and objects may nest, encoding/json's
// limit, so that the two refuse the same documents.
const maxDepth = 10000

// scanner walks JSON text, checking the grammar of RFC 8259 as it goes.
// Its methods leave pos after what they read and report malformed input
// as errSyntax, which DecodeStrict turns into a *FieldError.
type scanner struct {
	data  []byte
	pos   int
	depth int
	// canonical: data passed sign.CheckCanonical, so that its strings are
	// valid (UTF-8, escapes, no control character) and str need only find
	// where each ends.
	canonical bool
}

// errSyntax marks malformed JSON inside the scanner; the message is
// worked out once, by encoding/json, on the error path only.
var errSyntax = &FieldError{Err: ErrSyntax}

func (s *scanner) ws() {
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

// peek returns the next byte after whitespace, or 0 at the end.
func (s *scanner) peek() byte {
	s.ws()
	if s.pos < len(s.data) {
		return s.data[s.pos]
	}
	return 0
}

// expect consumes c after whitespace.
func (s *scanner) expect(c byte) error {
	if s.peek() != c {
		return errSyntax
	}
	s.pos++
	return nil
}

// str reads a string starting at the quote under pos and returns its raw
// text with the quotes, and whether it needs unquoting by encoding/json
// (it has escapes or bytes that are not UTF-8).
func (s *scanner) str() (raw []byte, slow bool, err error) {
	start := s.pos
	s.pos++ // the opening quote
	if s.canonical {
		// Without a backslash before it, the next quote ends the string,
		// and the string is plain (valid UTF-8, checked, without escapes).
		rest := s.data[s.pos:]
		if i := bytes.IndexByte(rest, '"'); i >= 0 && bytes.IndexByte(rest[:i], '\\') < 0 {
			s.pos += i + 1
			return s.data[start:s.pos], false, nil
		}
	}
	for s.pos < len(s.data) {
		// Most of a string is printable ASCII: skip it a word at a time,
		// then a byte at a time up to the first byte that is not.
		s.pos += sign.PlainStringRun(s.data[s.pos:])
		for s.pos < len(s.data) && plainByte[s.data[s.pos]] {
			s.pos++
		}
		if s.pos == len(s.data) {
			break
		}
		c := s.data[s.pos]
		switch {
		case c == '"':
			s.pos++
			return s.data[start:s.pos], slow, nil
		case c == '\\':
			slow = true
			if s.pos+1 >= len(s.data) {
				return nil, false, errSyntax
			}
			switch s.data[s.pos+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.pos += 2
			case 'u':
				if s.pos+6 > len(s.data) {
					return nil, false, errSyntax
				}
				for _, h := range s.data[s.pos+2 : s.pos+6] {
					if !isHex(h) {
						return nil, false, errSyntax
					}
				}
				s.pos += 6
			default:
				return nil, false, errSyntax
			}
		case c < 0x20:
			return nil, false, errSyntax
		case c < utf8.RuneSelf:
			s.pos++
		default:
			r, n := utf8.DecodeRune(s.data[s.pos:])
			slow = slow || r == utf8.RuneError && n == 1
			s.pos += n
		}
	}
	return nil, false, errSyntax
}

// plainByte marks the bytes a string may hold as they are: printable
// ASCII other than the quote and the backslash.
var plainByte = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// num reads a number starting at pos: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *scanner) num() ([]byte, error) {
	d, i := s.data, s.pos
	if i < len(d) && d[i] == '-' {
		i++
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case i < len(d) && d[i] >= '1' && d[i] <= '9':
		for i++; i < len(d) && isDigit(d[i]); i++ {
		}
	default:
		return nil, errSyntax
	}
	if i < len(d) && d[i] == '.' {
		i++
		if i >= len(d) || !isDigit(d[i]) {
			return nil, errSyntax
		}
		for ; i < len(d) && isDigit(d[i]); i++ {
		}
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		if i >= len(d) || !isDigit(d[i]) {
			return nil, errSyntax
		}
		for ; i < len(d) && isDigit(d[i]); i++ {
		}
	}
	n := d[s.pos:i]
	s.pos = i
	return n, nil
}

// literal consumes the keyword lit (true, false or null).
func (s *scanner) literal(lit string) error {
	if len(s.data)-s.pos < len(lit) || string(s.data[s.pos:s.pos+len(lit)]) != lit {
		return errSyntax
	}
	s.pos += len(lit)
	return nil
}

// skip reads one value of any type after whitespace and returns its text.
func (s *scanner) skip() ([]byte, error) {
	c := s.peek()
	start := s.pos
	var err error
	switch {
	case c == '"':
		_, _, err = s.str()
	case c == '{' || c == '[':
		err = s.skipComposite(c)
	case c == 't':
		err = s.literal("true")
	case c == 'f':
		err = s.literal("false")
	case c == 'n':
		err = s.literal("null")
	case c == '-' || isDigit(c):
		_, err = s.num()
	default:
		err = errSyntax
	}
	if err != nil {
		return nil, err
	}
	return s.data[start:s.pos], nil
}

// skipComposite reads an object or array whose opening bracket is open.
func (s *scanner) skipComposite(open byte) error {
	if err := s.enter(); err != nil {
		return err
	}
	s.pos++
	closeB := byte(']')
	if open == '{' {
		closeB = '}'
	}
	if s.peek() == closeB {
		s.pos++
		s.depth--
		return nil
	}
	for {
		if open == '{' {
			if s.peek() != '"' {
				return errSyntax
			}
			if _, _, err := s.str(); err != nil {
				return err
			}
			if err := s.expect(':'); err != nil {
				return err
			}
		}
		if _, err := s.skip(); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.pos++
		case closeB:
			s.pos++
			s.depth--
			return nil
		default:
			return errSyntax
		}
	}
}

// enter counts one more level of nesting.
func (s *scanner) enter() error {
	if s.depth++; s.depth > maxDepth {
		return &FieldError{Err: ErrSyntax, Reason: "exceeded max depth"}
	}
	return nil
}

// unquote returns the value of a string read by str.
func unquote(raw []byte, slow bool) (string, error) {
	if !slow {
		b := raw[1 : len(raw)-1]
		if s, ok := wellKnown(b); ok {
			return s, nil
		}
		return string(b), nil
	}
	var v string
	if err := json.Unmarshal(raw, &v); err != nil {
		return "", errSyntax
	}
	return v, nil
}

// wellKnown returns the constant for the strings every envelope and call
// carries (the protocol version, the message type, the status), so that
// decoding them allocates nothing. Comparing does not allocate either.
func wellKnown(b []byte) (string, bool) {
	switch string(b) {
	case Version:
		return Version, true
	case string(TypeRequest):
		return string(TypeRequest), true
	case string(TypeResponse):
		return string(TypeResponse), true
	case string(TypeNotify):
		return string(TypeNotify), true
	case string(TypeHello):
		return string(TypeHello), true
	case string(TypeError): // StatusError too
		return string(TypeError), true
	case string(StatusSuccess):
		return string(StatusSuccess), true
	case string(StatusInProgress):
		return string(StatusInProgress), true
	}
	return "", false
}
