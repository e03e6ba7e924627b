package sign_test

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/meshagent/meshagent/sign"
)

var update = flag.Bool("update", false, "rewrite testdata/vectors from the cases in vectors_test.go (review the diff: it is a protocol change)")

const vectorDir = "testdata/vectors"

// vector is the format of testdata/vectors/*.json, meant to be read by
// other implementations as well. A positive vector pins every byte: the
// canonical signing input, the (deterministic) Ed25519 signature and the
// embedded form. A negative vector has want_error, naming the sentinel that
// Detach followed by Verify against agent_id must return.
type vector struct {
	Name    string `json:"name"`
	Comment string `json:"comment"`
	// SeedHex is the 32-byte Ed25519 seed of the key that signed.
	SeedHex string `json:"seed_hex"`
	// AgentID is the peer ID a receiver verifies against (from.agentId);
	// PublicKeyBase64 is the same id in seed 002's form.
	AgentID         string `json:"agent_id"`
	PublicKeyBase64 string `json:"public_key_base64"`
	// Unsigned is the message without "signature", as a sender might write
	// it (not canonical); Canonical is the exact string that is signed.
	Unsigned        json.RawMessage `json:"unsigned,omitempty"`
	Canonical       string          `json:"canonical,omitempty"`
	SignatureBase64 string          `json:"signature_base64,omitempty"`
	// Signed is the exact embedded form: Canonical with the "signature"
	// member added, still canonical.
	Signed    string `json:"signed"`
	WantError string `json:"want_error,omitempty"`
}

// vectorCase is the source of a positive vector. In unsigned, $ID1 and $ID2
// stand for the agent ids of the keys from seeds 0x01…01 and 0x02…02.
type vectorCase struct {
	name, comment string
	seed          byte
	unsigned      string
}

var vectorCases = []vectorCase{
	{
		name:    "hello-basic",
		comment: "Seed 002's hello from agent 1 to agent 2, ids in peer ID form.",
		seed:    1,
		unsigned: `{
  "protocol": "agentprotocol/0.1",
  "id": "550e8400-e29b-41d4-a716-446655440000",
  "timestamp": "2026-02-01T15:08:00Z",
  "from": {
    "agentId": "$ID1",
    "name": "Freya",
    "capabilities": ["agentprotocol:core", "agentprotocol:tasks", "agentprotocol:proofs"]
  },
  "to": {"agentId": "$ID2", "broadcast": false},
  "type": "hello",
  "payload": {"version": "0.1", "features": ["signed-messages", "streaming"]},
  "metadata": {}
}`,
	},
	{
		name:    "request-code-review",
		comment: "Seed 002's request from agent 1 to agent 2, with metadata; the code contains characters a Go encoder would HTML-escape.",
		seed:    1,
		unsigned: `{
  "protocol": "agentprotocol/0.1",
  "id": "7d444840-9dc0-11d1-b245-5ffdce74fad2",
  "timestamp": "2026-02-01T15:08:01Z",
  "from": {"agentId": "$ID1", "name": "Freya", "capabilities": ["agentprotocol:core"]},
  "to": {"agentId": "$ID2", "broadcast": false},
  "type": "request",
  "payload": {
    "action": "code-review",
    "correlationId": "req-123",
    "params": {
      "code": "function add(a, b) { return a && b ? a + b : a < b; }",
      "language": "javascript"
    },
    "timeout": 30000
  },
  "metadata": {"priority": "high", "custom-field": "value"}
}`,
	},
	{
		name:    "response-success",
		comment: "Seed 002's response from agent 2 to agent 1.",
		seed:    2,
		unsigned: `{
  "protocol": "agentprotocol/0.1",
  "id": "9b2e2f0a-3c1d-4e5f-8a6b-7c8d9e0f1a2b",
  "timestamp": "2026-02-01T15:08:02.250Z",
  "from": {"agentId": "$ID2", "name": "Reviewer", "capabilities": ["agentprotocol:core", "myagent:code-review"]},
  "to": {"agentId": "$ID1", "broadcast": false},
  "type": "response",
  "payload": {
    "correlationId": "req-123",
    "status": "success",
    "result": {"rating": "good", "suggestions": ["Consider adding type annotations"]}
  },
  "metadata": {}
}`,
	},
	{
		name:    "error-capability-not-supported",
		comment: "Seed 002's error response from agent 2 to agent 1.",
		seed:    2,
		unsigned: `{
  "protocol": "agentprotocol/0.1",
  "id": "0f8fad5b-d9cb-469f-a165-70867728950e",
  "timestamp": "2026-02-01T15:08:03Z",
  "from": {"agentId": "$ID2", "capabilities": ["agentprotocol:core"]},
  "to": {"agentId": "$ID1", "broadcast": false},
  "type": "error",
  "payload": {
    "correlationId": "req-123",
    "code": "CAPABILITY_NOT_SUPPORTED",
    "message": "Agent does not support code-review capability",
    "details": {"requested": "code-review", "available": ["translation", "summarization"]}
  }
}`,
	},
	{
		name: "request-non-ascii",
		comment: "Non-ASCII text and keys. Keys sort by UTF-16 code units: U+1F600 (D83D DE00) before U+E000 and U+FB33, " +
			"unlike UTF-8 byte order. Escapes in the input (\\u00e9, \\/, \\u0041, \\ud83d\\udc4b) become raw characters; " +
			"control characters stay escaped; U+2028 and </script> stay raw.",
		seed: 1,
		unsigned: `{
  "protocol": "agentprotocol/0.1",
  "id": "c9bf9e57-1685-4c89-bafb-ff5af830be8a",
  "timestamp": "2026-02-01T15:08:04Z",
  "from": {"agentId": "$ID1", "name": "Freya 🌸", "capabilities": ["myagent:translation/de-ja"]},
  "to": {"agentId": "$ID2", "broadcast": false},
  "type": "request",
  "payload": {
    "action": "translation",
    "correlationId": "req-grüße",
    "params": {
      "text": "Grüße 👋",
      "escaped": "caf\u00e9 \/ \u0041 \ud83d\udc4b",
      "controls": "tab\there\nnew line \"quoted\" back\\slash \u0001 \u001F \u007f",
      "separators": "\u2028 \u2029 </script> & <b>",
      "glossary": {
        "\ue000": "private use U+E000",
        "😀": "U+1F600, sorts before U+E000",
        "דּ": "U+FB33",
        "ключ": "значение",
        "é": "U+00E9",
        "z": "ASCII sorts first"
      }
    },
    "timeout": 5000
  },
  "metadata": {"langue": "français", "言語": "日本語"}
}`,
	},
	{
		name: "response-numbers",
		comment: "Numbers in RFC 8785 (ECMAScript) form: 1E30 becomes 1e+30, 4.50 becomes 4.5, -0 becomes 0, " +
			"integers beyond 2^53 are rounded, and very large or small magnitudes use exponents.",
		seed: 2,
		unsigned: `{
  "protocol": "agentprotocol/0.1",
  "id": "e4eaaaf2-d142-11e1-b3e4-080027620cdd",
  "timestamp": "2026-02-01T15:08:05Z",
  "from": {"agentId": "$ID2"},
  "to": {"agentId": "$ID1", "broadcast": false},
  "type": "response",
  "payload": {
    "correlationId": "req-456",
    "status": "success",
    "result": {
      "integers": [0, -1, 1, 42, 9007199254740992, -9007199254740992, 12345678901234567890],
      "fractions": [0.1, 0.30000000000000004, 4.50, 333333333.33333329, 1424953923781206.2, -0.0000033333333333333333],
      "exponents": [1E30, 2e-3, 1e-7, 0.000001, 1e21, 999999999999999900000, 5e-324, 1.7976931348623157e+308, 1e+23],
      "negativeZero": -0,
      "spelled": [1.0, 100e-2, 0.5e1, 10E+0]
    }
  }
}`,
	},
	{
		name:    "notify-broadcast",
		comment: "A broadcast notification on a topic: no recipient agent id.",
		seed:    1,
		unsigned: `{
  "protocol": "agentprotocol/0.1",
  "id": "1b4e28ba-2fa1-11d2-883f-0016d3cca427",
  "timestamp": "2026-02-01T15:09:00Z",
  "from": {"agentId": "$ID1", "name": "Freya"},
  "to": {"broadcast": true, "topic": "weather"},
  "type": "notify",
  "payload": {"event": "forecast", "data": {"city": "Zürich", "tempC": -3.5, "rain": false, "wind": null}},
  "metadata": {"ttl": 60}
}`,
	},
}

// negativeCase derives a negative vector from a positive one.
type negativeCase struct {
	name, comment, from string
	want                string
	make                func(t *testing.T, v *vector) (seed byte, signed string)
}

var negativeCases = []negativeCase{
	{
		name: "tampered-payload", from: "request-code-review", want: "ErrInvalidSignature",
		comment: "request-code-review with the timeout changed from 30000 to 30001 after signing.",
		make: func(t *testing.T, v *vector) (byte, string) {
			return 1, mustReplace(t, v.Signed, `"timeout":30000`, `"timeout":30001`)
		},
	},
	{
		name: "signed-by-other-key", from: "request-code-review", want: "ErrInvalidSignature",
		comment: "request-code-review (from.agentId is agent 1) signed with agent 2's key.",
		make: func(t *testing.T, v *vector) (byte, string) {
			return 2, attach(t, v.Canonical, testSigner(t, 2).Sign([]byte(v.Canonical)))
		},
	},
	{
		name: "truncated-signature", from: "hello-basic", want: "ErrInvalidSignature",
		comment: "hello-basic with only the first 63 bytes of its signature.",
		make: func(t *testing.T, v *vector) (byte, string) {
			sig, _ := base64.StdEncoding.DecodeString(v.SignatureBase64)
			return 1, mustReplace(t, v.Signed, v.SignatureBase64, base64.StdEncoding.EncodeToString(sig[:63]))
		},
	},
	{
		name: "missing-signature", from: "hello-basic", want: "ErrInvalidSignature",
		comment: "hello-basic without its signature member.",
		make:    func(t *testing.T, v *vector) (byte, string) { return 1, v.Canonical },
	},
	{
		name: "unsorted-signing-input", from: "hello-basic", want: "ErrInvalidSignature",
		comment: "hello-basic signed over compact JSON in the seed's member order instead of the canonical form " +
			"(a signer that forgot to sort keys).",
		make: func(t *testing.T, v *vector) (byte, string) {
			var compact bytes.Buffer
			if err := json.Compact(&compact, v.Unsigned); err != nil {
				t.Fatal(err)
			}
			sig := testSigner(t, 1).Sign(compact.Bytes())
			return 1, mustReplace(t, v.Signed, v.SignatureBase64, sign.EncodeSignature(sig))
		},
	},
	{
		name: "duplicate-key", from: "request-code-review", want: "ErrInvalidJSON",
		comment: "request-code-review with a second \"type\" member: ambiguous JSON is refused before verifying.",
		make: func(t *testing.T, v *vector) (byte, string) {
			return 1, mustReplace(t, v.Signed, `"type":"request"`, `"type":"request","type":"response"`)
		},
	},
	{
		name: "case-variant-key", from: "request-code-review", want: "ErrNotCanonical",
		comment: "request-code-review with an extra \"Type\" member, which a case-insensitive decoder would confuse with \"type\".",
		make: func(t *testing.T, v *vector) (byte, string) {
			// "Type" sorts before every lower-case key: put it first.
			return 1, `{"Type":"response",` + strings.TrimPrefix(v.Signed, "{")
		},
	},
}

var sentinels = map[string]error{
	"ErrInvalidSignature": sign.ErrInvalidSignature,
	"ErrInvalidJSON":      sign.ErrInvalidJSON,
	"ErrNotCanonical":     sign.ErrNotCanonical,
	"ErrInvalidAgentID":   sign.ErrInvalidAgentID,
}

func mustReplace(t *testing.T, s, old, new string) string {
	t.Helper()
	if !strings.Contains(s, old) {
		t.Fatalf("%q not found in %s", old, s)
	}
	return strings.Replace(s, old, new, 1)
}

func attach(t *testing.T, canonical string, sig []byte) string {
	t.Helper()
	b, err := sign.Attach([]byte(canonical), sig)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// agentIDs returns the replacements for $ID1 and $ID2.
func agentIDs(t testing.TB) *strings.Replacer {
	return strings.NewReplacer("$ID1", testSigner(t, 1).ID().String(), "$ID2", testSigner(t, 2).ID().String())
}

// makeVector computes a positive vector from its case.
func makeVector(t *testing.T, c vectorCase) *vector {
	t.Helper()
	s := testSigner(t, c.seed)
	unsigned := []byte(agentIDs(t).Replace(c.unsigned))
	canon, err := sign.Canonicalize(unsigned)
	if err != nil {
		t.Fatalf("%s: Canonicalize: %v", c.name, err)
	}
	signed, err := s.SignJSON(unsigned)
	if err != nil {
		t.Fatalf("%s: SignJSON: %v", c.name, err)
	}
	return &vector{
		Name:            c.name,
		Comment:         c.comment + " Keys are Ed25519 from seed bytes 0x01…01 (agent 1) and 0x02…02 (agent 2).",
		SeedHex:         hex.EncodeToString(seed(c.seed)),
		AgentID:         s.ID().String(),
		PublicKeyBase64: s.PublicKeyBase64(),
		Unsigned:        unsigned,
		Canonical:       string(canon),
		SignatureBase64: sign.EncodeSignature(s.Sign(canon)),
		Signed:          string(signed),
	}
}

func writeVectors(t *testing.T) {
	t.Helper()
	if err := os.MkdirAll(vectorDir, 0o755); err != nil {
		t.Fatal(err)
	}
	old, _ := filepath.Glob(filepath.Join(vectorDir, "*.json"))
	for _, p := range old {
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
	}
	byName := map[string]*vector{}
	var all []*vector
	for _, c := range vectorCases {
		v := makeVector(t, c)
		byName[c.name] = v
		all = append(all, v)
	}
	for _, n := range negativeCases {
		base := byName[n.from]
		seedByte, signed := n.make(t, base)
		all = append(all, &vector{
			Name:            "neg-" + n.name,
			Comment:         n.comment,
			SeedHex:         hex.EncodeToString(seed(seedByte)),
			AgentID:         base.AgentID,
			PublicKeyBase64: base.PublicKeyBase64,
			Signed:          signed,
			WantError:       n.want,
		})
	}
	for _, v := range all {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		enc.SetIndent("", "  ")
		if err := enc.Encode(v); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(vectorDir, v.Name+".json"), buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("wrote %d vectors to %s; review the diff", len(all), vectorDir)
}

// readVectors returns the vectors in testdata/vectors, positive first.
func readVectors(t testing.TB) []*vector {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(vectorDir, "*.json"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no vectors in %s (%v); run go test -run TestVectors -update", vectorDir, err)
	}
	var vs []*vector
	for _, p := range paths {
		var v vector
		dec := json.NewDecoder(bytes.NewReader(readFile(t, p)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if v.Name+".json" != filepath.Base(p) {
			t.Fatalf("%s: name %q does not match the file name", p, v.Name)
		}
		vs = append(vs, &v)
	}
	slices.SortStableFunc(vs, func(a, b *vector) int {
		return strings.Compare(a.WantError, b.WantError)
	})
	return vs
}

func TestVectors(t *testing.T) {
	if *update {
		writeVectors(t)
	}
	vs := readVectors(t)

	// The files and the cases are the same set.
	var want, got []string
	for _, c := range vectorCases {
		want = append(want, c.name)
	}
	for _, n := range negativeCases {
		want = append(want, "neg-"+n.name)
	}
	for _, v := range vs {
		got = append(got, v.Name)
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("vector files %v, cases %v; run go test -run TestVectors -update", got, want)
	}

	cases := map[string]vectorCase{}
	for _, c := range vectorCases {
		cases[c.name] = c
	}
	for _, v := range vs {
		t.Run(v.Name, func(t *testing.T) {
			if v.WantError != "" {
				checkNegativeVector(t, v)
				return
			}
			checkVector(t, v, cases[v.Name])
		})
	}
}

func checkVector(t *testing.T, v *vector, c vectorCase) {
	seedBytes, err := hex.DecodeString(v.SeedHex)
	if err != nil {
		t.Fatal(err)
	}
	k, err := sign.KeyFromSeed(seedBytes)
	if err != nil {
		t.Fatal(err)
	}
	s, err := sign.NewSigner(k)
	if err != nil {
		t.Fatal(err)
	}

	// The file's input is the case's (else the case changed without -update).
	var fileIn, caseIn bytes.Buffer
	if err := json.Compact(&fileIn, v.Unsigned); err != nil {
		t.Fatal(err)
	}
	if err := json.Compact(&caseIn, []byte(agentIDs(t).Replace(c.unsigned))); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(fileIn.Bytes(), caseIn.Bytes()) {
		t.Fatal("the case's unsigned message differs from the file's; run go test -run TestVectors -update and review")
	}

	// Identity.
	if s.ID().String() != v.AgentID {
		t.Errorf("agent id %s, file has %s", s.ID(), v.AgentID)
	}
	if s.PublicKeyBase64() != v.PublicKeyBase64 {
		t.Errorf("public key %s, file has %s", s.PublicKeyBase64(), v.PublicKeyBase64)
	}
	if id, err := sign.ParseAgentID(v.PublicKeyBase64); err != nil || id.String() != v.AgentID {
		t.Errorf("ParseAgentID(public_key_base64) = %s, %v", id, err)
	}

	// 1. The signing input, byte for byte.
	canon, err := sign.Canonicalize(v.Unsigned)
	if err != nil {
		t.Fatal(err)
	}
	if string(canon) != v.Canonical {
		t.Errorf("canonical form changed\n got %s\nwant %s", canon, v.Canonical)
	}
	if err := sign.CheckCanonical([]byte(v.Canonical)); err != nil {
		t.Errorf("file's canonical: %v", err)
	}
	var env struct {
		From struct {
			AgentID string `json:"agentId"`
		} `json:"from"`
	}
	if err := json.Unmarshal(canon, &env); err != nil || env.From.AgentID != v.AgentID {
		t.Errorf("from.agentId %q is not the signer %s (%v)", env.From.AgentID, v.AgentID, err)
	}

	// 2. The signature, byte for byte (Ed25519 is deterministic).
	if got := sign.EncodeSignature(s.Sign(canon)); got != v.SignatureBase64 {
		t.Errorf("signature changed\n got %s\nwant %s", got, v.SignatureBase64)
	}

	// 3. The embedded form.
	signed, err := s.SignJSON(v.Unsigned)
	if err != nil {
		t.Fatal(err)
	}
	if string(signed) != v.Signed {
		t.Errorf("SignJSON changed\n got %s\nwant %s", signed, v.Signed)
	}
	if err := sign.CheckCanonical([]byte(v.Signed)); err != nil {
		t.Errorf("file's signed form: %v", err)
	}
	if a, err := sign.Attach([]byte(v.Canonical), mustDecodeSig(t, v.SignatureBase64)); err != nil || string(a) != v.Signed {
		t.Errorf("Attach(canonical, signature) = %s, %v", a, err)
	}

	// 4. The receiving side, from the file's bytes.
	body, sig, err := sign.Detach([]byte(v.Signed))
	if err != nil {
		t.Fatalf("Detach: %v", err)
	}
	if string(body) != v.Canonical || sign.EncodeSignature(sig) != v.SignatureBase64 {
		t.Errorf("Detach = %s, %s; want the file's canonical and signature", body, sign.EncodeSignature(sig))
	}
	id, err := sign.ParseAgentID(v.AgentID)
	if err != nil {
		t.Fatal(err)
	}
	if err := sign.Verify(id, body, sig); err != nil {
		t.Errorf("Verify: %v", err)
	}
}

func checkNegativeVector(t *testing.T, v *vector) {
	want, ok := sentinels[v.WantError]
	if !ok {
		t.Fatalf("unknown want_error %q", v.WantError)
	}
	id, err := sign.ParseAgentID(v.AgentID)
	if err != nil {
		t.Fatal(err)
	}
	if pid, err := sign.ParseAgentID(v.PublicKeyBase64); err != nil || pid != id {
		t.Errorf("public_key_base64 is not agent_id: %s, %v", pid, err)
	}
	body, sig, err := sign.Detach([]byte(v.Signed))
	if err == nil {
		err = sign.Verify(id, body, sig)
	}
	if !errors.Is(err, want) {
		t.Errorf("Detach+Verify = %v, want %s", err, v.WantError)
	}
}

func mustDecodeSig(t *testing.T, s string) []byte {
	t.Helper()
	b, err := sign.DecodeSignature(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
