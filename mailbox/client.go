package mailbox

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshagent/meshagent/protocol"
)

// Client speaks the mailbox protocol to relays from a host: the sender's
// deposits, the recipient's fetches and acks. The caller puts each relay's
// addresses in the host's peerstore.
type Client struct {
	// Host opens the streams.
	Host host.Host
	// IOTimeout bounds each request (DefaultIOTimeout when zero), within
	// the context's own deadline.
	IOTimeout time.Duration
}

// Deposit leaves envelope (a signed request to agent to, in its embedded
// JSON form) in to's mailbox on relay. A full mailbox returns an error
// matching ErrFull; one the relay will never take, ErrRefused; a deposit
// sent but not answered, ErrUnanswered (it may be in the mailbox).
func (c *Client) Deposit(ctx context.Context, relay, to peer.ID, envelope json.RawMessage) error {
	_, err := c.do(ctx, relay, &Request{Op: OpDeposit, To: to.String(), Envelope: envelope})
	return err
}

// Page is one fetched page of the host's own mailbox.
type Page struct {
	Items []Item
	// Next is the cursor of the following page.
	Next string
	// More reports that the mailbox holds more after this page.
	More bool
}

// Fetch returns the page after cursor after ("" for the first) of what
// relay holds for this host's agent, at most limit items (0: DefaultPage).
// The items stay until acknowledged.
func (c *Client) Fetch(ctx context.Context, relay peer.ID, after string, limit int) (*Page, error) {
	r, err := c.do(ctx, relay, &Request{Op: OpFetch, After: after, Limit: limit})
	if err != nil {
		return nil, err
	}
	return &Page{Items: r.Items, Next: r.Next, More: r.More}, nil
}

// Ack deletes items (by Item.ID) from this host's agent's mailbox on relay.
func (c *Client) Ack(ctx context.Context, relay peer.ID, ids []string) error {
	return c.each(ctx, relay, OpAck, ids)
}

// Defer tells relay that this host's agent fetched items (by Item.ID) and
// could not take them yet: they stay for a later fetch while the mailbox
// has room, and are the first to lose their place when it is full. A
// relay that predates the operation answers ErrRefused.
func (c *Client) Defer(ctx context.Context, relay peer.ID, ids []string) error {
	return c.each(ctx, relay, OpDefer, ids)
}

// each sends op for ids, MaxPage at a time.
func (c *Client) each(ctx context.Context, relay peer.ID, op string, ids []string) error {
	for len(ids) > 0 {
		n := min(len(ids), MaxPage)
		if _, err := c.do(ctx, relay, &Request{Op: op, IDs: ids[:n]}); err != nil {
			return err
		}
		ids = ids[n:]
	}
	return nil
}

// do sends one request on a new stream and reads its answer.
func (c *Client) do(ctx context.Context, relay peer.ID, req *Request) (*Response, error) {
	timeout := c.IOTimeout
	if timeout <= 0 {
		timeout = DefaultIOTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	body, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("mailbox: encode: %w", err)
	}
	s, err := c.Host.NewStream(ctx, relay, protocol.MailboxProtocol)
	if err != nil {
		return nil, fmt.Errorf("%w: open a stream to %s: %v", ErrFailed, relay, err)
	}
	defer s.Close()
	if d, ok := ctx.Deadline(); ok {
		_ = s.SetDeadline(d)
	}
	// From the first byte written the relay may act on the request, so
	// every failure after it is unanswered: the outcome is not known.
	if _, err := s.Write(protocol.AppendFrame(nil, body)); err != nil {
		_ = s.Reset()
		return nil, fmt.Errorf("%w: %w: write to %s: %v", ErrFailed, ErrUnanswered, relay, err)
	}
	_ = s.CloseWrite()
	frame, err := protocol.NewFrameReader(s, maxResponseFrame).Next()
	if err != nil {
		_ = s.Reset()
		return nil, fmt.Errorf("%w: %w: read from %s: %v", ErrFailed, ErrUnanswered, relay, err)
	}
	r, err := parseResponse(frame)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnanswered, err)
	}
	return r, r.err()
}
