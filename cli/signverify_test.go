package cli

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/sign"
)

// newKey creates an identity with `meshagent id` and returns its path and
// agent id.
func newKey(t *testing.T) (string, string) {
	t.Helper()
	key := filepath.Join(t.TempDir(), "id.key")
	res := runCLI(t, "", "id", "--key", key, "--json")
	res.wantCode(t, ExitOK)
	var out idOutput
	if err := json.Unmarshal([]byte(res.stdout), &out); err != nil {
		t.Fatal(err)
	}
	return key, out.AgentID
}

func TestSignVerifyRoundTrip(t *testing.T) {
	key, id := newKey(t)
	unsigned := `{"type":"notify","to":{"broadcast":true,"topic":"news"},"payload":{"text":"hi"}}`
	res := runCLI(t, unsigned, "sign", "--key", key)
	res.wantCode(t, ExitOK)
	signed := strings.TrimSpace(res.stdout)

	env, _, err := protocol.OpenJSON([]byte(signed))
	if err != nil {
		t.Fatalf("the signed output does not open: %v\n%s", err, signed)
	}
	if env.From.AgentID != id || env.Protocol != protocol.Version || env.ID == "" || env.Timestamp == "" {
		t.Errorf("sign did not fill from/protocol/id/timestamp: %+v", env)
	}

	res = runCLI(t, signed, "verify")
	res.wantCode(t, ExitOK)
	if want := "valid: signed by " + id + "\n"; res.stdout != want {
		t.Errorf("verify printed %q, want %q", res.stdout, want)
	}

	// Signing keeps the fields that are present.
	fixed := `{"protocol":"agentprotocol/0.1","id":"fixed-1","timestamp":"2026-01-02T03:04:05.000Z",` +
		`"type":"request","from":{"agentId":"` + id + `","name":"me"},"to":{"agentId":"` + id + `"},` +
		`"payload":{"action":"echo","correlationId":"c1"}}`
	res = runCLI(t, fixed, "sign", "--key", key)
	res.wantCode(t, ExitOK)
	env, _, err = protocol.OpenJSON([]byte(res.stdout))
	if err != nil {
		t.Fatal(err)
	}
	if env.ID != "fixed-1" || env.Timestamp != "2026-01-02T03:04:05.000Z" || env.From.Name != "me" {
		t.Errorf("sign changed given fields: %+v", env)
	}
}

func TestVerifyRejects(t *testing.T) {
	key, id := newKey(t)
	res := runCLI(t, `{"type":"notify","to":{"broadcast":true},"payload":{"n":1}}`, "sign", "--key", key)
	res.wantCode(t, ExitOK)
	signed := strings.TrimSpace(res.stdout)
	_, otherID := newKey(t)

	// A signature from another key over the same body.
	otherKey, _ := newKey(t)
	k, err := sign.LoadKey(otherKey)
	if err != nil {
		t.Fatal(err)
	}
	signer, _ := sign.NewSigner(k)
	body, _, err := sign.Detach([]byte(signed))
	if err != nil {
		t.Fatal(err)
	}
	forged, err := sign.Attach(body, signer.Sign(body))
	if err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name  string
		input string
		code  int
		msg   string
	}{
		{"tampered payload", strings.Replace(signed, `"n":1`, `"n":2`, 1), 4, "INVALID_SIGNATURE"},
		{"claims another agent", strings.Replace(signed, id, otherID, 1), 4, "INVALID_SIGNATURE"},
		{"signed by another key", string(forged), 4, "INVALID_SIGNATURE"},
		{"no signature", `{"type":"notify","payload":{}}`, 4, "INVALID_SIGNATURE"},
		{"not JSON", `{"type":`, 3, "INVALID_MESSAGE"},
		{"duplicate keys", `{"type":"notify","type":"hello"}`, 3, "INVALID_MESSAGE"},
		{"empty input", "", 3, "no envelope on stdin"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := runCLI(t, tc.input, "verify")
			res.wantCode(t, tc.code)
			res.wantStderr(t, tc.msg)
			if res.stdout != "" {
				t.Errorf("stdout = %q, want nothing", res.stdout)
			}
		})
	}
}

func TestSignRejects(t *testing.T) {
	key, _ := newKey(t)
	_, otherID := newKey(t)
	otherPub, err := sign.ParseAgentID(otherID)
	if err != nil {
		t.Fatal(err)
	}
	otherB64, _ := sign.PublicKeyBase64(otherPub)
	for _, tc := range []struct {
		name  string
		input string
		code  int
		msg   string
	}{
		{"from another agent", `{"type":"notify","payload":{},"from":{"agentId":"` + otherID + `"}}`, 3, "is agent"},
		{"from another agent, base64 form", `{"type":"notify","payload":{},"from":{"agentId":"` + otherB64 + `"}}`, 3, "remove from.agentId"},
		{"unknown member", `{"type":"notify","payload":{},"extra":1}`, 3, "extra"},
		{"no payload", `{"type":"notify"}`, 3, "payload must be a JSON object"},
		{"unknown type", `{"type":"shout","payload":{}}`, 3, "unknown message type"},
		{"request without to", `{"type":"request","payload":{}}`, 3, "to.agentId is required"},
		{"not JSON", `nope`, 3, "not a valid JSON envelope"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := runCLI(t, tc.input, "sign", "--key", key)
			res.wantCode(t, tc.code)
			res.wantStderr(t, tc.msg)
		})
	}

	t.Run("missing key", func(t *testing.T) {
		res := runCLI(t, `{"type":"notify","payload":{}}`, "sign", "--key", filepath.Join(t.TempDir(), "none.key"))
		res.wantCode(t, ExitFailure)
		res.wantStderr(t, "none.key does not exist", "meshagent id --key")
	})
}
