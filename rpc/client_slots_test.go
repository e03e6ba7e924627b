package rpc_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/coder/websocket"

	"github.com/meshagent/meshagent/rpc"
)

// TestClientRequestSlotsFreedBeforeAnswer: a server that keeps exactly as
// many requests outstanding at a client as the client serves at once (64),
// sending the next one as soon as an answer arrives, is never told the
// client is busy. The client frees a request's slot before writing its
// answer, so a slot the server counts as free is free.
func TestClientRequestSlotsFreedBeforeAnswer(t *testing.T) {
	const outstanding, total = 64, 3000
	result := make(chan error, 1)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := websocket.Accept(w, r, nil)
		if err != nil {
			result <- err
			return
		}
		defer func() { _ = ws.CloseNow() }()
		result <- func() error {
			ctx, cancel := context.WithTimeout(r.Context(), testTimeout)
			defer cancel()
			sent := 0
			send := func() error {
				sent++
				frame := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"processMessage","params":{"topic":"t","payload":{}}}`, sent)
				return ws.Write(ctx, websocket.MessageText, []byte(frame))
			}
			for range outstanding {
				if err := send(); err != nil {
					return err
				}
			}
			for answered := 0; answered < total; answered++ {
				_, b, err := ws.Read(ctx)
				if err != nil {
					return fmt.Errorf("after %d answers: %w", answered, err)
				}
				var m struct {
					Error *rpc.Error `json:"error"`
				}
				if err := json.Unmarshal(b, &m); err != nil {
					return err
				}
				if m.Error != nil {
					return fmt.Errorf("answer %d with %d outstanding: %s", answered, outstanding, b)
				}
				if sent < total {
					if err := send(); err != nil {
						return err
					}
				}
			}
			return nil
		}()
	}))
	defer hs.Close()
	c := dialClient(t, "ws"+strings.TrimPrefix(hs.URL, "http")+"/", rpc.WithoutInitialize(), rpc.WithRequestHandler(func(context.Context, string, json.RawMessage) (any, error) {
		return map[string]any{"processed": true}, nil
	}))
	defer func() { _ = c.Close() }()
	if err := receive(t, result, "the server's requests to be answered"); err != nil {
		t.Fatal(err)
	}
}
