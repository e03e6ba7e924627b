package protocol

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

var update = flag.Bool("update", false, "rewrite testdata/envelopes from the code (review the diff: it is a wire-format change)")

const goldenDir = "testdata/envelopes"

// goldenEnvelope is one file of testdata/envelopes. It is JSON so that
// other implementations can check they sign the same bytes.
type goldenEnvelope struct {
	Name    string `json:"name"`
	Comment string `json:"comment"`
	// SeedHex is the Ed25519 seed of the signer (sign.KeyFromSeed).
	SeedHex string `json:"seed_hex"`
	// AgentID and PublicKeyBase64 are the signer's two agent id forms.
	AgentID         string `json:"agent_id"`
	PublicKeyBase64 string `json:"public_key_base64"`
	// Canonical is the exact signed text: RFC 8785 canonical JSON of the
	// envelope without "signature".
	Canonical string `json:"canonical"`
	// Signature is the standard base64 Ed25519 signature of Canonical.
	Signature string `json:"signature"`
	// SignedJSON is the embedded (edge) form, with a "signature" member.
	SignedJSON string `json:"signed_json"`
	// FrameHex is the frame a direct stream carries:
	// uvarint(len) ‖ signature ‖ canonical.
	FrameHex string `json:"frame_hex"`
}

type goldenCase struct {
	name    string
	comment string
	typ     MessageType
	to      *Recipient
	payload any
	from    Sender // name and capabilities; the agent id comes from the key
}

func goldenCases(t testing.TB) []goldenCase {
	agent2 := testSigner(t, 2).ID().String()
	return []goldenCase{
		{
			name:    "request",
			comment: "Direct request (seed 002's code-review example) from the agent of seed 0x01 to the agent of seed 0x02.",
			typ:     TypeRequest,
			to:      &Recipient{AgentID: agent2},
			from:    Sender{Name: "Freya"},
			payload: Request{
				Action:        "code-review",
				CorrelationID: "req-123",
				Params:        json.RawMessage(`{"code":"function add(a, b) { return a + b; }","language":"javascript"}`),
				Timeout:       30000,
			},
		},
		{
			name:    "response",
			comment: "Final success response to req-123.",
			typ:     TypeResponse,
			to:      &Recipient{AgentID: agent2},
			payload: Response{
				CorrelationID: "req-123",
				Status:        StatusSuccess,
				Result:        json.RawMessage(`{"rating":"good","suggestions":["Consider adding type annotations"]}`),
			},
		},
		{
			name:    "response_in_progress",
			comment: "Progress response to req-123; a final response follows.",
			typ:     TypeResponse,
			to:      &Recipient{AgentID: agent2},
			payload: Response{
				CorrelationID: "req-123",
				Status:        StatusInProgress,
				Result:        json.RawMessage(`{"done":0.25,"note":"parsing"}`),
			},
		},
		{
			name:    "error_capability_not_supported",
			comment: "Error envelope for req-123 with the provider's capabilities in details.available (seed 002).",
			typ:     TypeError,
			to:      &Recipient{AgentID: agent2},
			payload: (&Error{
				Code:          CodeCapabilityNotSupported,
				CorrelationID: "req-123",
				Message:       "Agent does not support code-review capability",
			}).WithDetails(map[string]any{
				"requested": "code-review",
				"available": []string{"translation", "summarization"},
			}),
		},
		{
			name:    "hello",
			comment: "Hello with seed 000 capability objects; strings with <, &, non-ASCII and U+2028 pin the canonical escaping.",
			typ:     TypeHello,
			to:      &Recipient{AgentID: agent2},
			from:    Sender{Name: "Freya", Capabilities: []string{"agentprotocol:core", "myagent:code-review"}},
			payload: Hello{
				Version:  HelloVersion,
				Features: []string{"signed-messages", "streaming", "in-progress"},
				Capabilities: []Capability{
					{
						Name:        "myagent:code-review",
						Description: "Reviews <code> & suggests fixes \u2014 English or 日本語\u2028second line",
						InputSchema: json.RawMessage(`{"additionalProperties":false,"properties":{"code":{"type":"string"},` +
							`"language":{"type":"string"}},"required":["code"],"type":"object"}`),
						OutputSchema:           json.RawMessage(`{"properties":{"rating":{"type":"string"}},"type":"object"}`),
						Keywords:               []string{"review", "lint"},
						AuthorizedRequesterIDs: []string{agent2},
					},
					{
						Name:         "translation",
						Description:  "Translates text",
						InputSchema:  json.RawMessage(`{}`),
						OutputSchema: json.RawMessage(`{}`),
					},
				},
			},
		},
		{
			name:    "notify_topic",
			comment: "Topic notification (GossipSub), no recipient agent.",
			typ:     TypeNotify,
			to:      &Recipient{Broadcast: true, Topic: "outbound:42"},
			payload: map[string]any{"temperature": 21.5, "unit": "°C"},
		},
	}
}

// sealGolden builds and seals a golden case with the seed-0x01 key, a
// fixed id and a fixed timestamp.
func sealGolden(t testing.TB, c goldenCase) goldenEnvelope {
	t.Helper()
	s := testSigner(t, 1)
	e := testEnvelope(t, c.typ, c.to, c.payload)
	e.From = c.from
	body, sig := seal(t, s, e)
	doc, err := SignedJSON(body, sig)
	if err != nil {
		t.Fatal(err)
	}
	return goldenEnvelope{
		Name:            c.name,
		Comment:         c.comment,
		SeedHex:         strings.Repeat("01", 32),
		AgentID:         s.ID().String(),
		PublicKeyBase64: s.PublicKeyBase64(),
		Canonical:       string(body),
		Signature:       sign.EncodeSignature(sig),
		SignedJSON:      string(doc),
		FrameHex:        hex.EncodeToString(AppendSignedFrame(nil, sig, body)),
	}
}

func goldenPath(name string) string { return filepath.Join(goldenDir, name+".json") }

func writeGolden(t *testing.T, g goldenEnvelope) {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(g); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(goldenDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(goldenPath(g.Name), buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// readGolden reads every golden envelope; fuzz targets seed from them.
func readGolden(tb testing.TB) []goldenEnvelope {
	tb.Helper()
	paths, err := filepath.Glob(filepath.Join(goldenDir, "*.json"))
	if err != nil {
		tb.Fatal(err)
	}
	var out []goldenEnvelope
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			tb.Fatal(err)
		}
		var g goldenEnvelope
		if err := json.Unmarshal(b, &g); err != nil {
			tb.Fatalf("%s: %v", p, err)
		}
		out = append(out, g)
	}
	return out
}

func TestGoldenEnvelopes(t *testing.T) {
	cases := goldenCases(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := sealGolden(t, c)
			if *update {
				writeGolden(t, got)
				return
			}
			b, err := os.ReadFile(goldenPath(c.name))
			if err != nil {
				t.Fatalf("%v (run go test ./protocol -run TestGoldenEnvelopes -update)", err)
			}
			var want goldenEnvelope
			if err := json.Unmarshal(b, &want); err != nil {
				t.Fatal(err)
			}
			// Byte-equal, not merely "verifies": Ed25519 is deterministic.
			for _, f := range []struct{ field, got, want string }{
				{"seed_hex", got.SeedHex, want.SeedHex},
				{"agent_id", got.AgentID, want.AgentID},
				{"public_key_base64", got.PublicKeyBase64, want.PublicKeyBase64},
				{"canonical", got.Canonical, want.Canonical},
				{"signature", got.Signature, want.Signature},
				{"signed_json", got.SignedJSON, want.SignedJSON},
				{"frame_hex", got.FrameHex, want.FrameHex},
			} {
				if f.got != f.want {
					t.Errorf("%s changed:\n got %s\nwant %s", f.field, f.got, f.want)
				}
			}
			checkGoldenDecodes(t, c.typ, want)
		})
	}
	if *update {
		return
	}
	// Every file belongs to a case, so a renamed case leaves nothing stale.
	var names []string
	for _, c := range cases {
		names = append(names, c.name)
	}
	for _, g := range readGolden(t) {
		if !slices.Contains(names, g.Name) {
			t.Errorf("%s has no case in goldenCases", goldenPath(g.Name))
		}
	}
}

// checkGoldenDecodes opens the file's bytes (not the ones just produced)
// through every receiving path.
func checkGoldenDecodes(t *testing.T, typ MessageType, g goldenEnvelope) {
	t.Helper()
	seed, err := hex.DecodeString(g.SeedHex)
	if err != nil {
		t.Fatal(err)
	}
	k, err := sign.KeyFromSeed(seed)
	if err != nil {
		t.Fatal(err)
	}
	s, err := sign.NewSigner(k)
	if err != nil {
		t.Fatal(err)
	}
	if s.ID().String() != g.AgentID || s.PublicKeyBase64() != g.PublicKeyBase64 {
		t.Fatalf("seed does not give agent %s", g.AgentID)
	}
	sig, err := base64.StdEncoding.DecodeString(g.Signature)
	if err != nil {
		t.Fatal(err)
	}
	e, err := Open([]byte(g.Canonical), sig, mustID(t, g.AgentID))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if e.Type != typ || e.ID != testID || e.Timestamp != testTimestamp {
		t.Errorf("opened %+v", e)
	}
	e2, body, err := OpenJSON([]byte(g.SignedJSON))
	if err != nil {
		t.Fatalf("OpenJSON: %v", err)
	}
	if string(body) != g.Canonical || e2.Signature != g.Signature {
		t.Errorf("OpenJSON body or signature differs from the file")
	}
	frame, err := hex.DecodeString(g.FrameHex)
	if err != nil {
		t.Fatal(err)
	}
	fb, err := NewFrameReader(bytes.NewReader(frame), 0).Next()
	if err != nil {
		t.Fatal(err)
	}
	fsig, fenv, err := SplitSigned(fb)
	if err != nil || !bytes.Equal(fsig, sig) || string(fenv) != g.Canonical {
		t.Fatalf("frame does not hold signature ‖ canonical: %v", err)
	}

	switch typ {
	case TypeRequest:
		if _, err := DecodeRequest(e); err != nil {
			t.Error(err)
		}
	case TypeResponse:
		if _, err := DecodeResponse(e); err != nil {
			t.Error(err)
		}
	case TypeError:
		_, err := DecodeResponse(e)
		var pe *Error
		if !errors.As(err, &pe) || pe.Code != CodeCapabilityNotSupported || !strings.Contains(string(pe.Details), `"available":["translation","summarization"]`) {
			t.Errorf("error envelope decodes to %v", err)
		}
	case TypeHello:
		var h Hello
		if err := json.Unmarshal(e.Payload, &h); err != nil {
			t.Fatal(err)
		}
		if h.Version != HelloVersion || len(h.Capabilities) != 2 {
			t.Errorf("hello %+v", h)
		}
		for _, c := range h.Capabilities {
			if err := c.Validate(); err != nil {
				t.Error(err)
			}
			if _, err := CompileSchema(c.InputSchema); err != nil {
				t.Error(err)
			}
		}
	}
}
