package a2a_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshagent/meshagent/a2a"
	"github.com/meshagent/meshagent/protocol"
)

// fakeAgent is an A2A v1.0 agent whose SendMessage answer the test sets.
func fakeAgent(t *testing.T, answer func(req map[string]any) string) *httptest.Server {
	t.Helper()
	var srv *httptest.Server
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodGet && r.URL.Path == "/base/.well-known/agent-card.json":
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"name":"x","description":"x","version":"1","supportedInterfaces":[{"url":"`+srv.URL+`/rpc","protocolBinding":"JSONRPC","protocolVersion":"1.0"}],"skills":[{"id":"shout","name":"shout","description":"d","tags":["t"]}],"extra":"ignored"}`)
		case r.Method == http.MethodPost && r.URL.Path == "/rpc":
			if r.Header.Get("A2A-Version") != "1.0" {
				t.Errorf("request without A2A-Version: 1.0")
			}
			var req map[string]any
			if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
				t.Errorf("request: %v", err)
			}
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"jsonrpc":"2.0","id":`+mustJSON(req["id"])+`,"result":`+answer(req)+`}`)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

func mustJSON(v any) string { b, _ := json.Marshal(v); return string(b) }

func handlerFor(t *testing.T, url, skill string, timeout ...string) *a2a.Handler {
	t.Helper()
	spec := `{"url":"` + url + `/base","skill":"` + skill + `"`
	if len(timeout) > 0 {
		spec += `,"timeout":"` + timeout[0] + `"`
	}
	h, err := a2a.NewHandler(json.RawMessage(spec + "}"))
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestHandler(t *testing.T) {
	completed := `{"task":{"id":"t1","contextId":"c","status":{"state":"TASK_STATE_COMPLETED"},"artifacts":[{"artifactId":"a","parts":[{"text":"x"},{"data":{"loud":"HI"}}]}]}}`
	var polls atomic.Int32
	for _, tc := range []struct {
		name   string
		skill  string
		answer func(req map[string]any) string
		want   string
		code   protocol.Code
	}{
		{"completed", "shout", func(req map[string]any) string {
			msg := req["params"].(map[string]any)["message"].(map[string]any)
			if msg["metadata"].(map[string]any)["skill"] != "shout" || msg["role"] != "ROLE_USER" || mustJSON(msg["parts"]) != `[{"data":{"text":"hi"}}]` {
				t.Errorf("message %s", mustJSON(msg))
			}
			return completed
		}, `{"loud":"HI"}`, ""},
		{"working, then completed on GetTask", "shout", func(req map[string]any) string {
			if req["method"] == "GetTask" {
				if polls.Add(1) < 2 {
					return `{"id":"t1","contextId":"c","status":{"state":"TASK_STATE_WORKING"}}`
				}
				return `{"id":"t1","contextId":"c","status":{"state":"TASK_STATE_COMPLETED"},"artifacts":[{"artifactId":"a","parts":[{"data":7}]}]}`
			}
			return `{"task":{"id":"t1","contextId":"c","status":{"state":"TASK_STATE_SUBMITTED"}}}`
		}, `7`, ""},
		{"a message", "shout", func(map[string]any) string {
			return `{"message":{"messageId":"m","role":"ROLE_AGENT","parts":[{"data":{"ok":true}}]}}`
		}, `{"ok":true}`, ""},
		{"failed", "shout", func(map[string]any) string {
			return `{"task":{"id":"t1","contextId":"c","status":{"state":"TASK_STATE_FAILED","message":{"messageId":"m","role":"ROLE_AGENT","parts":[{"text":"no way"}]}}}}`
		}, "", protocol.CodeInternalError},
		{"input required", "shout", func(map[string]any) string {
			return `{"task":{"id":"t1","contextId":"c","status":{"state":"TASK_STATE_INPUT_REQUIRED"}}}`
		}, "", protocol.CodeInternalError},
		{"completed without data", "shout", func(map[string]any) string {
			return `{"task":{"id":"t1","contextId":"c","status":{"state":"TASK_STATE_COMPLETED"},"artifacts":[{"artifactId":"a","parts":[{"text":"x"}]}]}}`
		}, "", protocol.CodeInternalError},
		{"wrong types", "shout", func(map[string]any) string { return `{"task":{"id":1}}` }, "", protocol.CodeInternalError},
		{"skill not on the card", "whisper", func(map[string]any) string { return completed }, "", protocol.CodeInternalError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := fakeAgent(t, tc.answer)
			res, err := handlerFor(t, srv.URL, tc.skill).Call(context.Background(), json.RawMessage(`{"text":"hi"}`))
			if tc.code != "" {
				var pe *protocol.Error
				if !errors.As(err, &pe) || pe.Code != tc.code {
					t.Fatalf("Call = %s, %v; want %s", res, err, tc.code)
				}
				return
			}
			if err != nil || string(res) != tc.want {
				t.Fatalf("Call = %s, %v; want %s", res, err, tc.want)
			}
		})
	}
}

func TestHandlerBounds(t *testing.T) {
	srv := fakeAgent(t, func(req map[string]any) string {
		if req["method"] == "SendMessage" {
			return `{"task":{"id":"t1","contextId":"c","status":{"state":"TASK_STATE_WORKING"}}}`
		}
		if req["method"] == "CancelTask" {
			return `{"id":"t1","contextId":"c","status":{"state":"TASK_STATE_CANCELED"}}`
		}
		return `{"id":"t1","contextId":"c","status":{"state":"TASK_STATE_WORKING"},"metadata":{"pad":"` + strings.Repeat("x", 5<<20) + `"}}`
	})
	_, err := handlerFor(t, srv.URL, "shout", "5s").Call(context.Background(), nil)
	if err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("oversized response: %v", err)
	}
	never := fakeAgent(t, func(map[string]any) string {
		return `{"task":{"id":"t1","contextId":"c","status":{"state":"TASK_STATE_WORKING"}}}`
	})
	start := time.Now()
	_, err = handlerFor(t, never.URL, "shout", "300ms").Call(context.Background(), nil)
	var pe *protocol.Error
	if !errors.As(err, &pe) || pe.Code != protocol.CodeTimeout || time.Since(start) > 10*time.Second {
		t.Fatalf("a task that never ends: %v after %s", err, time.Since(start))
	}
	for _, spec := range []string{`{}`, `{"url":"http://x/"}`, `{"url":"nope","skill":"s"}`, `{"url":"http://x/","skill":"s","timeout":"2h"}`, `{"url":"http://x/","skill":"s","x":1}`, `{"url":7,"skill":"s"}`} {
		if _, err := a2a.NewHandler(json.RawMessage(spec)); err == nil {
			t.Errorf("NewHandler(%s) accepted", spec)
		}
	}
}
