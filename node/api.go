package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/meshagent/meshagent/protocol"
)

// This file is the Go API in the spirit of seed 004's client library:
// SendRequest, SendRequestAsync, SendNotification and Subscribe (see
// topics.go), over Call and Publish.

// SendRequest calls capability on agent to (a peer ID or base64 key) with
// params and waits for the final result, at most timeout (0: the node's
// request timeout). A failure is a *protocol.Error (TIMEOUT when the
// timeout passes).
func (n *Node) SendRequest(ctx context.Context, to, capability string, params json.RawMessage, timeout time.Duration) (json.RawMessage, error) {
	resp, err := n.Call(ctx, protocol.CallRequest{To: to, Action: capability, Params: params, Timeout: timeout})
	if err != nil {
		return nil, err
	}
	return resp.Result, nil
}

// SendRequestAsync is SendRequest in the background: it returns at once
// and calls callback, on a goroutine the node owns, with the result or the
// error. Close cancels requests still running (callback then gets
// ErrClosed or a cancellation).
func (n *Node) SendRequestAsync(ctx context.Context, to, capability string, params json.RawMessage, timeout time.Duration, callback func(json.RawMessage, error)) error {
	if callback == nil {
		return errors.New("node: SendRequestAsync: nil callback")
	}
	// The request outlives the caller's function but not the node.
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(n.ctx, cancel)
	if !n.goTracked(func() {
		defer stop()
		defer cancel()
		callback(n.SendRequest(ctx, to, capability, params, timeout))
	}) {
		stop()
		cancel()
		return ErrClosed
	}
	return nil
}

// Notification is seed 004's notification payload, carried on a topic.
type Notification struct {
	NotificationType string          `json:"notification_type"`
	Payload          json.RawMessage `json:"payload,omitempty"`
}

// SendNotification publishes a seed 004 notification (no response
// expected), for example {"notification_type": "bead_completed", ...}, to
// every agent subscribed to topic, optionally filtered. It returns how
// many topic peers it went to; see Publish.
func (n *Node) SendNotification(ctx context.Context, topic, notificationType string, payload json.RawMessage, filter *protocol.Filter) (int, error) {
	if notificationType == "" {
		return 0, protocol.Errorf(protocol.CodeInvalidMessage, "a notification needs a type (seed 004: bead_completed, pr_opened, …)")
	}
	if len(payload) > 0 && !json.Valid(payload) {
		return 0, protocol.Errorf(protocol.CodeInvalidMessage, "notification payload is not valid JSON")
	}
	body, err := json.Marshal(Notification{NotificationType: notificationType, Payload: payload})
	if err != nil {
		return 0, fmt.Errorf("node: encode notification: %w", err)
	}
	return n.Publish(ctx, topic, body, filter)
}
