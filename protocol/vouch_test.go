package protocol

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestOnBehalfOf(t *testing.T) {
	for _, tc := range []struct {
		metadata string
		want     string
		err      string
	}{
		{"", "", ""},
		{"null", "", ""},
		{`{}`, "", ""},
		{`{"filter":{"includeAgents":["x"]}}`, "", ""},
		{`{"onBehalfOf":"lobby:alice"}`, "lobby:alice", ""},
		{`{"onBehalfOf":"bus:team/ci","trace":"t1"}`, "bus:team/ci", ""},
		{`{"onBehalfOf":"lobby:caf\u00e9"}`, "lobby:café", ""},
		{`{"onBehalfOf":5}`, "", "must be a string"},
		{`{"onBehalfOf":null}`, "", "must be a string"},
		{`{"onBehalfOf":["a"]}`, "", "must be a string"},
		{`{"onBehalfOf":{"a":1}}`, "", "must be a string"},
		{`{"onBehalfOf":false}`, "", "must be a string"},
		{`{"onBehalfOf":""}`, "", "1 to 512 bytes"},
		{`{"onBehalfOf":"` + strings.Repeat("a", MaxOnBehalfOfLen+1) + `"}`, "", "1 to 512 bytes"},
		{`{"onBehalfOf":"a b"}`, "", "whitespace"},
		{`{"onBehalfOf":"a\u0007"}`, "", "control"},
		{`{"onBehalfOf":"lobby:*"}`, "", "'*'"},
		{`[]`, "", "metadata must be a JSON object"},
		{`"x"`, "", "metadata must be a JSON object"},
	} {
		got, err := OnBehalfOf(&Envelope{Metadata: json.RawMessage(tc.metadata)})
		switch {
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("%s: got %q, %v; want %q", tc.metadata, got, err, tc.want)
		case tc.err != "" && (err == nil || CodeOf(err) != CodeInvalidMessage || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: got %q, %v; want INVALID_MESSAGE containing %q", tc.metadata, got, err, tc.err)
		}
	}
}

func TestOnBehalfOfMetadata(t *testing.T) {
	if md, err := OnBehalfOfMetadata(""); md != nil || err != nil {
		t.Errorf("no client: %s, %v", md, err)
	}
	md, err := OnBehalfOfMetadata("lobby:<alice>")
	if err != nil || string(md) != `{"onBehalfOf":"lobby:<alice>"}` {
		t.Fatalf("got %s, %v", md, err)
	}
	if got, err := OnBehalfOf(&Envelope{Metadata: md}); err != nil || got != "lobby:<alice>" {
		t.Errorf("round trip: %q, %v", got, err)
	}
	if _, err := OnBehalfOfMetadata("a b"); CodeOf(err) != CodeInvalidMessage {
		t.Errorf("a bad name: %v", err)
	}
}

// FuzzOnBehalfOf: any metadata is either refused with INVALID_MESSAGE or
// yields a client name that CheckOnBehalfOf accepts and that survives a
// round trip through OnBehalfOfMetadata.
func FuzzOnBehalfOf(f *testing.F) {
	for _, s := range []string{`{"onBehalfOf":"lobby:alice"}`, `{"onBehalfOf":5}`, `{}`, `null`, `{"onBehalfOf":"a\u0000"}`, `{"onBehalfOf":"x","onBehalfOf":"y"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, md []byte) {
		got, err := OnBehalfOf(&Envelope{Metadata: md})
		if err != nil {
			if CodeOf(err) != CodeInvalidMessage {
				t.Fatalf("error %v is not INVALID_MESSAGE", err)
			}
			return
		}
		if got == "" {
			return
		}
		if err := CheckOnBehalfOf(got); err != nil {
			t.Fatalf("accepted %q, which CheckOnBehalfOf refuses: %v", got, err)
		}
		again, err := OnBehalfOfMetadata(got)
		if err != nil {
			t.Fatal(err)
		}
		if back, err := OnBehalfOf(&Envelope{Metadata: again}); err != nil || back != got {
			t.Fatalf("round trip of %q: %q, %v", got, back, err)
		}
	})
}
