package a2a_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/meshagent/meshagent/a2a"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/sign"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// testSigner is the deterministic identity of seed 0x01…01.
func testSigner(t testing.TB, b byte) *sign.Signer {
	t.Helper()
	k, err := sign.KeyFromSeed(bytes.Repeat([]byte{b}, 32))
	if err != nil {
		t.Fatal(err)
	}
	s, err := sign.NewSigner(k)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

var testCaps = []protocol.Capability{
	{Name: "upper", Description: "upper-cases text", Keywords: []string{"text", "case", "text"}},
	{Name: "bar:echo"},
}

// TestOwnCardGolden pins the signed card a node answers a2a.card with: its
// members (v1.0, camelCase, nothing empty) and its signature bytes, which
// Ed25519's determinism makes stable.
func TestOwnCardGolden(t *testing.T) {
	s := testSigner(t, 1)
	raw, err := a2a.OwnCard(s, s.IDString(), "alice", testCaps, json.RawMessage(`{"url":"http://127.0.0.1:8080/agents/`+s.IDString()+`/"}`))
	if err != nil {
		t.Fatal(err)
	}
	var pretty bytes.Buffer
	if err := json.Indent(&pretty, raw, "", "  "); err != nil {
		t.Fatal(err)
	}
	pretty.WriteByte('\n')
	golden := filepath.Join("testdata", "card.golden.json")
	if *update {
		if err := os.WriteFile(golden, pretty.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(pretty.Bytes(), want) {
		t.Fatalf("card differs from %s (go test -update to accept):\n%s", golden, pretty.Bytes())
	}
	var card a2a.AgentCard
	if err := protocol.DecodeStrict(raw, &card); err != nil {
		t.Fatalf("the card does not decode strictly: %v", err)
	}
	if err := a2a.VerifyCard(card, s.ID()); err != nil {
		t.Fatalf("VerifyCard: %v", err)
	}
}

func TestVerifyCardRefuses(t *testing.T) {
	alice, bob := testSigner(t, 1), testSigner(t, 2)
	card, err := a2a.Card(alice.IDString(), "alice", testCaps, "http://127.0.0.1:1/agents/x/")
	if err != nil {
		t.Fatal(err)
	}
	signed, err := a2a.SignCard(card, alice)
	if err != nil {
		t.Fatal(err)
	}
	byBob, _ := a2a.SignCard(card, bob)
	for _, tc := range []struct {
		name   string
		mutate func(c a2a.AgentCard) a2a.AgentCard
	}{
		{"unsigned", func(c a2a.AgentCard) a2a.AgentCard { c.Signatures = nil; return c }},
		{"skill added", func(c a2a.AgentCard) a2a.AgentCard {
			c.Skills = append(c.Skills[:len(c.Skills):len(c.Skills)], a2a.AgentSkill{ID: "x", Name: "x", Description: "x", Tags: []string{"x"}})
			return c
		}},
		{"url changed", func(c a2a.AgentCard) a2a.AgentCard {
			c.SupportedInterfaces = []a2a.AgentInterface{{URL: "http://evil/", ProtocolBinding: "JSONRPC", ProtocolVersion: "1.0"}}
			return c
		}},
		{"signed by another agent", func(a2a.AgentCard) a2a.AgentCard { return byBob }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := a2a.VerifyCard(tc.mutate(signed), alice.ID()); !errors.Is(err, a2a.ErrUnsignedCard) {
				t.Fatalf("VerifyCard = %v, want ErrUnsignedCard", err)
			}
		})
	}
}

func TestCardShape(t *testing.T) {
	card, err := a2a.Card("12D3KooWx", "", nil, "https://gw.example/agents/12D3KooWx/")
	if err != nil {
		t.Fatal(err)
	}
	if card.Name == "" || card.Description == "" || card.Version == "" || card.Capabilities == nil || !*card.Capabilities.Streaming {
		t.Fatalf("card has empty members: %+v", card)
	}
	for _, tc := range []struct {
		url string
		ok  bool
	}{
		{"http://127.0.0.1:8080/agents/x/", true},
		{"https://gw.example/", true},
		{"", false},
		{"ftp://x/", false},
		{"/relative", false},
		{"http://user:pw@host/", false},
		{"http://" + string(bytes.Repeat([]byte("a"), a2a.MaxURLLen)) + "/", false},
	} {
		if err := a2a.CheckInterfaceURL(tc.url); (err == nil) != tc.ok {
			t.Errorf("CheckInterfaceURL(%.40q) = %v, want ok=%v", tc.url, err, tc.ok)
		}
	}
	for _, params := range []string{`{}`, `{"url":1}`, `{"url":"http://x/","extra":1}`, `[]`, `{"url":"javascript:alert(1)"}`} {
		if _, err := a2a.OwnCard(testSigner(t, 1), "id", "", nil, json.RawMessage(params)); err == nil {
			t.Errorf("OwnCard(%s) accepted", params)
		}
	}
}
