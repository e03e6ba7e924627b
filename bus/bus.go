package bus

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/rpc"
	"github.com/meshagent/meshagent/store"
)

// The bus takes what it needs from the server that serves it and from the
// mesh through the small interfaces below, so that it can be built,
// tested and closed as a part of its own.

// Registrar is what the bus needs of the JSON-RPC server that serves its
// methods (*rpc.Server is one). The server owns initialize: it comes first
// on every listener, and the bus knows a client by its rpc.Conn.ClientID.
type Registrar interface {
	// Handle registers a method for the local API, and for credentials
	// that grant it on a public listener.
	Handle(method string, h rpc.HandlerFunc)
	// HandlePublic registers a method served to anyone on a public
	// listener too.
	HandlePublic(method string, h rpc.HandlerFunc)
	// SetCapabilities sets what initialize announces.
	SetCapabilities(c rpc.BusCapabilities)
	// OnStatus adds to mesh.status's result; f must not block.
	OnStatus(f func(*rpc.StatusResult))
}

// conn is a subscriber's connection as the bus uses it (*rpc.Conn is
// one).
type conn interface {
	// Call sends a request to the client and waits for its answer.
	Call(ctx context.Context, method string, params, result any) error
	// Context ends when the connection does.
	Context() context.Context
	// AfterClose runs f once the connection has ended.
	AfterClose(f func())
}

// Mesh is what the bus uses of the mesh: its own agent id, and calls to
// mesh agents for agent:<id> topics. The mesh's topics, which carry the
// bus's topics across the mesh, and its outbox for agents that are away
// are stated when the bus is built (WithTopics, WithForwarder), never
// found from the Mesh's type.
type Mesh interface {
	AgentID() string
	Call(ctx context.Context, req protocol.CallRequest) (*protocol.Response, error)
}

// Forwarder is a store-and-forward outbox (*node.Node with a store is
// one; WithForwarder gives it to the bus): an agent:<id> message to an agent that is away is queued
// there, on disk before Forward returns (or handed to a mailbox the agent
// names, which keeps it for the agent even when this node is gone), and
// delivered when the agent is back, instead of a negative ack.
type Forwarder interface {
	// Forward queues a call of action with params to agent to under id
	// and returns when the outbox gives up on it.
	Forward(ctx context.Context, id, to, action string, params json.RawMessage) (time.Time, error)
}

// Bus is the seed 001 message bus served on a Registrar (an rpc.Server).
// Build it with New; close it with Close after the server. It is safe for
// concurrent use.
//
// Locks: the subscription table and the mesh subscriptions each have
// their own, and neither is held while calling a client, the mesh or the
// store; lmu guards only the lifecycle (closed, and wg.Add against Close's
// wg.Wait).
type Bus struct {
	srv  Registrar
	mesh Mesh
	// topics carries the bus's topics across the mesh; nil: they are
	// local to the bus (WithTopics).
	topics rpc.IDPublisher
	cfg    Config
	store  *store.Store // nil: no retries, no history, no dead letters
	log    *slog.Logger
	now    func() time.Time
	met    *busMetrics // nil: none

	subs     subTable
	meshSubs meshPatterns
	// seen holds the (author, id) of recent mesh messages: the bus's own,
	// published with an id it chose, and each one received, which comes
	// once per local pattern that matches it.
	seen *recentIDs

	kick     chan struct{} // wakes the retry loop
	historyQ chan store.Message
	gate     storeGate // closed while the store cannot write
	ctx      context.Context
	cancel   context.CancelFunc

	lmu       sync.Mutex
	closed    bool
	wg        sync.WaitGroup
	closeOnce sync.Once
}

// New builds the bus, registers its methods with srv, and starts its
// retry loop and history writer when it has a store (WithStore). The
// caller closes it after srv has stopped serving.
func New(srv Registrar, mesh Mesh, opts ...Option) (*Bus, error) {
	if srv == nil || mesh == nil {
		return nil, ErrMissingPart
	}
	cfg := DefaultConfig()
	if err := cfg.Apply(opts...); err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	b := &Bus{srv: srv, mesh: mesh, topics: cfg.Topics, cfg: cfg, store: cfg.Store, log: cfg.Logger.With("component", "bus"), now: cfg.Now,
		seen: newRecentIDs(recentMeshIDs), kick: make(chan struct{}, 1), gate: storeGate{store: cfg.Store}, ctx: ctx, cancel: cancel}
	if cfg.Metrics != nil {
		var err error
		if b.met, err = newBusMetrics(cfg.Metrics, &b.subs); err != nil {
			cancel()
			return nil, fmt.Errorf("bus: %w", err)
		}
	}
	b.meshSubs.init()
	b.register()
	if b.store != nil {
		b.historyQ = make(chan store.Message, historyQueue)
		b.spawn(b.retryLoop)
		b.spawn(b.historyLoop)
	}
	return b, nil
}

// spawn runs f on a goroutine of the bus unless the bus is closed, and
// reports whether it did.
func (b *Bus) spawn(f func()) bool {
	b.lmu.Lock()
	defer b.lmu.Unlock()
	if b.closed {
		return false
	}
	b.wg.Go(f)
	return true
}

// Close stops the retry loop and the history writer (which first writes
// what was queued), waits for every goroutine of the bus, and cancels its
// mesh subscriptions. Call it after the server's Close, so that no request
// is served by a closed bus; later calls do nothing. It always returns
// nil.
func (b *Bus) Close() error {
	b.closeOnce.Do(func() {
		b.lmu.Lock()
		b.closed = true
		b.lmu.Unlock()
		b.cancel()
		b.wg.Wait()
		for _, sub := range b.subs.clear() {
			b.dropMeshSub(sub)
		}
	})
	return nil
}
