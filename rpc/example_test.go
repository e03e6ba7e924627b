package rpc_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/rpc"
)

// exampleMesh stands in for a running node: its one agent, reachable as
// peerID, offers "greet", which reports progress once.
type exampleMesh struct{}

func (exampleMesh) AgentID() string            { return selfID }
func (exampleMesh) Peers() []protocol.PeerInfo { return nil }

func (exampleMesh) Call(ctx context.Context, req protocol.CallRequest) (*protocol.Response, error) {
	if req.Action != "greet" {
		return nil, protocol.Errorf(protocol.CodeCapabilityNotSupported, "no capability %q", req.Action)
	}
	var p struct{ Name string }
	if err := json.Unmarshal(req.Params, &p); err != nil {
		return nil, protocol.Errorf(protocol.CodeInvalidMessage, "params: %v", err)
	}
	req.Progress(&protocol.Response{CorrelationID: "c-1", Status: protocol.StatusInProgress, Result: json.RawMessage(`"thinking"`)})
	return &protocol.Response{CorrelationID: "c-1", Status: protocol.StatusSuccess, Result: json.RawMessage(fmt.Sprintf(`{"greeting":"hello, %s"}`, p.Name))}, nil
}

// A node serves its local API; a client calls an agent through it, sees
// progress, and branches on an AgentProtocol error.
func Example() {
	srv, err := rpc.New(exampleMesh{}, rpc.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	if err := srv.Start("127.0.0.1:0"); err != nil {
		panic(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := rpc.Dial(ctx, srv.Addr().String()) // or srv.URL()
	if err != nil {
		panic(err) // errors.Is(err, rpc.ErrNoServer) if no node listens
	}
	defer c.Close()

	resp, err := c.MeshCall(ctx, protocol.CallRequest{To: peerID, Action: "greet", Params: json.RawMessage(`{"name":"Ada"}`)},
		func(p *protocol.Response) { fmt.Println("progress:", string(p.Result)) })
	if err != nil {
		panic(err)
	}
	fmt.Println(resp.Status, string(resp.Result))

	_, err = c.MeshCall(ctx, protocol.CallRequest{To: peerID, Action: "fly"}, nil)
	fmt.Println(protocol.CodeOf(err), err)
	// Output:
	// progress: "thinking"
	// success {"greeting":"hello, Ada"}
	// CAPABILITY_NOT_SUPPORTED CAPABILITY_NOT_SUPPORTED: no capability "fly"
}

// A method can call back the client that invoked it, on the same
// connection: the path seed 001's processMessage takes.
func ExampleServer_Handle() {
	srv, err := rpc.New(exampleMesh{}, rpc.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	srv.Handle("deliver", func(ctx context.Context, req *rpc.Request) (any, error) {
		var ack struct {
			Processed bool `json:"processed"`
		}
		if err := req.Conn.Call(ctx, "processMessage", map[string]any{"topic": "tg:1", "payload": map[string]string{"type": "plaintext_message"}}, &ack); err != nil {
			return nil, err
		}
		return map[string]bool{"delivered": ack.Processed}, nil
	})
	if err := srv.Start("127.0.0.1:0"); err != nil {
		panic(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := rpc.Dial(ctx, srv.URL(), rpc.WithRequestHandler(func(ctx context.Context, method string, params json.RawMessage) (any, error) {
		fmt.Println("server asked:", method, string(params))
		return map[string]any{"processed": true, "should_retry": false}, nil
	}))
	if err != nil {
		panic(err)
	}
	defer c.Close()

	var out map[string]bool
	if err := c.Call(ctx, "deliver", nil, &out); err != nil {
		panic(err)
	}
	fmt.Println(out)
	// Output:
	// server asked: processMessage {"payload":{"type":"plaintext_message"},"topic":"tg:1"}
	// map[delivered:true]
}
