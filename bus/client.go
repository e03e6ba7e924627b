package bus

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/rpc"
)

// ProcessFunc answers one processMessage delivery (seed 001) to the Client
// c: processed, should_retry (the bus tries again after retry_seconds),
// or an error, which the bus counts as a failed attempt and retries.
type ProcessFunc func(ctx context.Context, c *Client, p ProcessParams) (ProcessResult, error)

// Client is a Go client of the bus: an rpc.Client (embedded, for Call,
// Close, Done and Err) whose processMessage deliveries go to a
// ProcessFunc, with seed 001's subscribe and sendMessage as methods.
type Client struct {
	*rpc.Client
}

// Dial connects to the bus at url as rpc.Dial does with opts (give it
// rpc.WithClientID for a stable client id; do not give it
// rpc.WithRequestHandler, which Dial sets) and answers its processMessage
// deliveries with h, each on a goroutine of rpc's, as many at once as
// rpc.ClientConfig allows. A delivery that arrives before Dial returns
// waits for it, so h always has the Client. A nil h answers none: for a
// client that only sends.
func Dial(ctx context.Context, url string, h ProcessFunc, opts ...rpc.ClientOption) (*Client, error) {
	c := &Client{}
	if h != nil {
		dialed := make(chan struct{})
		defer close(dialed) // once c.Client is set, or Dial failed
		opts = append(opts, rpc.WithRequestHandler(ProcessHandler(func(ctx context.Context, p ProcessParams) (ProcessResult, error) {
			select {
			case <-dialed:
				if c.Client == nil { // Dial failed
					return ProcessResult{}, rpc.Errorf(rpc.CodeInternalError, "client not connected")
				}
				return h(ctx, c, p)
			case <-ctx.Done():
				return ProcessResult{}, ctx.Err()
			}
		})))
	}
	rc, err := rpc.Dial(ctx, url, opts...)
	if err != nil {
		return nil, fmt.Errorf("bus: dial %s: %w", url, err)
	}
	c.Client = rc
	return c, nil
}

// ProcessHandler adapts h to rpc.WithRequestHandler: it answers
// processMessage with h, its params decoded strictly (an unknown member or
// a wrong type is invalid params), and refuses every other method with
// method not found. Dial uses it; so does a client that dials itself.
func ProcessHandler(h func(ctx context.Context, p ProcessParams) (ProcessResult, error)) func(ctx context.Context, method string, params json.RawMessage) (any, error) {
	return func(ctx context.Context, method string, params json.RawMessage) (any, error) {
		if method != MethodProcessMessage {
			return nil, rpc.Errorf(rpc.CodeMethodNotFound, "method not found: %s", method)
		}
		var p ProcessParams
		if err := protocol.DecodeStrict(params, &p); err != nil {
			return nil, rpc.Errorf(rpc.CodeInvalidParams, "invalid params: %v", err)
		}
		return h(ctx, p)
	}
}

// Subscribe subscribes the client to p.Topic, a topic or pattern, as
// p says (a queue group, a propagation policy, the default handler).
func (c *Client) Subscribe(ctx context.Context, p SubscribeParams) error {
	var res SuccessResult
	if err := c.Call(ctx, MethodSubscribe, p, &res); err != nil {
		return fmt.Errorf("bus: subscribe %s: %w", p.Topic, err)
	}
	if !res.Success {
		return fmt.Errorf("bus: subscribe %s: not successful", p.Topic)
	}
	return nil
}

// Send publishes payload, encoded as a JSON object, on topic (seed 001's
// sendMessage) and returns the bus's answer: an ack per subscriber that
// was asked.
func (c *Client) Send(ctx context.Context, topic string, payload any) (SendResult, error) {
	var res SendResult
	p, err := json.Marshal(payload)
	if err != nil {
		return res, fmt.Errorf("bus: send on %s: payload: %w", topic, err)
	}
	if err := c.Call(ctx, MethodSendMessage, SendMessageParams{Topic: topic, Payload: p}, &res); err != nil {
		return res, fmt.Errorf("bus: send on %s: %w", topic, err)
	}
	return res, nil
}
