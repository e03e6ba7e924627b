package rpc_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/coder/websocket"

	"github.com/meshagent/meshagent/rpc"
)

// TestLoopbackPages checks which browser pages WithLoopbackPages admits:
// only those served by the listener itself on its loopback address.
func TestLoopbackPages(t *testing.T) {
	ts := newTestServer(t, rpc.WithLoopbackPages())
	self := strings.TrimSuffix(strings.TrimPrefix(ts.url, "ws://"), "/") // 127.0.0.1:PORT
	_, port, _ := strings.Cut(self, ":")
	tests := []struct {
		name   string
		origin string
		host   string // the Host header; "" for self
		ok     bool
	}{
		{"a page of this listener", "http://" + self, "", true},
		{"localhost, as the page was opened", "http://localhost:" + port, "localhost:" + port, true},
		{"no origin header (not a browser)", "", "", true},
		{"another loopback port", "http://127.0.0.1:1", "", false},
		{"another site", "http://evil.example", "", false},
		{"https origin", "https://" + self, "", false},
		{"DNS rebinding: origin and Host name the attacker", "http://evil.example:" + port, "evil.example:" + port, false},
		{"a LAN address, same origin", "http://192.168.1.5:" + port, "192.168.1.5:" + port, false},
		{"null origin", "null", "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			if tc.origin != "" {
				h.Set("Origin", tc.origin)
			}
			ws, resp, err := websocket.Dial(ctxT(t), ts.url, &websocket.DialOptions{HTTPHeader: h, Host: tc.host})
			if ws != nil {
				defer ws.CloseNow()
			}
			switch {
			case tc.ok && err != nil:
				t.Fatalf("refused: %v", err)
			case !tc.ok && err == nil:
				t.Fatal("accepted")
			case !tc.ok && (resp == nil || resp.StatusCode != http.StatusForbidden):
				t.Fatalf("refused with %v, want HTTP 403", resp)
			}
		})
	}
}

// TestLoopbackPagesOff checks that without the option a page of the
// listener itself is refused like any other.
func TestLoopbackPagesOff(t *testing.T) {
	ts := newTestServer(t)
	self := strings.TrimSuffix(strings.TrimPrefix(ts.url, "ws://"), "/")
	ws, resp, err := websocket.Dial(ctxT(t), ts.url, &websocket.DialOptions{HTTPHeader: http.Header{"Origin": {"http://" + self}}})
	if ws != nil {
		ws.CloseNow()
	}
	if err == nil || resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a same-origin page without WithLoopbackPages: err %v, response %v; want HTTP 403", err, resp)
	}
}
