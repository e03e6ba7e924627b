package node

import (
	"bytes"
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshagent/meshagent/protocol"
)

// Batching of direct messages. SendMessage hands each attempt to the
// batcher of its target agent. While fewer than maxBatchesInFlight
// requests to that agent are in flight, the message goes at once, alone,
// as an agent.message request: a lone message waits for nothing. Messages
// that come while that many are in flight wait in the agent's queue (at
// most batchLinger, see lingered), and each request that finishes takes
// what waits, up to
// protocol.MaxMessageBatch messages and maxBatchBytes, as one
// agent.messages request: one signature, one verification and one answer
// for the lot. So batches grow only with the load, and a sender with
// thousands of messages a second for one agent pays per batch the costs it
// would pay per message.
const (
	// maxBatchesInFlight bounds the requests carrying messages in flight
	// to one agent; the receiver serves them in parallel.
	maxBatchesInFlight = 4
	// batchLinger: when messages wait behind maxBatchesInFlight
	// requests and none of them is answered for this long, one more
	// request takes them, up to maxLingerInFlight: so that messages
	// behind slow handlers (a batch is answered once all its messages
	// are) do not wait for those handlers.
	batchLinger       = 20 * time.Millisecond
	maxLingerInFlight = 64
	// maxBatchBytes bounds the params of one batch, well inside the
	// default frame limit.
	maxBatchBytes = 512 << 10
)

// msgBatcher holds, per target agent, the direct messages waiting to go.
type msgBatcher struct {
	mu    sync.Mutex
	peers map[peer.ID]*msgQueue
	// requests and messages count what went out, for tests and
	// benchmarks: messages/requests is the mean batch size.
	requests, messages atomic.Int64
}

// msgQueue is one agent's waiting messages and requests in flight.
type msgQueue struct {
	inflight int
	items    []*batchItem
	// single: the agent does not answer agent.messages (a node from
	// before batches), so messages go one by one.
	single bool
	// timer, while set, fires batchLinger after messages began to wait
	// behind the requests in flight.
	timer *time.Timer
	// completed counts the requests answered; armed is its value when
	// the timer was set, so that the timer adds a request only when none
	// was answered meanwhile (all are held, not merely slow).
	completed, armed uint64
}

// lingered starts one more request for agent to's queue when messages
// still wait there and no request was answered for batchLinger, and
// waits batchLinger again while messages wait.
func (n *Node) lingered(to peer.ID, q *msgQueue) {
	b := &n.batches
	b.mu.Lock()
	q.timer = nil
	if len(q.items) == 0 || n.ctx.Err() != nil {
		b.mu.Unlock()
		return
	}
	start := q.inflight < maxLingerInFlight && q.completed == q.armed
	if start {
		q.inflight++
	}
	q.armed = q.completed
	q.timer = time.AfterFunc(batchLinger, func() { n.lingered(to, q) })
	b.mu.Unlock()
	if start && !n.goTracked(func() { n.flushMessages(to, q) }) {
		b.mu.Lock()
		q.inflight--
		b.mu.Unlock()
	}
}

// batchItem is one attempt of one message.
type batchItem struct {
	ctx     context.Context // the attempt's: one given up is not sent
	params  json.RawMessage // the AgentMessage, canonical
	timeout time.Duration
	done    chan struct{} // closed once res and err are set
	res     json.RawMessage
	err     error
}

// deliverMessage makes one attempt to deliver a direct message (params,
// canonical) to agent to, batched with the other messages to it that are
// waiting. It returns the receiver's answer to this message.
func (n *Node) deliverMessage(ctx context.Context, to peer.ID, params json.RawMessage, timeout time.Duration) (json.RawMessage, error) {
	if timeout <= 0 {
		timeout = n.cfg.RequestTimeout
	}
	if to == n.id {
		resp, err := n.Call(ctx, protocol.CallRequest{To: n.idStr, Action: protocol.MessageCapability, Params: params, Timeout: timeout})
		if err != nil {
			return nil, err
		}
		return resp.Result, nil
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	it := &batchItem{ctx: ctx, params: params, timeout: timeout, done: make(chan struct{})}
	b := &n.batches
	b.mu.Lock()
	if b.peers == nil {
		b.peers = map[peer.ID]*msgQueue{}
	}
	q := b.peers[to]
	if q == nil {
		q = &msgQueue{}
		b.peers[to] = q
	}
	q.items = append(q.items, it)
	start := q.inflight < maxBatchesInFlight
	if start {
		q.inflight++
	} else if q.timer == nil {
		// Every request in flight may be held by slow handlers: what
		// waits longer than batchLinger goes in a request of its own.
		q.armed = q.completed
		q.timer = time.AfterFunc(batchLinger, func() { n.lingered(to, q) })
	}
	b.mu.Unlock()
	if start && !n.goTracked(func() { n.flushMessages(to, q) }) {
		return nil, ErrClosed
	}
	select {
	case <-it.done:
		return it.res, it.err
	case <-ctx.Done():
		return nil, protocol.Errorf(protocol.CodeTimeout, "message to agent %s not answered within %s", to, timeout)
	case <-n.ctx.Done():
		return nil, ErrClosed
	}
}

// flushMessages sends what waits for agent to, batch after batch, until
// nothing does; it is one of the agent's requests in flight.
func (n *Node) flushMessages(to peer.ID, q *msgQueue) {
	b := &n.batches
	for {
		b.mu.Lock()
		batch := q.take()
		single := q.single
		if len(batch) == 0 {
			q.inflight--
			if q.inflight == 0 && len(q.items) == 0 && b.peers[to] == q {
				if q.timer != nil {
					q.timer.Stop()
					q.timer = nil
				}
				delete(b.peers, to)
			}
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
		b.requests.Add(1)
		b.messages.Add(int64(len(batch)))
		n.sendBatch(to, q, batch, single)
		b.mu.Lock()
		q.completed++
		b.mu.Unlock()
	}
}

// take removes from the queue the next batch: the waiting messages whose
// attempt is still on, up to MaxMessageBatch and maxBatchBytes (at least
// one). Called with the batcher's lock held.
func (q *msgQueue) take() []*batchItem {
	var (
		batch []*batchItem
		size  int
		i     int
	)
	for ; i < len(q.items); i++ {
		it := q.items[i]
		if it.ctx.Err() != nil {
			continue // its sender has given up on this attempt
		}
		if len(batch) == protocol.MaxMessageBatch || (len(batch) > 0 && size+len(it.params) > maxBatchBytes) {
			break
		}
		batch = append(batch, it)
		size += len(it.params) + 1
	}
	rest := copy(q.items, q.items[i:])
	clear(q.items[rest:])
	q.items = q.items[:rest]
	return batch
}

// sendBatch sends batch to agent to and hands each message its outcome.
func (n *Node) sendBatch(to peer.ID, q *msgQueue, batch []*batchItem, single bool) {
	if len(batch) == 1 || single {
		n.sendEach(to, batch)
		return
	}
	timeout := time.Duration(0)
	var buf bytes.Buffer
	buf.WriteString(`{"messages":[`)
	for i, it := range batch {
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.Write(it.params)
		timeout = max(timeout, it.timeout)
	}
	buf.WriteString(`]}`)
	resp, err := n.Call(n.ctx, protocol.CallRequest{To: to.String(), Action: protocol.MessageBatchCapability, Params: buf.Bytes(), Timeout: timeout})
	if protocol.CodeOf(err) == protocol.CodeCapabilityNotSupported {
		// An agent from before batches: one by one from now on.
		n.batches.mu.Lock()
		q.single = true
		n.batches.mu.Unlock()
		n.log.Debug("agent takes no message batches; sending one by one", "remote_peer", to)
		n.sendEach(to, batch)
		return
	}
	var out protocol.MessageBatchResult
	if err == nil {
		err = protocol.DecodePayload(resp.Result, "agent message batch result", &out)
		if err == nil && len(out.Results) != len(batch) {
			err = protocol.Errorf(protocol.CodeInvalidMessage, "agent %s answered %d outcomes for a batch of %d messages", to, len(out.Results), len(batch))
		}
	}
	for i, it := range batch {
		switch {
		case err != nil:
			it.err = err
		case out.Results[i].Error != nil:
			it.err = out.Results[i].Error
		case len(out.Results[i].Result) == 0:
			it.res = json.RawMessage("null")
		default:
			it.res = out.Results[i].Result
		}
		close(it.done)
	}
}

// sendEach sends each message of batch as an agent.message request of
// its own, all at once.
func (n *Node) sendEach(to peer.ID, batch []*batchItem) {
	var wg sync.WaitGroup
	for _, it := range batch {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(it.done)
			resp, err := n.Call(it.ctx, protocol.CallRequest{To: to.String(), Action: protocol.MessageCapability, Params: it.params, Timeout: it.timeout})
			if err != nil {
				it.err = err
				return
			}
			it.res = resp.Result
		}()
	}
	wg.Wait()
}
