package store

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"
)

func TestRegistrations(t *testing.T) {
	s, _ := open(t)
	caps := json.RawMessage(`[{"name":"summarize","description":"d"}]`)
	if err := s.Register(ctx, Registration{AgentID: "agent-b", Token: "tok-b", Capabilities: caps}); err != nil {
		t.Fatal(err)
	}
	if err := s.Register(ctx, Registration{AgentID: "agent-a", Token: "tok-a", RegisteredAt: t0.Add(-time.Hour)}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		token   string
		want    string
		wantErr error
	}{
		{"token b", "tok-b", "agent-b", nil},
		{"token a", "tok-a", "agent-a", nil},
		{"wrong token", "tok-c", "", ErrNotFound},
		{"prefix of a token", "tok-", "", ErrNotFound},
		{"empty token", "", "", ErrNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := s.RegistrationByToken(ctx, tt.token)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) {
				t.Fatalf("RegistrationByToken: %v, want %v", err, tt.wantErr)
			}
			if r.AgentID != tt.want || r.Token != "" {
				t.Errorf("got %+v, want agent %q and no token", r, tt.want)
			}
		})
	}
	r, err := s.Registration(ctx, "agent-b")
	if err != nil {
		t.Fatal(err)
	}
	if string(r.Capabilities) != string(caps) || !r.RegisteredAt.Equal(t0) {
		t.Errorf("registration %+v", r)
	}
	if _, err := s.Registration(ctx, "nobody"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Registration of an unknown agent: %v", err)
	}
	all, err := s.Registrations(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var agents []string
	for _, r := range all {
		agents = append(agents, r.AgentID)
	}
	if !slices.Equal(agents, []string{"agent-a", "agent-b"}) || !all[0].RegisteredAt.Equal(t0.Add(-time.Hour)) {
		t.Errorf("Registrations = %+v", all)
	}

	// Re-registering replaces the token.
	if err := s.Register(ctx, Registration{AgentID: "agent-b", Token: "tok-b2"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RegistrationByToken(ctx, "tok-b"); !errors.Is(err, ErrNotFound) {
		t.Errorf("old token still works after re-registering: %v", err)
	}
	if r, err := s.RegistrationByToken(ctx, "tok-b2"); err != nil || r.AgentID != "agent-b" {
		t.Errorf("new token: %+v, %v", r, err)
	}
	// A token held by another agent is refused.
	if err := s.Register(ctx, Registration{AgentID: "agent-c", Token: "tok-a"}); !errors.Is(err, ErrExists) {
		t.Errorf("Register with another agent's token: %v, want ErrExists", err)
	}
	// Unregister removes the agent and its token.
	if err := s.Unregister(ctx, "agent-a"); err != nil {
		t.Fatal(err)
	}
	if err := s.Unregister(ctx, "agent-a"); !errors.Is(err, ErrNotFound) {
		t.Errorf("second Unregister: %v", err)
	}
	if _, err := s.RegistrationByToken(ctx, "tok-a"); !errors.Is(err, ErrNotFound) {
		t.Errorf("token works after Unregister: %v", err)
	}
	if n := countKeys(t, s, bucketRegTokens); n != 1 {
		t.Errorf("%d token hashes stored, want 1", n)
	}
}

func TestRegisterValidation(t *testing.T) {
	s, _ := open(t, WithMaxRecordSize(16))
	tests := []struct {
		name string
		r    Registration
		want error
	}{
		{"no agent", Registration{Token: "t"}, ErrInvalid},
		{"no token", Registration{AgentID: "a"}, ErrInvalid},
		{"bad capabilities", Registration{AgentID: "a", Token: "t", Capabilities: json.RawMessage(`[`)}, ErrInvalid},
		{"huge capabilities", Registration{AgentID: "a", Token: "t", Capabilities: json.RawMessage(`"0123456789abcdef"`)}, ErrTooLarge},
		{"NUL in agent", Registration{AgentID: "a\x00", Token: "t"}, ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := s.Register(ctx, tt.r); !errors.Is(err, tt.want) {
				t.Errorf("Register: %v, want %v", err, tt.want)
			}
		})
	}
}

// TestTokenNotStored checks that the token's bytes are nowhere in the file,
// only its SHA-256.
func TestTokenNotStored(t *testing.T) {
	s, _ := open(t)
	token := "7f1c2a9e-5b3d-4e8f-a6c1-0d9b8e7f6a5c"
	if err := s.Register(ctx, Registration{AgentID: "agent-a", Token: token}); err != nil {
		t.Fatal(err)
	}
	path := s.Path()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	data := readFile(t, path)
	if bytes.Contains(data, []byte(token)) {
		t.Error("the token is stored in clear")
	}
	h := sha256.Sum256([]byte(token))
	if !bytes.Contains(data, h[:]) {
		t.Error("the token's SHA-256 is not stored (the test would pass vacuously)")
	}
}
