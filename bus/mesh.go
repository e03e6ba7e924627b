package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/rpc"
	"github.com/meshagent/meshagent/sign"
	"github.com/meshagent/meshagent/store"
)

// The bus and the mesh: local messages are published on the mesh's topics,
// messages published elsewhere reach local subscribers through one mesh
// subscription per pattern, and agent:<id> topics naming a mesh agent that
// no local client holds become calls to that agent.

// meshPatterns counts the local subscriptions per pattern subscribed on the
// mesh. Its lock serialises the mesh subscriptions of a pattern; the
// subscription table's lock is never held with it.
type meshPatterns struct {
	mu        sync.Mutex
	byPattern map[string]*meshPattern
	state     map[*subscription]bool // true: counted; false: removed first
}

type meshPattern struct {
	n      int
	cancel func()
}

func (m *meshPatterns) init() {
	m.byPattern = map[string]*meshPattern{}
	m.state = map[*subscription]bool{}
}

// addMeshSub subscribes sub's pattern on the mesh (once per pattern) so
// that messages published elsewhere reach local subscribers. A default
// handler takes nothing from the mesh (every node would spawn one).
func (b *Bus) addMeshSub(sub *subscription) {
	if b.topics == nil || sub.defaultOnly {
		return
	}
	m := &b.meshSubs
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, done := m.state[sub]; done {
		delete(m.state, sub) // removed before it was counted
		return
	}
	m.state[sub] = true
	if ms := m.byPattern[sub.pattern]; ms != nil {
		ms.n++
		return
	}
	// The bus drops its own messages when they come back: they are no
	// mesh delivery, and PublishID must not count them as one.
	cancel, err := b.topics.SubscribeOwn(sub.pattern, b.fromMesh)
	if err != nil {
		// A pattern the mesh cannot carry (a wildcard family) is still a
		// local subscription.
		b.log.Debug("pattern not subscribed on the mesh", "pattern", sub.pattern, "err", err)
		cancel = func() {}
	}
	m.byPattern[sub.pattern] = &meshPattern{n: 1, cancel: cancel}
}

// dropMeshSub undoes addMeshSub for a removed subscription, whichever of
// the two comes first.
func (b *Bus) dropMeshSub(sub *subscription) {
	if b.topics == nil || sub.defaultOnly {
		return
	}
	m := &b.meshSubs
	m.mu.Lock()
	counted, known := m.state[sub]
	if !known {
		m.state[sub] = false // addMeshSub will find it removed
		m.mu.Unlock()
		return
	}
	delete(m.state, sub)
	ms := m.byPattern[sub.pattern]
	if !counted || ms == nil {
		m.mu.Unlock()
		return
	}
	if ms.n--; ms.n > 0 {
		m.mu.Unlock()
		return
	}
	delete(m.byPattern, sub.pattern)
	m.mu.Unlock()
	ms.cancel()
}

// meshAgent returns the agent id (as a peer ID) a topic agent:<id> names,
// unless it names none or this node's own agent.
func (b *Bus) meshAgent(topic string) (string, bool) {
	id, ok := strings.CutPrefix(topic, "agent:")
	if !ok {
		return "", false
	}
	pid, err := sign.ParseAgentID(id)
	if err != nil || pid.String() == b.mesh.AgentID() {
		return "", false
	}
	return pid.String(), true
}

// toMeshAgent calls a mesh agent for a topic agent:<id> naming one: the
// payload's "type" is the capability, the payload the params. The ack is
// positive (success) when the agent answered, or when it is away and the
// message is queued for it; a message neither answered nor queued is
// refused: its ack says why and the send is no success. An error means
// the message was not accepted at all (see forward).
func (b *Bus) toMeshAgent(ctx context.Context, msg store.Message) (ack Ack, success, ok bool, err error) {
	agent, ok := b.meshAgent(msg.Topic)
	if !ok {
		return Ack{}, false, false, nil
	}
	var p struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(msg.Payload, &p)
	ack = Ack{ClientID: agent}
	if p.Type == "" {
		ack.Message = `the payload has no "type": it names the capability to call on a mesh agent`
		return ack, true, true, nil
	}
	action := p.Type
	if action == rpc.SeedTypeAgentMessage {
		// Seed 004's direct message is the agent's direct message.
		m, err := seedDirectMessage(msg)
		if err != nil {
			ack.Message = err.Error()
			return ack, false, true, nil
		}
		action, msg.Payload = protocol.MessageCapability, m
	}
	ctx, cancel := context.WithTimeout(ctx, b.cfg.DeliveryTimeout)
	defer cancel()
	// The provider's signed answer rides in the ack as its receipt.
	resp, err := b.mesh.Call(ctx, protocol.CallRequest{To: agent, Action: action, Params: msg.Payload, Timeout: b.cfg.DeliveryTimeout,
		Signed: func(s json.RawMessage) { ack.Receipt = &s }})
	if err != nil {
		pe := protocol.AsError(err)
		ack.Message = string(pe.Code) + ": " + pe.Message
		if !away(pe.Code) {
			return ack, true, true, nil
		}
		if b.cfg.Forwarder == nil {
			return ack, true, true, nil
		}
		if err := b.forward(ctx, msg, agent, action, &ack); err != nil {
			return ack, false, true, err
		}
		return ack, ack.Queued, true, nil
	}
	ack.Processed = resp.Status == protocol.StatusSuccess
	ack.Message = compactResult(resp.Result)
	return ack, true, true, nil
}

// away reports whether a call's failure means that the agent is away:
// unreachable, or up without a handler for the capability yet.
func away(c protocol.Code) bool {
	return c == protocol.CodeUnknownAgent || c == protocol.CodeCapabilityNotSupported
}

// forward queues msg for an agent that is away in the Forwarder's outbox
// (WithForwarder) and says so in ack. When the outbox refuses it (a
// bound: full), the ack says why and stays negative: the message is
// refused, not queued. When the outbox's store cannot write (a full disk:
// store.ErrWrite), forward returns the -32005 error sendMessage answers:
// the message is not accepted at all, and a later send may be.
func (b *Bus) forward(ctx context.Context, msg store.Message, agent, action string, ack *Ack) error {
	f := b.cfg.Forwarder
	// Queued even when the sender gives up now: it is told either way.
	until, err := f.Forward(context.WithoutCancel(ctx), msg.ID, agent, action, msg.Payload)
	if errors.Is(err, store.ErrWrite) {
		return rpc.Errorf(rpc.CodeServerBusy, "server busy: agent %s is away (%s) and the node's outbox cannot write (%v); message not accepted, send it again later", agent, ack.Message, err)
	}
	if err != nil {
		ack.Message += "; not queued: " + err.Error()
		return nil
	}
	ack.Queued = true
	ack.Message = fmt.Sprintf("queued: agent %s is away (%s); delivered when it is back, until %s",
		agent, ack.Message, until.UTC().Format(time.RFC3339))
	return nil
}

func compactResult(raw json.RawMessage) string {
	if len(raw) > 4096 {
		return string(raw[:4096]) + "…"
	}
	return string(raw)
}

// backgroundPublishWait bounds a mesh publish that outlives its request.
const backgroundPublishWait = 10 * time.Second

// toMesh publishes a local message to the mesh. In the background it
// returns nil and reports nothing; otherwise the channel yields an ack
// when the message reached topic peers within MeshWait (nothing when there
// were none, or the bus was built without WithTopics).
func (b *Bus) toMesh(ctx context.Context, msg store.Message, background bool) <-chan Ack {
	if b.topics == nil || strings.HasPrefix(msg.Topic, protocol.PresenceFamily+":") {
		return nil
	}
	wait := b.cfg.MeshWait
	if background {
		ctx, wait = b.ctx, backgroundPublishWait
	}
	// The copy comes back through this bus's own mesh subscriptions,
	// if any match: its id tells fromMesh it was delivered here already.
	id := protocol.NewID()
	b.seen.add(meshKey(b.mesh.AgentID(), id))
	out := make(chan Ack, 1)
	started := b.spawn(func() {
		defer close(out)
		ctx, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		n, err := b.topics.PublishID(ctx, id, msg.Topic, msg.Payload, nil)
		if err != nil || n == 0 {
			return
		}
		out <- Ack{ClientID: "mesh", Processed: true, Message: fmt.Sprintf("published to %d mesh peers", n)}
	})
	if background || !started {
		return nil
	}
	return out
}

// fromMesh delivers a mesh message to local subscribers: one published
// by another agent, or by this node other than through this bus
// (mesh.publish, the CLI's publish, Node.Publish). It comes once per local
// pattern that matches it and is dispatched once; the bus's own messages
// were delivered locally already and are recognised by their id.
func (b *Bus) fromMesh(m protocol.TopicMessage) {
	if !b.seen.add(meshKey(m.From, m.ID)) {
		return
	}
	msg := store.Message{ID: newMessageID(), Topic: m.Topic, From: m.From, Payload: m.Payload, Time: m.Time, ConversationID: conversationOf(m.Payload)}
	// Deliveries can wait on slow subscribers: never on the mesh's
	// goroutine.
	b.spawn(func() {
		if _, err := b.dispatch(b.ctx, msg, false); err != nil && b.ctx.Err() == nil {
			b.log.Warn("mesh message not delivered", "topic", m.Topic, "err", err)
		}
	})
}
