package sign_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshagent/meshagent/sign"
)

// runNode runs testdata/interop.js in mode with input (marshalled to JSON)
// on stdin, decodes its stdout into out and returns its exit status.
func runNode(t *testing.T, node, mode string, input, out any) int {
	t.Helper()
	in, err := json.Marshal(input)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Join("testdata", "interop.js"), mode)
	cmd.Stdin = bytes.NewReader(in)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	code := 0
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("node %s: %v", mode, err)
		}
		code = ee.ExitCode()
	}
	if code > 1 {
		t.Fatalf("node %s: exit %d: %s", mode, code, stderr.String())
	}
	if err := json.Unmarshal(stdout.Bytes(), out); err != nil {
		t.Fatalf("node %s: output %q: %v (stderr %s)", mode, truncated(stdout.String()), err, stderr.String())
	}
	return code
}

// TestNodeInterop checks meshagent's signatures against an independent
// implementation: Node.js's Ed25519 over JSON.stringify with sorted keys,
// the way seed 002 describes signing (testdata/interop.js).
func TestNodeInterop(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("Node.js (node) is not on PATH; the cross-implementation check needs it")
	}
	var vs []*vector
	for _, v := range readVectors(t) {
		if v.WantError == "" {
			vs = append(vs, v)
		}
	}
	randomDocs := randomDocuments(40)

	t.Run("canonical bytes", func(t *testing.T) {
		type item struct {
			name, want string
		}
		var docs []json.RawMessage
		var items []item
		add := func(name string, doc []byte, want string) {
			docs = append(docs, doc)
			items = append(items, item{name, want})
		}
		for _, v := range vs {
			add(v.Name, v.Unsigned, v.Canonical)
		}
		inputs, _ := filepath.Glob("testdata/rfc8785/input/*.json")
		for _, in := range inputs {
			// JavaScript has no case rule: compare with the RFC's output
			// even where meshagent is stricter.
			add("rfc8785/"+filepath.Base(in), readFile(t, in), string(readFile(t, filepath.Join("testdata/rfc8785/output", filepath.Base(in)))))
		}
		for _, c := range canonicalCases {
			add("canonical/"+c.name, []byte(c.doc), c.doc)
		}
		for _, c := range nonCanonicalCases {
			if c.canon != "" {
				add("non-canonical/"+c.name, []byte(c.doc), c.canon)
			}
		}
		for i, d := range randomDocs {
			c, err := sign.Canonicalize(d)
			if err != nil {
				t.Fatalf("random document %d: %v", i, err)
			}
			add(fmt.Sprint("random/", i), d, string(c))
		}

		var got []string
		runNode(t, node, "canon", docs, &got)
		if len(got) != len(items) {
			t.Fatalf("node returned %d results for %d documents", len(got), len(items))
		}
		for i, it := range items {
			if got[i] != it.want {
				t.Errorf("%s: JavaScript and Go canonical forms differ\n  js %s\n  go %s", it.name, truncated(got[i]), truncated(it.want))
			}
		}
	})

	t.Run("JavaScript signs, Go verifies", func(t *testing.T) {
		type job struct {
			SeedHex string          `json:"seed_hex"`
			Doc     json.RawMessage `json:"doc"`
		}
		var jobs []job
		for _, v := range vs {
			jobs = append(jobs, job{v.SeedHex, v.Unsigned})
		}
		for _, d := range randomDocs {
			jobs = append(jobs, job{fmt.Sprintf("%x", seed(3)), d})
		}
		var signed []string
		runNode(t, node, "sign", jobs, &signed)
		if len(signed) != len(jobs) {
			t.Fatalf("node returned %d results for %d jobs", len(signed), len(jobs))
		}
		for i, s := range signed {
			var id = testSigner(t, 3).ID()
			name := fmt.Sprint("random/", i-len(vs))
			if i < len(vs) {
				v := vs[i]
				name = v.Name
				// Ed25519 is deterministic: the JavaScript output is the
				// golden vector, byte for byte.
				if s != v.Signed {
					t.Errorf("%s: JavaScript signed form differs from the vector\n  js %s\n  go %s", name, truncated(s), truncated(v.Signed))
				}
				id, _ = sign.ParseAgentID(v.AgentID)
			}
			body, sig, err := sign.Detach([]byte(s))
			if err != nil {
				t.Errorf("%s: Detach(JavaScript output): %v", name, err)
				continue
			}
			if err := sign.Verify(id, body, sig); err != nil {
				t.Errorf("%s: Verify(JavaScript signature): %v", name, err)
			}
		}
	})

	t.Run("Go signs, JavaScript verifies", func(t *testing.T) {
		type job struct {
			PublicKeyBase64 string `json:"public_key_base64"`
			Signed          string `json:"signed"`
		}
		var good, bad []job
		s1, s2 := testSigner(t, 1), testSigner(t, 2)
		docs := randomDocs
		for _, v := range vs {
			docs = append(docs, v.Unsigned)
		}
		for _, d := range docs {
			signed, err := s1.SignJSON(d)
			if err != nil {
				t.Fatal(err)
			}
			good = append(good, job{s1.PublicKeyBase64(), string(signed)})
			// The same document checked against the wrong key, and
			// signed by the wrong key: both must fail.
			bad = append(bad, job{s2.PublicKeyBase64(), string(signed)})
			other, err := s2.SignJSON(d)
			if err != nil {
				t.Fatal(err)
			}
			bad = append(bad, job{s1.PublicKeyBase64(), string(other)})
		}
		// A tampered payload.
		tampered := strings.Replace(good[len(good)-1].Signed, `"status":"success"`, `"status":"error"`, 1)
		if tampered == good[len(good)-1].Signed {
			t.Fatal("tamper target not found")
		}
		bad = append(bad, job{s1.PublicKeyBase64(), tampered})

		var ok []bool
		if code := runNode(t, node, "verify", good, &ok); code != 0 {
			t.Errorf("node verify of Go signatures: exit %d, want 0", code)
		}
		for i, r := range ok {
			if !r {
				t.Errorf("JavaScript rejects Go's signature on %s", truncated(good[i].Signed))
			}
		}
		if len(ok) != len(good) {
			t.Errorf("node returned %d results for %d documents", len(ok), len(good))
		}

		ok = nil
		if code := runNode(t, node, "verify", bad, &ok); code != 1 {
			t.Errorf("node verify of bad signatures: exit %d, want 1", code)
		}
		for i, r := range ok {
			if r {
				t.Errorf("JavaScript accepts a bad signature: %s", truncated(bad[i].Signed))
			}
		}
		if len(ok) != len(bad) {
			t.Errorf("node returned %d results for %d documents", len(ok), len(bad))
		}
	})
}

// randomDocuments returns n envelope-like JSON objects full of what makes
// canonicalisation hard: keys across the UTF-16 orderings, escapes, control
// characters, and arbitrary doubles. They are marshalled by encoding/json
// (random map order, HTML escaping), so they are not canonical.
func randomDocuments(n int) []json.RawMessage {
	rng := rand.New(rand.NewPCG(8785, 2))
	ranges := [][2]rune{
		{0x00, 0x1f}, {0x20, 0x7e}, {0x7f, 0xff}, {0x100, 0x17f}, {0x400, 0x4ff}, {0x5d0, 0x5ea},
		{0x2028, 0x2029}, {0x3040, 0x30ff}, {0x4e00, 0x4e80}, {0xd7f0, 0xd7ff}, {0xe000, 0xe010},
		{0xfb1d, 0xfb4f}, {0xfff0, 0xfffd}, {0x10000, 0x10010}, {0x1f600, 0x1f64f}, {0x10fff0, 0x10ffff},
	}
	str := func() string {
		var b strings.Builder
		for range rng.IntN(6) {
			r := ranges[rng.IntN(len(ranges))]
			b.WriteRune(r[0] + rng.Int32N(r[1]-r[0]+1))
		}
		return b.String()
	}
	num := func() any {
		switch rng.IntN(4) {
		case 0:
			return rng.Int64N(1<<53) - 1<<52
		case 1:
			return rng.Float64() * math.Pow(10, float64(rng.IntN(40)-20))
		default:
			for {
				f := math.Float64frombits(rng.Uint64())
				if !math.IsNaN(f) && !math.IsInf(f, 0) {
					return f
				}
			}
		}
	}
	var value func(depth int) any
	value = func(depth int) any {
		k := rng.IntN(7)
		if depth > 3 {
			k = rng.IntN(4)
		}
		switch k {
		case 0:
			return str()
		case 1:
			return num()
		case 2:
			return []any{nil, true, false}[rng.IntN(3)]
		case 3:
			return str() + str()
		case 4:
			var a []any
			for range rng.IntN(4) {
				a = append(a, value(depth+1))
			}
			return a
		default:
			m := map[string]any{}
			for i := range rng.IntN(6) {
				// The suffix keeps keys distinct under case folding.
				m[fmt.Sprintf("%s#%d", str(), i)] = value(depth + 1)
			}
			return m
		}
	}
	docs := make([]json.RawMessage, n)
	for i := range docs {
		env := map[string]any{
			"protocol":  "agentprotocol/0.1",
			"id":        fmt.Sprintf("random-%d", i),
			"timestamp": "2026-02-01T15:08:00Z",
			"type":      "response",
			"payload":   map[string]any{"status": "success", "result": value(0), "extra": value(0)},
		}
		b, err := json.Marshal(env)
		if err != nil {
			panic(err)
		}
		docs[i] = b
	}
	return docs
}
