package wsconn

import (
	"net/http/httptest"
	"testing"
)

func TestSameLoopbackOrigin(t *testing.T) {
	tests := []struct {
		origin, host string
		ok           bool
	}{
		{"http://127.0.0.1:7892", "127.0.0.1:7892", true},
		{"http://127.0.0.2:7892", "127.0.0.2:7892", true}, // all of 127/8 is loopback
		{"http://[::1]:7892", "[::1]:7892", true},
		{"http://LOCALHOST:7892", "localhost:7892", true},
		{"http://127.0.0.1", "127.0.0.1", true}, // port 80, implied on both sides
		{"", "127.0.0.1:7892", false},           // not a browser: OriginAllowed's case
		{"http://127.0.0.1:7893", "127.0.0.1:7892", false},
		{"http://localhost:7892", "127.0.0.1:7892", false},
		{"https://127.0.0.1:7892", "127.0.0.1:7892", false},
		{"http://evil.example:7892", "evil.example:7892", false},
		{"http://10.0.0.5:7892", "10.0.0.5:7892", false},
		{"http://0.0.0.0:7892", "0.0.0.0:7892", false},
		{"http://u@127.0.0.1:7892", "127.0.0.1:7892", false},
		{"http://127.0.0.1:7892/x", "127.0.0.1:7892", false},
		{"null", "127.0.0.1:7892", false},
	}
	for _, tc := range tests {
		r := httptest.NewRequest("GET", "/", nil)
		r.Host = tc.host
		if tc.origin != "" {
			r.Header.Set("Origin", tc.origin)
		}
		if got := SameLoopbackOrigin(r); got != tc.ok {
			t.Errorf("Origin %q, Host %q: %v, want %v", tc.origin, tc.host, got, tc.ok)
		}
	}
}

func TestLocalHost(t *testing.T) {
	for host, ok := range map[string]bool{
		"127.0.0.1:7892":           true,
		"127.0.0.1":                true,
		"10.0.0.5:7892":            true, // an IP literal: no name to rebind
		"[::1]:7892":               true,
		"[::1]":                    true,
		"[fe80::1%eth0]:7892":      true,
		"localhost:7892":           true,
		"LocalHost.":               true,
		"":                         false,
		"evil.example:7892":        false,
		"evil.example":             false,
		"localhost.evil.example":   false,
		"127.0.0.1.nip.io:7892":    false,
		"evil.localhost.example:1": false,
		"[evil.example]:7892":      false,
		"127.0.0.1:7892:1":         false,
	} {
		r := httptest.NewRequest("GET", "/metrics", nil)
		r.Host = host
		if got := LocalHost(r); got != ok {
			t.Errorf("LocalHost(Host %q) = %v, want %v", host, got, ok)
		}
	}
}
