package localapi_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/meshagent/meshagent/localapi"
	"github.com/meshagent/meshagent/protocol"
)

// FuzzAgentProtocol drives the whole seed 002 path with arbitrary input,
// raw and signed by a test key so that it gets past the signature check
// to the decoding behind it: no panic, and every answer is either the
// node's signed envelope or the plain error, with a status code that says
// which.
func FuzzAgentProtocol(f *testing.F) {
	mesh := &fakeMesh{signer: newSigner(f)}
	client := newSigner(f)
	ap := localapi.NewAgentProtocol(mesh, nil)
	f.Add([]byte(`{"action":"echo","correlationId":"c","params":{"a":1}}`), "request", true)
	f.Add([]byte(`{"version":"0.1","features":[]}`), "hello", true)
	f.Add([]byte(`{"action":7,"correlationId":[],"params":"x","timeout":"1"}`), "request", true)
	f.Add([]byte(`{"protocol":"agentprotocol/0.1"}`), "", false)
	f.Fuzz(func(t *testing.T, payload []byte, typ string, signIt bool) {
		doc := payload
		if signIt && json.Valid(payload) {
			env, err := protocol.NewEnvelope(protocol.MessageType(typ), &protocol.Recipient{AgentID: mesh.AgentID()}, json.RawMessage(payload))
			if err != nil {
				return
			}
			env.From.AgentID = client.IDString()
			body, err := protocol.MarshalCanonical(env)
			if err != nil {
				return
			}
			if doc, err = protocol.SignedJSON(body, client.Sign(body)); err != nil {
				return
			}
		}
		answer, status := ap.Handle(context.Background(), doc, nil)
		if _, _, err := protocol.OpenJSON(answer); err != nil {
			var plain protocol.Error
			if json.Unmarshal(answer, &plain) != nil || plain.Code == "" {
				t.Fatalf("status %d answer %q is neither a signed envelope nor a plain error", status, answer)
			}
		}
		if status != http.StatusOK && status < 400 {
			t.Fatalf("status %d", status)
		}
	})
}

// FuzzSeed003 drives seed 003's whole REST surface with arbitrary bytes
// read as an HTTP request (the seeds carry a valid token, so that the
// fuzzer gets past the authentication to the decoding behind it): no
// panic, and every answer is JSON, an ErrorResponse with a code for every
// refusal.
func FuzzSeed003(f *testing.F) {
	lib, _ := newLibrarian(f)
	h := localapi.NewSeed003(lib, localapi.WithTokens(seed003Tokens(f)), localapi.WithRequestsPerMinute(1<<20))
	req := func(method, path, body string) []byte {
		return []byte(method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + tokClaude +
			"\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body)
	}
	f.Add(req("POST", "/agent/request", approval))
	f.Add(req("POST", "/agent/request", `{"agent_id":"claude-3","request_type":"REPORT","request_id":"x","completed":true,"changes_made":["a"]}`))
	f.Add(req("POST", "/agent/request", `{"agent_id":"claude-3","request_type":"QUERY","content":"x","deviations":[{"a":"b"}],"timestamp":"2026-01-01T00:00:00Z"}`))
	f.Add(req("POST", "/agent/context", `{"agent_id":"claude-3","query":"q","max_results":3}`))
	f.Add(req("GET", "/agent/status/task-1", ""))
	f.Add(req("GET", "/agent/capabilities", ""))
	f.Add(req("GET", "/docs", ""))
	f.Add([]byte("GET /agent/status/%zz HTTP/1.1\r\nHost: x\r\n\r\n"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		r, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(raw)))
		if err != nil {
			return
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if rec.Code != http.StatusOK && rec.Code != http.StatusAccepted && rec.Code < 400 {
			t.Fatalf("status %d", rec.Code)
		}
		if !json.Valid(rec.Body.Bytes()) && r.Method != http.MethodHead {
			t.Fatalf("status %d: the answer is not JSON: %q", rec.Code, rec.Body.Bytes())
		}
		if rec.Code >= 400 {
			var e localapi.ErrorResponse
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Code == "" || e.Error == "" {
				t.Fatalf("status %d: %q is not an ErrorResponse", rec.Code, rec.Body.Bytes())
			}
		}
	})
}
