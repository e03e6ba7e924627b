package sign_test

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"github.com/meshagent/meshagent/sign"
)

func TestJWSRoundTripAndRefusals(t *testing.T) {
	s := testSigner(t, 1)
	other := testSigner(t, 2)
	payload := []byte(`{"name":"a"}`)
	prot, sig := s.SignJWS(payload)
	header, _ := base64.RawURLEncoding.DecodeString(prot)
	if want := `{"alg":"EdDSA","kid":"` + s.IDString() + `","typ":"JOSE"}`; string(header) != want {
		t.Fatalf("protected header %s, want %s", header, want)
	}
	id, err := sign.VerifyJWS(prot, sig, payload)
	if err != nil || id != s.ID() {
		t.Fatalf("VerifyJWS = %v, %v; want %s", id, err, s.ID())
	}
	enc := func(h string) string { return base64.RawURLEncoding.EncodeToString([]byte(h)) }
	otherProt, otherSig := other.SignJWS(payload)
	for _, tc := range []struct {
		name           string
		prot, sig, pay string
		want           error
	}{
		{"payload changed", prot, sig, `{"name":"b"}`, sign.ErrInvalidSignature},
		{"kid swapped", otherProt, sig, string(payload), sign.ErrInvalidSignature},
		{"signature of another key", prot, otherSig, string(payload), sign.ErrInvalidSignature},
		{"alg none", enc(`{"alg":"none","kid":"` + s.IDString() + `"}`), sig, string(payload), sign.ErrInvalidSignature},
		{"unknown header member", enc(`{"alg":"EdDSA","kid":"` + s.IDString() + `","jku":"http://x"}`), sig, string(payload), sign.ErrInvalidSignature},
		{"bad kid", enc(`{"alg":"EdDSA","kid":"nope"}`), sig, string(payload), sign.ErrInvalidAgentID},
		{"not base64url", "!!", sig, string(payload), sign.ErrInvalidSignature},
		{"short signature", prot, "AAAA", string(payload), sign.ErrInvalidSignature},
		{"huge header", strings.Repeat("e", 2000), sig, string(payload), sign.ErrInvalidSignature},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := sign.VerifyJWS(tc.prot, tc.sig, []byte(tc.pay)); !errors.Is(err, tc.want) {
				t.Fatalf("VerifyJWS = %v, want %v", err, tc.want)
			}
		})
	}
}
