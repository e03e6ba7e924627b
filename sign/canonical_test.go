package sign_test

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gowebpki/jcs"

	"github.com/meshagent/meshagent/sign"
)

// rfcStricter lists the RFC 8785 test files whose canonical output
// meshagent refuses on purpose, and why.
var rfcStricter = map[string]string{
	"structures.json": `keys that differ only in case ("f"/"F", "e"/"E", "a"/"A")`,
}

// TestRFC8785Vectors checks Canonicalize and CheckCanonical against the RFC
// 8785 input/output pairs in testdata/rfc8785 (see its README).
func TestRFC8785Vectors(t *testing.T) {
	inputs, err := filepath.Glob("testdata/rfc8785/input/*.json")
	if err != nil || len(inputs) < 10 {
		t.Fatalf("found %d RFC 8785 inputs (%v)", len(inputs), err)
	}
	for _, in := range inputs {
		name := filepath.Base(in)
		t.Run(name, func(t *testing.T) {
			input := readFile(t, in)
			want := readFile(t, filepath.Join("testdata/rfc8785/output", name))
			// outhex has the output bytes in hexadecimal (for most files).
			if wantHex, err := os.ReadFile(filepath.Join("testdata/rfc8785/outhex", strings.TrimSuffix(name, ".json")+".txt")); err == nil {
				if h, err := hex.DecodeString(strings.Join(strings.Fields(string(wantHex)), "")); err != nil || !bytes.Equal(h, want) {
					t.Fatalf("output and outhex disagree (%v): the testdata was altered", err)
				}
			} else if !errors.Is(err, fs.ErrNotExist) {
				t.Fatal(err)
			}
			// The reference implementation agrees with the RFC.
			if got, err := jcs.Transform(input); err != nil || !bytes.Equal(got, want) {
				t.Fatalf("jcs.Transform = %s, %v; want %s", got, err, want)
			}

			if why, ok := rfcStricter[name]; ok {
				if err := sign.CheckCanonical(want); !errors.Is(err, sign.ErrNotCanonical) {
					t.Errorf("CheckCanonical(output) = %v; meshagent refuses %s", err, why)
				}
				if got, err := sign.Canonicalize(input); !errors.Is(err, sign.ErrNotCanonical) {
					t.Errorf("Canonicalize = %s, %v; meshagent refuses %s", got, err, why)
				}
				return
			}
			got, err := sign.Canonicalize(input)
			if err != nil || !bytes.Equal(got, want) {
				t.Errorf("Canonicalize\n got %s (%v)\nwant %s", got, err, want)
			}
			if err := sign.CheckCanonical(want); err != nil {
				t.Errorf("CheckCanonical(output): %v", err)
			}
			if !bytes.Equal(input, want) {
				if err := sign.CheckCanonical(input); !errors.Is(err, sign.ErrNotCanonical) {
					t.Errorf("CheckCanonical(input) = %v, want ErrNotCanonical", err)
				}
			}
		})
	}
}

// The sorting example of RFC 8785 section 3.2.3, verbatim.
func TestRFC8785SortingExample(t *testing.T) {
	input := `{
  "\u20ac": "Euro Sign",
  "\r": "Carriage Return",
  "\ufb33": "Hebrew Letter Dalet With Dagesh",
  "1": "One",
  "\ud83d\ude00": "Emoji: Grinning Face",
  "\u0080": "Control",
  "\u00f6": "Latin Small Letter O With Diaeresis"
}`
	want := "{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u0080\":\"Control\"," +
		"\"\u00f6\":\"Latin Small Letter O With Diaeresis\",\"\u20ac\":\"Euro Sign\"," +
		"\"\U0001F600\":\"Emoji: Grinning Face\",\"\ufb33\":\"Hebrew Letter Dalet With Dagesh\"}"
	got, err := sign.Canonicalize([]byte(input))
	if err != nil || string(got) != want {
		t.Errorf("Canonicalize\n got %s (%v)\nwant %s", got, err, want)
	}
	if err := sign.CheckCanonical([]byte(want)); err != nil {
		t.Error(err)
	}
}

// TestRFC8785Numbers checks the number serialisation table of RFC 8785
// Appendix B (testdata/rfc8785/numbers.txt).
func TestRFC8785Numbers(t *testing.T) {
	f, err := os.Open("testdata/rfc8785/numbers.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		hexBits, want, ok := strings.Cut(line, ",")
		if !ok {
			t.Fatalf("bad line %q", line)
		}
		bits, err := strconv.ParseUint(hexBits, 16, 64)
		if err != nil {
			t.Fatalf("bad line %q: %v", line, err)
		}
		v := math.Float64frombits(bits)
		n++
		t.Run(hexBits, func(t *testing.T) {
			got, err := jcs.NumberToJSON(v)
			if want == "" {
				if err == nil {
					t.Errorf("NumberToJSON(%v) = %s, want an error", v, got)
				}
				return
			}
			if err != nil || got != want {
				t.Errorf("NumberToJSON(%v) = %s, %v; want %s", v, got, err, want)
			}
			if err := sign.CheckCanonical([]byte(want)); err != nil {
				t.Errorf("CheckCanonical(%s): %v", want, err)
			}
			// Other spellings of the same double canonicalise to want and
			// are refused by CheckCanonical.
			for _, other := range []string{
				strconv.FormatFloat(v, 'e', -1, 64),
				strconv.FormatFloat(v, 'E', 20, 64),
				strconv.FormatFloat(v, 'g', 17, 64),
				"[" + want + "]",
			} {
				doc := []byte(other)
				wantDoc := want
				if strings.HasPrefix(other, "[") {
					wantDoc = other
				}
				got, err := sign.Canonicalize(doc)
				if err != nil || string(got) != wantDoc {
					t.Errorf("Canonicalize(%s) = %s, %v; want %s", other, got, err, wantDoc)
				}
				if other != wantDoc {
					if err := sign.CheckCanonical(doc); !errors.Is(err, sign.ErrNotCanonical) {
						t.Errorf("CheckCanonical(%s) = %v, want ErrNotCanonical", other, err)
					}
				}
			}
		})
	}
	if err := sc.Err(); err != nil || n < 20 {
		t.Fatalf("read %d numbers (%v)", n, err)
	}
}

func nest(open, close string, n int, inner string) string {
	return strings.Repeat(open, n) + inner + strings.Repeat(close, n)
}

// manyKeys returns a canonical object with keys prefix000 … prefix<n-1>, and
// extra (already formatted members) appended in order.
func manyKeys(prefix string, n int, extra ...string) string {
	var b strings.Builder
	b.WriteByte('{')
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"%s%03d":%d`, prefix, i, i)
	}
	for _, e := range extra {
		b.WriteString("," + e)
	}
	b.WriteByte('}')
	return b.String()
}

// canonicalCases are canonical documents: CheckCanonical accepts them and
// the reference implementation leaves them as they are.
var canonicalCases = []struct{ name, doc string }{
	{"empty object", `{}`},
	{"empty array", `[]`},
	{"empty string", `""`},
	{"literals", `[true,false,null]`},
	{"empty key", `{"":1}`},
	{"empty key first", `{"":1,"a":2}`},
	{"prefix sorts first", `{"a":1,"aa":2,"ab":3,"b":4}`},
	{"nested", `{"a":[1,{"b":null,"c":[]}],"b":{"c":{"d":"e"}}}`},
	{"zero", `0`},
	{"negative", `-1`},
	{"15-digit integer", `123456789012345`},
	{"16-digit integer", `1234567890123456`},
	{"2^53", `9007199254740992`},
	{"1e21", `1e+21`},
	{"largest plain integer", `999999999999999900000`},
	{"small", `1e-7`},
	{"0.000001", `0.000001`},
	{"fraction", `4.5`},
	{"negative fraction", `-0.002`},
	{"short escapes", `"\b\f\n\r\t\"\\"`},
	{"control escapes", `"\u0000\u0001\u001f\u000b"`},
	{"raw DEL", "\"\x7f\""},
	{"raw slash", `"/"`},
	{"raw U+2028", "\"\u2028\u2029\""},
	{"raw non-ASCII", `"Grüße 👋 — ключ"`},
	{"raw U+FFFD", "\"\ufffd\""},
	{"html characters", `"</script>&"`},
	{"escaped keys sort by value", `{"\n":1,"\r":2,"1":3}`},
	{"key with escaped quote", `{"\"":1,"a":2}`},
	{"depth MaxDepth (arrays)", nest("[", "]", sign.MaxDepth, "")},
	{"depth MaxDepth (objects)", nest(`{"a":`, "}", sign.MaxDepth-1, "{}")},
	{"case differs across objects", `{"a":{"A":1},"b":{"a":1}}`},
	{"many keys", manyKeys("k", 100)},
	{"many keys with similar upper/lower names", manyKeys("A", 20, `"b000":1`)},
	// UTF-16 order: U+1F600 is D83D DE00 in UTF-16, which sorts before
	// U+E000 and U+FFFD, the reverse of their UTF-8 (code point) order.
	{"astral before U+E000-U+FFFF", "{\"\U0001F600\":1,\"\ue000\":2,\"\ufb33\":3,\"\uffff\":4}"},
	{"U+D7FF before astral", "{\"\ud7ff\":1,\"\U0001F600\":2}"},
	{"astral keys among themselves", "{\"\U00010000\":1,\"\U0001F600\":2,\"\U0010FFFF\":3}"},
}

func TestCheckCanonicalAccepts(t *testing.T) {
	for _, tc := range canonicalCases {
		t.Run(tc.name, func(t *testing.T) {
			doc := []byte(tc.doc)
			if err := sign.CheckCanonical(doc); err != nil {
				t.Fatalf("CheckCanonical(%s): %v", truncated(tc.doc), err)
			}
			got, err := sign.Canonicalize(doc)
			if err != nil || !bytes.Equal(got, doc) {
				t.Errorf("Canonicalize = %s, %v; want the input", truncated(string(got)), err)
			}
			if len(got) > 0 && &got[0] != &doc[0] {
				t.Error("Canonicalize copied canonical input")
			}
			if ref, err := jcs.Transform(doc); err != nil || !bytes.Equal(ref, doc) {
				t.Errorf("jcs.Transform = %s, %v; the case is not RFC 8785 canonical", truncated(string(ref)), err)
			}
		})
	}
}

// nonCanonicalCases are refused by CheckCanonical. canon is the canonical
// form Canonicalize must produce, or "" when Canonicalize must fail too.
// stricter marks the cases that RFC 8785 alone would allow.
var nonCanonicalCases = []struct {
	name     string
	doc      string
	canon    string
	stricter bool
}{
	// Whitespace.
	{name: "leading space", doc: ` {}`, canon: `{}`},
	{name: "trailing space", doc: `{} `, canon: `{}`},
	{name: "trailing newline", doc: "{}\n", canon: `{}`},
	{name: "space after colon", doc: `{"a": 1}`, canon: `{"a":1}`},
	{name: "space before colon", doc: `{"a" :1}`, canon: `{"a":1}`},
	{name: "space after comma", doc: `[1, 2]`, canon: `[1,2]`},
	{name: "space in empty object", doc: `{ }`, canon: `{}`},
	{name: "tab", doc: "[\t1]", canon: `[1]`},
	{name: "CRLF", doc: "{\r\n\"a\":1\r\n}", canon: `{"a":1}`},

	// Keys.
	{name: "unsorted keys", doc: `{"b":1,"a":2}`, canon: `{"a":2,"b":1}`},
	{name: "unsorted nested keys", doc: `{"a":{"d":1,"c":2}}`, canon: `{"a":{"c":2,"d":1}}`},
	{name: "longer key first", doc: `{"aa":1,"a":2}`, canon: `{"a":2,"aa":1}`},
	{name: "duplicate keys", doc: `{"a":1,"a":2}`},
	{name: "duplicate keys, one escaped", doc: `{"a":1,"\u0061":2}`},
	{name: "duplicate keys, nested", doc: `{"x":{"a":1,"a":1}}`},
	{name: "case-only keys, unsorted", doc: `{"a":1,"A":2}`, stricter: true},
	{name: "case-only keys, sorted", doc: `{"A":2,"a":1}`, stricter: true},
	{name: "case-only keys, not adjacent", doc: `{"A":1,"B":2,"a":3}`, stricter: true},
	{name: "case-only keys, longer", doc: `{"Signature":"x","signature":"y"}`, stricter: true},
	{name: "case-only keys, nested", doc: `{"x":[{"ID":1,"id":2}]}`, stricter: true},
	{name: "case-only keys, non-ASCII", doc: `{"É":1,"é":2}`, stricter: true},
	{name: "case-only keys, Kelvin sign", doc: "{\"k\":1,\"\u212a\":2}", stricter: true},
	{name: "case-only keys, long s", doc: "{\"s\":1,\"\u017f\":2}", stricter: true},
	{name: "case-only keys, escaped", doc: `{"A\n":1,"a\n":2}`, stricter: true},
	{name: "case-only keys in a large object", doc: manyKeys("A", 20, `"a017":1`), stricter: true},
	{name: "case-only keys in a large object, non-ASCII", doc: manyKeys("É", 20, `"é019":1`), stricter: true},
	{name: "key not a string", doc: `{1:2}`},
	{name: "unquoted key", doc: `{a:1}`},
	// UTF-16 order is not UTF-8 order above U+FFFF.
	{name: "astral key after U+E000 (UTF-8 order)", doc: "{\"\ue000\":2,\"\U0001F600\":1}", canon: "{\"\U0001F600\":1,\"\ue000\":2}"},
	{name: "astral key after U+FFFF (UTF-8 order)", doc: "{\"\uffff\":2,\"\U00010000\":1}", canon: "{\"\U00010000\":1,\"\uffff\":2}"},

	// Strings.
	{name: "invalid UTF-8 byte", doc: "\"\xff\""},
	{name: "truncated UTF-8", doc: "\"\xc3\""},
	{name: "overlong UTF-8", doc: "\"\xc0\xaf\""},
	{name: "UTF-8-encoded surrogate", doc: "\"\xed\xa0\x80\""},
	{name: "invalid UTF-8 in a key", doc: "{\"\xff\":1}"},
	{name: "raw control character", doc: "\"\x01\"", canon: ""},
	{name: "raw tab in a string", doc: "\"\t\"", canon: ""},
	{name: `escaped solidus \/`, doc: `"\/"`, canon: `"/"`},
	{name: `\u0041`, doc: `"\u0041"`, canon: `"A"`},
	{name: `\u00e9`, doc: `"\u00e9"`, canon: `"é"`},
	{name: `\u20ac`, doc: `"\u20ac"`, canon: `"€"`},
	{name: "uppercase hex escape", doc: `"\u001F"`, canon: `"\u001f"`},
	{name: "uppercase U", doc: `"\U001f"`},
	{name: `\u000a for \n`, doc: `"\u000a"`, canon: `"\n"`},
	{name: `\u0008 for \b`, doc: `"\u0008"`, canon: `"\b"`},
	{name: `\u0022 for \"`, doc: `"\u0022"`, canon: `"\""`},
	{name: `\u005c for \\`, doc: `"\u005c"`, canon: `"\\"`},
	{name: `\u007f`, doc: `"\u007f"`, canon: "\"\x7f\""},
	{name: `\u2028`, doc: `"\u2028"`, canon: "\"\u2028\""},
	{name: "escaped surrogate pair", doc: `"\ud83d\ude00"`, canon: "\"\U0001F600\""},
	{name: "lone high surrogate", doc: `"\ud800"`},
	{name: "lone low surrogate", doc: `"\udc00"`},
	{name: "high surrogate then letter", doc: `"\ud800\u0041"`},
	{name: "reversed surrogates", doc: `"\ude00\ud83d"`},
	{name: "unknown escape", doc: `"\x"`},
	{name: "unterminated string", doc: `"abc`},
	{name: "unterminated escape", doc: `"\`},
	{name: "unterminated unicode escape", doc: `"\u00`},

	// Numbers.
	{name: "1.0", doc: `1.0`, canon: `1`},
	{name: "1e2", doc: `1e2`, canon: `100`},
	{name: "1E2", doc: `1E2`, canon: `100`},
	{name: "1e+2", doc: `1e+2`, canon: `100`},
	{name: "-0", doc: `-0`, canon: `0`},
	{name: "-0.0", doc: `-0.0`, canon: `0`},
	{name: "0.0", doc: `0.0`, canon: `0`},
	{name: "4.50", doc: `4.50`, canon: `4.5`},
	{name: "2e-3", doc: `2e-3`, canon: `0.002`},
	{name: "1e21 without sign", doc: `1e21`, canon: `1e+21`},
	{name: "1e23 written out", doc: `100000000000000000000000`, canon: `1e+23`},
	{name: "0.0000001", doc: `0.0000001`, canon: `1e-7`},
	{name: "20 digits", doc: `12345678901234567890`, canon: `12345678901234567000`},
	{name: "2^53+1", doc: `9007199254740993`, canon: `9007199254740992`},
	{name: "leading zero", doc: `01`},
	{name: "negative leading zero", doc: `-01`},
	{name: "two zeros", doc: `00`},
	{name: "leading zero, long", doc: `0123456789012345678`},
	{name: "plus sign", doc: `+1`},
	{name: "bare fraction", doc: `.5`},
	{name: "trailing dot", doc: `1.`},
	{name: "bare minus", doc: `-`},
	{name: "exponent without digits", doc: `1e`},
	{name: "hex", doc: `0x10`},
	{name: "underscore", doc: `1_000`},
	{name: "overflow", doc: `1e400`},
	{name: "NaN", doc: `NaN`},
	{name: "Infinity", doc: `Infinity`},
	{name: "-Infinity", doc: `-Infinity`},
	{name: "number in an object", doc: `{"a":1.50}`, canon: `{"a":1.5}`},

	// Structure.
	{name: "empty input", doc: ``},
	{name: "only whitespace", doc: ` `},
	{name: "trailing data", doc: `{}{}`},
	{name: "trailing value", doc: `1 2`},
	{name: "trailing garbage", doc: `[1]x`},
	{name: "trailing literal", doc: `truex`},
	{name: "bad literal", doc: `tru`},
	{name: "capitalised literal", doc: `True`},
	{name: "unterminated object", doc: `{"a":1`},
	{name: "unterminated array", doc: `[1,`},
	{name: "missing value", doc: `{"a":}`},
	{name: "missing colon", doc: `{"a"}`},
	{name: "empty element", doc: `[,]`},
	{name: "trailing comma in array", doc: `[1,]`},
	{name: "trailing comma in object", doc: `{"a":1,}`},
	{name: "comma in empty object", doc: `{,}`},
	{name: "depth MaxDepth+1 (arrays)", doc: nest("[", "]", sign.MaxDepth+1, ""), stricter: true},
	{name: "depth MaxDepth+1 (objects)", doc: nest(`{"a":`, "}", sign.MaxDepth, "{}"), stricter: true},
	{name: "depth MaxDepth+1 with whitespace", doc: nest("[ ", "]", sign.MaxDepth+1, ""), stricter: true},
	{name: "very deep", doc: nest("[", "]", 100000, "")},
}

func TestCheckCanonicalRefuses(t *testing.T) {
	for _, tc := range nonCanonicalCases {
		t.Run(tc.name, func(t *testing.T) {
			doc := []byte(tc.doc)
			err := sign.CheckCanonical(doc)
			if !errors.Is(err, sign.ErrNotCanonical) {
				t.Fatalf("CheckCanonical(%s) = %v, want ErrNotCanonical", truncated(tc.doc), err)
			}

			got, cerr := sign.Canonicalize(doc)
			if tc.canon != "" {
				if cerr != nil || string(got) != tc.canon {
					t.Errorf("Canonicalize(%s) = %s, %v; want %s", truncated(tc.doc), got, cerr, tc.canon)
				}
				if err := sign.CheckCanonical([]byte(tc.canon)); err != nil {
					t.Errorf("CheckCanonical(%s): %v", tc.canon, err)
				}
			} else {
				if cerr == nil {
					t.Errorf("Canonicalize(%s) = %s, want an error", truncated(tc.doc), truncated(string(got)))
				}
				if !errors.Is(cerr, sign.ErrInvalidJSON) && !errors.Is(cerr, sign.ErrNotCanonical) {
					t.Errorf("Canonicalize: %v, want ErrInvalidJSON or ErrNotCanonical", cerr)
				}
			}

			// Our refusal is RFC 8785's, except where meshagent is
			// stricter on purpose.
			ref, rerr := jcs.Transform(doc)
			switch {
			case tc.stricter:
				if rerr != nil {
					t.Errorf("marked stricter, but jcs refuses it too: %v", rerr)
				}
			case tc.canon != "":
				if rerr != nil || string(ref) != tc.canon {
					t.Errorf("jcs.Transform = %s, %v; want %s", ref, rerr, tc.canon)
				}
			default:
				if rerr == nil {
					t.Errorf("jcs.Transform accepts it (%s); mark the case stricter or give its canonical form", truncated(string(ref)))
				}
			}
		})
	}
}

// TestCheckCanonicalErrorPosition checks that errors say where.
func TestCheckCanonicalErrorPosition(t *testing.T) {
	for _, tc := range []struct {
		doc, want string
	}{
		{`{"b":1,"a":2}`, "out of order at byte 7"},
		{`{"a":1,"a":2}`, "duplicate key"},
		{`{"A":1,"a":2}`, `keys "A" and "a" differ only in case at byte 7`},
		{`[1, 2]`, "at byte 3"},
		{`1.0`, "non-canonical number at byte 0"},
		{`{}x`, "trailing data after the value at byte 2"},
	} {
		err := sign.CheckCanonical([]byte(tc.doc))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("CheckCanonical(%s) = %v, want a message containing %q", tc.doc, err, tc.want)
		}
	}
}

// A hostile object with many members must cost linear time: the case-fold
// check was once quadratic (a 560 KB object took seconds).
func TestCheckCanonicalManyKeysIsLinear(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a large document")
	}
	var b bytes.Buffer
	b.WriteByte('{')
	const n = 100_000
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"k%07d":0`, i)
	}
	b.WriteByte('}')
	doc := b.Bytes()
	start := time.Now()
	if err := sign.CheckCanonical(doc); err != nil {
		t.Fatal(err)
	}
	// Linear is tens of milliseconds here, even under the race detector;
	// quadratic was minutes.
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("CheckCanonical of %d keys took %v", n, d)
	}
	// A case-folded duplicate far from its twin is still found.
	dup := append([]byte(`{"K0070000":1,`), doc[1:]...)
	if err := sign.CheckCanonical(dup); err == nil || !strings.Contains(err.Error(), `keys "K0070000" and "k0070000" differ only in case`) {
		t.Errorf("CheckCanonical: %v, want a case-fold error", err)
	}
}

func readFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func truncated(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}
