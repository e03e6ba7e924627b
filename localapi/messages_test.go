package localapi_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/meshagent/meshagent/localapi"
	"github.com/meshagent/meshagent/protocol"
)

// auditLog answers with n entries and keeps the last query.
type auditLog struct {
	n    int
	last protocol.AuditQuery
	err  error
}

func (a *auditLog) Audit(_ context.Context, q protocol.AuditQuery) ([]protocol.AuditEntry, error) {
	a.last = q
	es := make([]protocol.AuditEntry, min(a.n, q.Limit))
	for i := range es {
		es[i] = protocol.AuditEntry{ID: string(rune('a' + i)), At: time.Unix(int64(i), 0)}
	}
	return es, a.err
}

func TestMessagesQuery(t *testing.T) {
	tests := []struct {
		query string
		code  int
		want  protocol.AuditQuery
	}{
		{"", http.StatusOK, protocol.AuditQuery{Limit: 100}},
		{"limit=3&before=x", http.StatusOK, protocol.AuditQuery{Limit: 3, Before: "x"}},
		{"since=2026-01-01T00:00:00Z&until=2026-01-02T00:00:00Z", http.StatusOK,
			protocol.AuditQuery{Since: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), Until: time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC), Limit: 100}},
		{"limit=0", http.StatusBadRequest, protocol.AuditQuery{}},
		{"limit=1001", http.StatusBadRequest, protocol.AuditQuery{}},
		{"limit=1&limit=2", http.StatusBadRequest, protocol.AuditQuery{}},
		{"agent=", http.StatusBadRequest, protocol.AuditQuery{}},
		{"agent=12D3KooWbad", http.StatusBadRequest, protocol.AuditQuery{}},
		{"until=2026-01-01T00:00:00Z&since=2026-01-02T00:00:00Z", http.StatusBadRequest, protocol.AuditQuery{}},
		{"status=busy", http.StatusBadRequest, protocol.AuditQuery{}},
	}
	for _, tc := range tests {
		t.Run(tc.query, func(t *testing.T) {
			log := &auditLog{n: 5}
			rec := httptest.NewRecorder()
			localapi.MessagesHandler(log).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, localapi.MessagesPath+"?"+tc.query, nil))
			if rec.Code != tc.code {
				t.Fatalf("status %d, want %d: %s", rec.Code, tc.code, rec.Body)
			}
			if tc.code == http.StatusOK && (log.last.Limit != tc.want.Limit || log.last.Before != tc.want.Before || !log.last.Since.Equal(tc.want.Since) || !log.last.Until.Equal(tc.want.Until)) {
				t.Fatalf("query %+v, want %+v", log.last, tc.want)
			}
		})
	}
	rec := httptest.NewRecorder()
	localapi.MessagesHandler(&auditLog{err: protocol.Errorf(protocol.CodeCapabilityNotSupported, "no audit log")}).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, localapi.MessagesPath, nil))
	if rec.Code != http.StatusNotFound {
		t.Fatalf("a node without a log: %d, want 404", rec.Code)
	}
	rec = httptest.NewRecorder()
	localapi.MessagesHandler(&auditLog{}).ServeHTTP(rec, httptest.NewRequest(http.MethodPost, localapi.MessagesPath, nil))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Fatalf("POST: %d, want 405", rec.Code)
	}
}

// FuzzMessagesQuery: any query string gets 200 or 400, never a panic, and a
// query that reached the log is within its bounds.
func FuzzMessagesQuery(f *testing.F) {
	for _, s := range []string{"", "limit=3", "agent=12D3KooW", "since=2026-01-01T00:00:00Z", "limit=-1&before=%00", "a=b&a=c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		log := &auditLog{n: 2}
		r := httptest.NewRequest(http.MethodGet, localapi.MessagesPath, nil)
		r.URL.RawQuery = raw
		rec := httptest.NewRecorder()
		localapi.MessagesHandler(log).ServeHTTP(rec, r)
		switch rec.Code {
		case http.StatusOK:
			if log.last.Limit < 1 || log.last.Limit > 1000 {
				t.Fatalf("limit %d reached the log", log.last.Limit)
			}
		case http.StatusBadRequest:
		default:
			t.Fatalf("status %d", rec.Code)
		}
	})
}
