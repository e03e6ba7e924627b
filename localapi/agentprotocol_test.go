package localapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/localapi"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/sign"
)

// fakeMesh answers calls as a provider would: echo returns its params
// after two progress steps and a receipt; anything else is
// CAPABILITY_NOT_SUPPORTED.
type fakeMesh struct {
	signer *sign.Signer
	mu     sync.Mutex
	calls  []protocol.CallRequest
}

func (m *fakeMesh) AgentID() string      { return m.signer.IDString() }
func (m *fakeMesh) Signer() *sign.Signer { return m.signer }
func (m *fakeMesh) Capabilities() []protocol.Capability {
	return []protocol.Capability{{Name: "echo"}}
}

func (m *fakeMesh) Call(_ context.Context, req protocol.CallRequest) (*protocol.Response, error) {
	m.mu.Lock()
	m.calls = append(m.calls, req)
	m.mu.Unlock()
	if req.Action != "echo" {
		return nil, protocol.Errorf(protocol.CodeCapabilityNotSupported, "no %s here", req.Action)
	}
	if req.Progress != nil {
		for i := 1; i <= 2; i++ {
			req.Progress(&protocol.Response{CorrelationID: "provider-side", Status: protocol.StatusInProgress, Result: json.RawMessage(`{"progress":` + string(rune('0'+i)) + `}`)})
		}
	}
	if req.Signed != nil {
		req.Signed(json.RawMessage(`{"receipt":"stand-in"}`))
	}
	return &protocol.Response{CorrelationID: "provider-side", Status: protocol.StatusSuccess, Result: req.Params}, nil
}

func newSigner(t testing.TB) *sign.Signer {
	t.Helper()
	k, err := sign.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	s, err := sign.NewSigner(k)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// envelope builds a client's signed envelope; base64ID writes the
// client's id as seed 002 does.
func envelope(t *testing.T, s *sign.Signer, typ protocol.MessageType, to string, payload any, base64ID bool, edit func(*protocol.Envelope)) []byte {
	t.Helper()
	env, err := protocol.NewEnvelope(typ, &protocol.Recipient{AgentID: to}, payload)
	if err != nil {
		t.Fatal(err)
	}
	env.From.AgentID = s.IDString()
	if base64ID {
		env.From.AgentID = s.PublicKeyBase64()
	}
	if edit != nil {
		edit(env)
	}
	body, err := protocol.MarshalCanonical(env)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := protocol.SignedJSON(body, s.Sign(body))
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

func TestAgentProtocolHTTP(t *testing.T) {
	mesh := &fakeMesh{signer: newSigner(t)}
	ap := localapi.NewAgentProtocol(mesh, nil)
	srv := httptest.NewServer(ap)
	defer srv.Close()
	client := newSigner(t)
	node := mesh.AgentID()
	echo := protocol.Request{Action: "echo", CorrelationID: "req-123", Params: json.RawMessage(`{"code":"x"}`), Timeout: 30000}
	replayed := envelope(t, client, protocol.TypeRequest, node, echo, false, nil)
	tampered := bytes.Replace(envelope(t, client, protocol.TypeRequest, node, echo, false, nil), []byte(`"code":"x"`), []byte(`"code":"y"`), 1)

	tests := []struct {
		name       string
		body       []byte
		wantStatus int
		wantType   protocol.MessageType
		wantCode   protocol.Code
		check      func(t *testing.T, env *protocol.Envelope)
	}{
		{"hello", envelope(t, client, protocol.TypeHello, node, map[string]any{"version": "0.1", "features": []string{}}, false, nil), 200, protocol.TypeHello, "", func(t *testing.T, env *protocol.Envelope) {
			if len(env.From.Capabilities) != 1 || env.From.Capabilities[0] != "echo" || env.To.AgentID != client.IDString() {
				t.Errorf("hello %+v to %+v", env.From, env.To)
			}
		}},
		{"request", replayed, 200, protocol.TypeResponse, "", func(t *testing.T, env *protocol.Envelope) {
			var r protocol.Response
			if err := json.Unmarshal(env.Payload, &r); err != nil || r.CorrelationID != "req-123" || r.Status != protocol.StatusSuccess || string(r.Result) != `{"code":"x"}` {
				t.Errorf("payload %s (%v)", env.Payload, err)
			}
			if string(env.Metadata) != `{"receipt":{"receipt":"stand-in"}}` {
				t.Errorf("metadata %s, want the provider's receipt", env.Metadata)
			}
			if env.From.AgentID != node {
				t.Errorf("from %s, want the node's peer id for a sender that wrote its own so", env.From.AgentID)
			}
			mesh.mu.Lock()
			last := mesh.calls[len(mesh.calls)-1]
			mesh.mu.Unlock()
			if last.OnBehalfOf != "agentprotocol:"+client.IDString() || last.To != node || last.Timeout != 30*time.Second {
				t.Errorf("call %+v", last)
			}
		}},
		{"seed 002 base64 ids both ways", envelope(t, client, protocol.TypeRequest, mesh.signer.PublicKeyBase64(), echo, true, nil), 200, protocol.TypeResponse, "", func(t *testing.T, env *protocol.Envelope) {
			if env.From.AgentID != mesh.signer.PublicKeyBase64() || env.To.AgentID != client.PublicKeyBase64() {
				t.Errorf("from %s to %s: want both as base64 keys", env.From.AgentID, env.To.AgentID)
			}
		}},
		{"replayed", replayed, 400, protocol.TypeError, protocol.CodeInvalidMessage, nil},
		{"tampered", tampered, 401, protocol.TypeError, protocol.CodeInvalidSignature, nil},
		{"stale", envelope(t, client, protocol.TypeRequest, node, echo, false, func(e *protocol.Envelope) { e.Timestamp = protocol.FormatTime(time.Now().Add(-time.Hour)) }), 400, protocol.TypeError, protocol.CodeInvalidMessage, nil},
		{"notify is not relayed", envelope(t, client, protocol.TypeNotify, node, map[string]any{"text": "hi"}, false, nil), 400, protocol.TypeError, protocol.CodeInvalidMessage, nil},
		{"provider refuses", envelope(t, client, protocol.TypeRequest, node, protocol.Request{Action: "nope", CorrelationID: "req-9"}, false, nil), 200, protocol.TypeError, protocol.CodeCapabilityNotSupported, func(t *testing.T, env *protocol.Envelope) {
			if !strings.Contains(string(env.Payload), `"correlationId":"req-9"`) {
				t.Errorf("error payload %s lacks the sender's correlationId", env.Payload)
			}
		}},
		{"no provider named", envelope(t, client, protocol.TypeRequest, "", echo, false, func(e *protocol.Envelope) { e.To = nil }), 400, protocol.TypeError, protocol.CodeInvalidMessage, nil},
		{"not JSON", []byte(`{"protocol":`), 400, "", protocol.CodeInvalidMessage, nil},
		{"unsigned", []byte(`{"protocol":"agentprotocol/0.1","id":"x","timestamp":"2026-01-01T00:00:00Z","from":{"agentId":"` + client.IDString() + `"},"type":"hello","payload":{}}`), 401, protocol.TypeError, protocol.CodeInvalidSignature, nil},
		{"too large", append(append([]byte(`{"pad":"`), bytes.Repeat([]byte("a"), localapi.MaxEnvelopeBytes)...), '"', '}'), 413, "", protocol.CodeInvalidMessage, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := http.Post(srv.URL+"/agentprotocol", "application/json", bytes.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var doc bytes.Buffer
			if _, err := doc.ReadFrom(resp.Body); err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tt.wantStatus {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.wantStatus, doc.Bytes())
			}
			if tt.wantType == "" {
				// No agent id to answer: the plain error payload.
				var e protocol.Error
				if err := json.Unmarshal(doc.Bytes(), &e); err != nil || e.Code != tt.wantCode {
					t.Fatalf("plain error %s, want %s", doc.Bytes(), tt.wantCode)
				}
				return
			}
			env, _, err := protocol.OpenJSON(doc.Bytes())
			if err != nil {
				t.Fatalf("the answer does not verify: %v\n%s", err, doc.Bytes())
			}
			if env.Type != tt.wantType {
				t.Fatalf("answer type %s, want %s: %s", env.Type, tt.wantType, doc.Bytes())
			}
			if tt.wantCode != "" {
				var e protocol.Error
				if err := json.Unmarshal(env.Payload, &e); err != nil || e.Code != tt.wantCode {
					t.Fatalf("error %s, want %s", env.Payload, tt.wantCode)
				}
			}
			if tt.check != nil {
				tt.check(t, env)
			}
		})
	}
	t.Run("GET is refused", func(t *testing.T) {
		resp, err := http.Get(srv.URL + "/agentprotocol")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed {
			t.Fatalf("status %d", resp.StatusCode)
		}
	})
}

func TestAgentProtocolWebSocket(t *testing.T) {
	mesh := &fakeMesh{signer: newSigner(t)}
	srv := httptest.NewServer(localapi.NewAgentProtocol(mesh, nil))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http")+"/agentprotocol/ws", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	client := newSigner(t)
	req := envelope(t, client, protocol.TypeRequest, mesh.AgentID(), protocol.Request{Action: "echo", CorrelationID: "ws-1", Params: json.RawMessage(`{"n":1}`)}, false, nil)
	if err := c.Write(ctx, websocket.MessageText, req); err != nil {
		t.Fatal(err)
	}
	var statuses []string
	for len(statuses) == 0 || statuses[len(statuses)-1] == string(protocol.StatusInProgress) {
		_, doc, err := c.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		env, _, err := protocol.OpenJSON(doc)
		if err != nil {
			t.Fatalf("answer does not verify: %v", err)
		}
		var r protocol.Response
		if err := json.Unmarshal(env.Payload, &r); err != nil || r.CorrelationID != "ws-1" {
			t.Fatalf("payload %s (%v)", env.Payload, err)
		}
		statuses = append(statuses, string(r.Status))
	}
	if strings.Join(statuses, ",") != "in_progress,in_progress,success" {
		t.Fatalf("answers %v, want two progress then success", statuses)
	}
	// A binary message is refused with an error envelope; the connection
	// stays.
	if err := c.Write(ctx, websocket.MessageBinary, []byte("{}")); err != nil {
		t.Fatal(err)
	}
	_, doc, err := c.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var e protocol.Error
	if err := json.Unmarshal(doc, &e); err != nil || e.Code != protocol.CodeInvalidMessage {
		t.Fatalf("binary message answered %s (%v)", doc, err)
	}
}

// TestAgentProtocolWebSocketBound: past MaxEnvelopeConns idle clients a
// newcomer is refused with 503 before the upgrade, and gets in once one
// of them leaves.
func TestAgentProtocolWebSocketBound(t *testing.T) {
	srv := httptest.NewServer(localapi.NewAgentProtocol(&fakeMesh{signer: newSigner(t)}, nil))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	url := "ws" + strings.TrimPrefix(srv.URL, "http") + "/agentprotocol/ws"
	var held []*websocket.Conn
	for range localapi.MaxEnvelopeConns {
		c, _, err := websocket.Dial(ctx, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	_, resp, err := websocket.Dial(ctx, url, nil)
	if err == nil || resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("client %d: %v (%v), want 503", localapi.MaxEnvelopeConns+1, resp, err)
	}
	held[0].Close(websocket.StatusNormalClosure, "")
	wait.For(t, 10*time.Second, func() error {
		c, _, err := websocket.Dial(ctx, url, nil)
		if err != nil {
			return err
		}
		return c.Close(websocket.StatusNormalClosure, "")
	})
	for _, c := range held[1:] {
		c.CloseNow()
	}
}
