package sign

import (
	"bytes"
	"math/rand/v2"
	"testing"
	"unicode"
	"unicode/utf8"
)

// foldKey must define the same relation as bytes.EqualFold (and so as
// encoding/json's case-insensitive key matching), or small objects (linear
// EqualFold) and large ones (the folded-key set) would disagree.
func TestFoldRuneIsOrbitMinimum(t *testing.T) {
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if !utf8.ValidRune(r) {
			continue
		}
		f := foldRune(r)
		if f > r {
			t.Fatalf("foldRune(%U) = %U, larger than the rune", r, f)
		}
		if g := foldRune(unicode.SimpleFold(r)); g != f {
			t.Fatalf("foldRune(%U) = %U but foldRune(SimpleFold) = %U", r, f, g)
		}
		if !bytes.EqualFold(utf8.AppendRune(nil, r), utf8.AppendRune(nil, f)) {
			t.Fatalf("foldRune(%U) = %U, which EqualFold does not match", r, f)
		}
	}
}

func TestFoldKeyMatchesEqualFold(t *testing.T) {
	// An alphabet rich in folding orbits: ASCII letters, the Kelvin sign and
	// long s (which fold to ASCII), Greek sigma and theta forms, dotted and
	// dotless i (which do not fold to ASCII), and letters without case.
	alphabet := []rune("aAkKsSiI\u212a\u017f\u0130\u0131\u03a3\u03c3\u03c2\u03b8\u03d1\u0398\u03f4\u00df\u1e9e\u01c4\u01c5\u01c6\u00e9\u00c9 1_\U0001F600\U00010400\U00010428")
	rng := rand.New(rand.NewPCG(1, 2))
	word := func() []byte {
		var b []byte
		for range rng.IntN(4) {
			b = utf8.AppendRune(b, alphabet[rng.IntN(len(alphabet))])
		}
		return b
	}
	for range 200_000 {
		a, b := word(), word()
		if got, want := bytes.Equal(foldKey(a), foldKey(b)), bytes.EqualFold(a, b); got != want {
			t.Fatalf("%q vs %q: foldKey equal = %v, EqualFold = %v", a, b, got, want)
		}
	}
}

// PlainStringRun must stop at the first word holding any byte a string cannot
// hold as it is, wherever in the word it sits, and never before.
func TestPlainRun(t *testing.T) {
	plain := func(c byte) bool { return c >= 0x20 && c < 0x80 && c != '"' && c != '\\' }
	buf := bytes.Repeat([]byte{'a'}, 24)
	for c := range 256 {
		for pos := range len(buf) {
			buf[pos] = byte(c)
			want := len(buf) / 8 * 8
			if !plain(byte(c)) {
				want = pos / 8 * 8
			}
			if got := PlainStringRun(buf); got != want {
				t.Fatalf("byte %#x at %d: PlainStringRun = %d, want %d", c, pos, got, want)
			}
			buf[pos] = 'a'
		}
	}
}
