package ui

import (
	"embed"
	"io/fs"
	"net/http"
	"strings"
)

// Path is where Handler serves the page; its assets are below it.
const Path = "/ui"

//go:embed static
var static embed.FS

// securityHeaders keep the page to itself: scripts, styles and
// connections from its own origin only (the WebSocket to the API
// included), no framing by other sites, no MIME sniffing.
var securityHeaders = map[string]string{
	"Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
		"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
	"X-Content-Type-Options": "nosniff",
	"X-Frame-Options":        "DENY",
	"Referrer-Policy":        "no-referrer",
	"Cache-Control":          "no-cache",
}

// Handler serves the status page at Path and Path+"/", and its assets
// at Path+"/<file>". Other paths, and methods other than GET and HEAD,
// are refused.
func Handler() http.Handler {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic("ui: embedded files: " + err.Error()) // the embed pattern guarantees the folder
	}
	files := http.FileServerFS(sub)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		name, ok := strings.CutPrefix(r.URL.Path, Path)
		if !ok || (name != "" && !strings.HasPrefix(name, "/")) {
			http.NotFound(w, r)
			return
		}
		for k, v := range securityHeaders {
			w.Header().Set(k, v)
		}
		if name == "" || name == "/" {
			// index.html itself would be redirected to "./" by the file
			// server; serve it under both names directly.
			http.ServeFileFS(w, r, sub, "index.html")
			return
		}
		r2 := r.Clone(r.Context())
		r2.URL.Path = name
		files.ServeHTTP(w, r2)
	})
}

// Owns reports whether path is served by Handler, for a server that
// mounts it beside other routes.
func Owns(path string) bool {
	return path == Path || strings.HasPrefix(path, Path+"/")
}
