package metrics

import (
	"encoding/json"
	"net/http"
	"sort"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Check reports whether one part of the process is ready: nil when it is,
// or an error saying what is not.
type Check func() error

// Handler serves /metrics from m's registry, /healthz (200
// {"status":"ok"} while the process answers) and /readyz (200 when every
// check passes, else 503 with {"status":"not ready","failing":{name:
// reason}}). Other paths are 404. A scrape's body is bounded by the
// registry's collectors; checks are called once per /readyz request.
func Handler(m *Metrics, checks map[string]Check) http.Handler {
	mux := http.NewServeMux()
	if m != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}))
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"status": "ok"})
	})
	names := make([]string, 0, len(checks))
	for name := range checks {
		names = append(names, name)
	}
	sort.Strings(names)
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		failing := map[string]string{}
		for _, name := range names {
			if err := checks[name](); err != nil {
				failing[name] = err.Error()
			}
		}
		if len(failing) > 0 {
			writeJSON(w, http.StatusServiceUnavailable, map[string]any{"status": "not ready", "failing": failing})
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"status": "ok"})
	})
	return mux
}

// Paths are the HTTP paths Handler answers, for a server that mounts it
// beside other routes.
var Paths = []string{"/metrics", "/healthz", "/readyz"}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
