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
