package sign_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"path/filepath"
	"testing"

	"github.com/gowebpki/jcs"

	"github.com/meshagent/meshagent/sign"
)

// fuzzSeeds returns documents to start fuzzing from: the golden vectors in
// all their forms, the RFC 8785 files and the canonical-form test tables.
func fuzzSeeds(f *testing.F) [][]byte {
	var seeds [][]byte
	for _, v := range readVectors(f) {
		seeds = append(seeds, []byte(v.Signed))
		if v.WantError == "" {
			seeds = append(seeds, v.Unsigned, []byte(v.Canonical))
		}
	}
	for _, dir := range []string{"input", "output"} {
		paths, _ := filepath.Glob(filepath.Join("testdata/rfc8785", dir, "*.json"))
		for _, p := range paths {
			seeds = append(seeds, readFile(f, p))
		}
	}
	for _, c := range canonicalCases {
		if len(c.doc) < 4096 {
			seeds = append(seeds, []byte(c.doc))
		}
	}
	for _, c := range nonCanonicalCases {
		if len(c.doc) < 4096 {
			seeds = append(seeds, []byte(c.doc))
		}
	}
	return seeds
}

// FuzzCheckCanonical checks the one-pass checker against the reference
// implementation: whatever CheckCanonical accepts, jcs leaves unchanged, and
// whatever Canonicalize returns is accepted.
func FuzzCheckCanonical(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		err := sign.CheckCanonical(b)
		if err != nil && !errors.Is(err, sign.ErrNotCanonical) {
			t.Fatalf("CheckCanonical: %v, not ErrNotCanonical", err)
		}
		ref, refErr := jcs.Transform(b)
		if err == nil {
			if refErr != nil || !bytes.Equal(ref, b) {
				t.Fatalf("CheckCanonical accepts %q, but jcs.Transform gives %q, %v", b, ref, refErr)
			}
			if c, cerr := sign.Canonicalize(b); cerr != nil || !bytes.Equal(c, b) {
				t.Fatalf("CheckCanonical accepts %q, but Canonicalize gives %q, %v", b, c, cerr)
			}
			return
		}

		c, cerr := sign.Canonicalize(b)
		if cerr != nil {
			if !errors.Is(cerr, sign.ErrInvalidJSON) && !errors.Is(cerr, sign.ErrNotCanonical) {
				t.Fatalf("Canonicalize: %v, not ErrInvalidJSON or ErrNotCanonical", cerr)
			}
			// Refused, though jcs accepts it: only meshagent's stricter
			// rules (case-folded keys, depth) may be the reason.
			if refErr == nil && sign.CheckCanonical(ref) == nil {
				t.Fatalf("Canonicalize(%q) fails (%v), but jcs gives canonical %q", b, cerr, ref)
			}
			return
		}
		if refErr != nil || !bytes.Equal(c, ref) {
			t.Fatalf("Canonicalize(%q) = %q, jcs.Transform = %q, %v", b, c, ref, refErr)
		}
		if err := sign.CheckCanonical(c); err != nil {
			t.Fatalf("Canonicalize(%q) = %q, which CheckCanonical refuses: %v", b, c, err)
		}
	})
}

// FuzzDetach checks that Detach never panics and that what it returns
// round-trips through Attach.
func FuzzDetach(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	id := testSigner(f, 1).ID()
	f.Fuzz(func(t *testing.T, doc []byte) {
		body, sig, err := sign.Detach(doc)
		if err != nil {
			if !errors.Is(err, sign.ErrInvalidJSON) && !errors.Is(err, sign.ErrNotCanonical) && !errors.Is(err, sign.ErrInvalidSignature) {
				t.Fatalf("Detach: unexpected error %v", err)
			}
			return
		}
		_ = sign.Verify(id, body, sig) // must not panic
		if err := sign.CheckCanonical(body); err != nil {
			t.Fatalf("Detach body %q is not canonical: %v", body, err)
		}
		if len(sig) != sign.SignatureSize {
			t.Fatalf("Detach signature is %d bytes", len(sig))
		}
		attached, err := sign.Attach(body, sig)
		if err != nil {
			t.Fatalf("Attach(Detach(%q)): %v", doc, err)
		}
		if err := sign.CheckCanonical(attached); err != nil {
			t.Fatalf("Attach output %q is not canonical: %v", attached, err)
		}
		b2, s2, err := sign.Detach(attached)
		if err != nil || !bytes.Equal(b2, body) || !bytes.Equal(s2, sig) {
			t.Fatalf("Detach(Attach(body, sig)) = %q, %x, %v; want %q, %x", b2, s2, err, body, sig)
		}
		// With the signature in its standard spelling, Attach rebuilds
		// exactly the canonical form of the input.
		canon, err := sign.Canonicalize(doc)
		if err != nil {
			t.Fatalf("Detach accepted %q, Canonicalize refuses it: %v", doc, err)
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(canon, &obj); err != nil {
			t.Fatal(err)
		}
		var s string
		if json.Unmarshal(obj[sign.SignatureField], &s) == nil && s == sign.EncodeSignature(sig) && !bytes.Equal(attached, canon) {
			t.Fatalf("Attach(Detach(doc)) = %q, Canonicalize(doc) = %q", attached, canon)
		}
	})
}

// FuzzSignJSON checks that SignJSON never panics and that whatever it signs
// verifies.
func FuzzSignJSON(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	s := testSigner(f, 1)
	f.Fuzz(func(t *testing.T, doc []byte) {
		signed, err := s.SignJSON(doc)
		if err != nil {
			if !errors.Is(err, sign.ErrInvalidJSON) && !errors.Is(err, sign.ErrNotCanonical) {
				t.Fatalf("SignJSON: unexpected error %v", err)
			}
			return
		}
		body, sig, err := sign.Detach(signed)
		if err != nil {
			t.Fatalf("Detach(SignJSON(%q)): %v", doc, err)
		}
		if err := sign.Verify(s.ID(), body, sig); err != nil {
			t.Fatalf("Verify(SignJSON(%q)): %v", doc, err)
		}
		if again, err := s.SignJSON(signed); err != nil || !bytes.Equal(again, signed) {
			t.Fatalf("SignJSON is not idempotent on %q: %q, %v", signed, again, err)
		}
	})
}

// FuzzParseAgentID checks that ParseAgentID never panics and that what it
// accepts round-trips through both forms.
func FuzzParseAgentID(f *testing.F) {
	s := testSigner(f, 1)
	for _, seed := range []string{s.ID().String(), s.PublicKeyBase64(), "", "Qm", "12D3KooW", "bafzaa", "AAAA", "=", "\xff"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, in string) {
		id, err := sign.ParseAgentID(in)
		if err != nil {
			if !errors.Is(err, sign.ErrInvalidAgentID) {
				t.Fatalf("ParseAgentID(%q): %v, not ErrInvalidAgentID", in, err)
			}
			return
		}
		b64, err := sign.PublicKeyBase64(id)
		if err != nil {
			t.Fatalf("ParseAgentID(%q) = %s, whose public key fails: %v", in, id, err)
		}
		for _, form := range []string{id.String(), b64} {
			if back, err := sign.ParseAgentID(form); err != nil || back != id {
				t.Fatalf("ParseAgentID(%q) = %s, %v; want %s", form, back, err, id)
			}
		}
	})
}
