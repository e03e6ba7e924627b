package ui_test

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/meshagent/meshagent/ui"
)

func TestHandler(t *testing.T) {
	h := ui.Handler()
	tests := []struct {
		method, path string
		status       int
		typ, body    string
	}{
		{"GET", "/ui", 200, "text/html", `<svg id="graph"`},
		{"GET", "/ui/", 200, "text/html", `<script src="/ui/app.js"`},
		{"HEAD", "/ui", 200, "text/html", ""},
		{"GET", "/ui/app.js", 200, "javascript", `"initialize"`},
		{"GET", "/ui/style.css", 200, "text/css", "#graph"},
		{"GET", "/ui/nothing.js", 404, "", ""},
		{"GET", "/uix", 404, "", ""},
		{"POST", "/ui", 405, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(tc.method, tc.path, nil))
			res := rec.Result()
			body, _ := io.ReadAll(res.Body)
			if res.StatusCode != tc.status {
				t.Fatalf("status %d, want %d (%s)", res.StatusCode, tc.status, body)
			}
			if tc.status != 200 {
				return
			}
			if ct := res.Header.Get("Content-Type"); !strings.Contains(ct, tc.typ) {
				t.Errorf("Content-Type %q, want %s", ct, tc.typ)
			}
			if !strings.Contains(string(body), tc.body) {
				t.Errorf("body lacks %q", tc.body)
			}
			if csp := res.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "connect-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") {
				t.Errorf("Content-Security-Policy %q", csp)
			}
		})
	}
}

func TestOwns(t *testing.T) {
	for path, want := range map[string]bool{"/ui": true, "/ui/": true, "/ui/app.js": true, "/uix": false, "/": false, "/metrics": false} {
		if got := ui.Owns(path); got != want {
			t.Errorf("Owns(%q) = %v, want %v", path, got, want)
		}
	}
}

// The page must load nothing from elsewhere: no CDN, no internet.
func TestNoExternalResources(t *testing.T) {
	for _, path := range []string{"/ui", "/ui/app.js", "/ui/style.css"} {
		rec := httptest.NewRecorder()
		ui.Handler().ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		body := rec.Body.String()
		for _, bad := range []string{"https://", "http://cdn", "//cdn", "@import"} {
			if strings.Contains(body, bad) {
				t.Errorf("%s contains %q", path, bad)
			}
		}
	}
}
