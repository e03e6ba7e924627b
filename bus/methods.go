package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/rpc"
	"github.com/meshagent/meshagent/store"
)

// client is a connection's bus state.
type client struct {
	id string // the clientId it initialized with (rpc.Conn.ClientID)

	mu sync.Mutex
	// legacy is set once the client answered processMessage with
	// method-not-found: it gets deliveries as sendMessage, as the base
	// protocol of seed 001 does.
	legacy bool
}

// method is what the bus delivers to the client with: processMessage, or
// sendMessage once the client has shown it does not know processMessage.
func (c *client) method() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.legacy {
		return MethodSendMessage
	}
	return MethodProcessMessage
}

type clientKey struct{}

// initializedClient returns the connection's bus state and client id, or
// -32006 before initialize (which the server enforces already).
func initializedClient(c *rpc.Conn) (*client, string, error) {
	id := c.ClientID()
	if id == "" {
		return nil, "", rpc.Errorf(rpc.CodeNotInitialized, "not initialized: send initialize first (seed 001)")
	}
	bc := c.LoadOrStoreValue(clientKey{}, &client{id: id}).(*client)
	return bc, id, nil
}

// SubscribeParams are the params of subscribe (seed 001).
type SubscribeParams struct {
	// Topic is the pattern subscribed to.
	Topic string `json:"topic"`
	// Policy is the subscription's propagation; empty means the bus's
	// default.
	Policy Propagation `json:"policy,omitempty"`
	// DefaultHandler subscribes as the pattern's default handler.
	DefaultHandler bool `json:"defaultHandler,omitempty"`
	// Group joins the queue group of that name on the pattern: each
	// message routed to the group goes to one of its members (an
	// extension of seed 001, as NATS's queue groups).
	Group string `json:"group,omitempty"`
}

// UnsubscribeParams are the params of unsubscribe (seed 001); Group
// leaves that queue group.
type UnsubscribeParams struct {
	Topic          string `json:"topic"`
	DefaultHandler bool   `json:"defaultHandler,omitempty"`
	Group          string `json:"group,omitempty"`
}

// SendMessageParams are the params of sendMessage (seed 001).
type SendMessageParams struct {
	Topic   string          `json:"topic"`
	Payload json.RawMessage `json:"payload"`
}

// subscribeWire is what subscribe reads: SubscribeParams, with the policy
// a pointer because an explicit "" is an error where absence is the
// default.
type subscribeWire struct {
	SubscribeParams
	Policy *Propagation `json:"policy"`
	Group  *string      `json:"group"`
}

// unsubscribeWire is what unsubscribe reads: an explicit "" group is an
// error where absence is no group.
type unsubscribeWire struct {
	UnsubscribeParams
	Group *string `json:"group"`
}

// busParams decodes a bus method's object params into the struct v points
// to (rpc.DecodeMembers) and words what is wrong as seed 001 has it: a
// missing or malformed params object, or a missing topic, is -32600.
func busParams(method string, raw json.RawMessage, v any) error {
	takes := func() string {
		names := slices.Sorted(slices.Values(protocol.MemberNames(v)))
		for i, n := range names {
			names[i] = strconv.Quote(n)
		}
		return strings.Join(names, ", ")
	}
	if len(raw) == 0 || raw[0] != '{' {
		return rpc.Errorf(rpc.CodeInvalidRequest, "invalid params: %s takes an object {%s}", method, takes())
	}
	fe := rpc.DecodeMembers(raw, v)
	switch {
	case fe == nil:
		return nil
	case fe.Err == protocol.ErrSyntax:
		return rpc.Errorf(rpc.CodeInvalidRequest, "invalid params: %s takes an object {%s}", method, takes())
	case fe.Err == protocol.ErrUnknownMember:
		return rpc.Errorf(rpc.CodeInvalidParams, "invalid params: unknown field %q (%s takes %s)", fe.Name(), method, takes())
	case fe.Err == protocol.ErrDuplicateMember:
		return rpc.Errorf(rpc.CodeInvalidParams, "invalid params: %v", fe)
	case fe.Field == "topic":
		return topicError(method)
	case fe.Field == "policy":
		return policyError()
	case fe.Field == "defaultHandler":
		return rpc.Errorf(rpc.CodeInvalidParams, `invalid params: "defaultHandler" must be a boolean`)
	case fe.Field == "group":
		return groupError()
	}
	return rpc.Errorf(rpc.CodeInvalidParams, "invalid params: %v", fe)
}

func topicError(method string) error {
	return rpc.Errorf(rpc.CodeInvalidRequest, `invalid params: %s needs "topic", a non-empty string`, method)
}

func policyError() error {
	return rpc.Errorf(rpc.CodeInvalidParams, "invalid params: policy must be %s, %s or %s", PropagationStopOnProcessed, PropagationStopOnStop, PropagationContinueAll)
}

// checkTopic checks the "topic" member; missing is -32600 (seed 001).
func checkTopic(method, topic string) error {
	if topic == "" {
		return topicError(method)
	}
	if len(topic) > rpc.MaxTopicLen || strings.ContainsRune(topic, 0) {
		return rpc.Errorf(rpc.CodeInvalidParams, "invalid params: topic longer than %d bytes or with a NUL", rpc.MaxTopicLen)
	}
	return nil
}

func (b *Bus) subscribe(_ context.Context, r *rpc.Request) (any, error) {
	bc, id, err := initializedClient(r.Conn)
	if err != nil {
		return nil, err
	}
	if err := b.publicTopic(r); err != nil {
		return nil, err
	}
	var p subscribeWire
	if err := busParams(MethodSubscribe, r.Params, &p); err != nil {
		return nil, err
	}
	pattern, dflt := p.Topic, p.DefaultHandler
	if err := checkTopic(MethodSubscribe, pattern); err != nil {
		return nil, err
	}
	if !protocol.ValidPattern(pattern) {
		return nil, rpc.Errorf(rpc.CodeInvalidParams, "invalid params: pattern %q is malformed", pattern)
	}
	prop := b.cfg.DefaultPropagation
	if p.Policy != nil {
		if prop = *p.Policy; !prop.valid() {
			return nil, policyError()
		}
	}
	if err := checkGroup(p.Group); err != nil {
		return nil, err
	}
	sub := &subscription{conn: r.Conn, client: bc, pattern: pattern, propagation: prop, defaultOnly: dflt}
	if p.Group != nil {
		if dflt {
			return nil, rpc.Errorf(rpc.CodeInvalidParams, `invalid params: a default handler cannot be in a queue group ("defaultHandler" with "group")`)
		}
		sub.group = *p.Group
		switch err := b.subs.join(sub); {
		case errors.Is(err, errAlreadySubscribed):
			return nil, rpc.Errorf(rpc.CodeAlreadySubscribed, "already subscribed to %q", pattern)
		case err != nil:
			return nil, rpc.Errorf(rpc.CodeInvalidParams, "invalid params: %v", err)
		}
	} else if !b.subs.add(sub) {
		return nil, rpc.Errorf(rpc.CodeAlreadySubscribed, "already subscribed to %q", pattern)
	}
	b.addMeshSub(sub)
	r.Conn.AfterClose(func() { b.removeSub(sub) })
	b.log.Debug("subscribed", "client", id, "pattern", pattern, "policy", prop, "default", dflt, "group", sub.group)
	b.wakeClient(id)
	if sub.queue != nil {
		b.wakeClient(sub.queue.address())
	}
	return SuccessResult{Success: true}, nil
}

func (b *Bus) unsubscribe(_ context.Context, r *rpc.Request) (any, error) {
	if _, _, err := initializedClient(r.Conn); err != nil {
		return nil, err
	}
	var p unsubscribeWire
	if err := busParams(MethodUnsubscribe, r.Params, &p); err != nil {
		return nil, err
	}
	pattern, dflt := p.Topic, p.DefaultHandler
	if err := checkTopic(MethodUnsubscribe, pattern); err != nil {
		return nil, err
	}
	if err := checkGroup(p.Group); err != nil {
		return nil, err
	}
	var group string
	if p.Group != nil {
		group = *p.Group
	}
	// A connection holds one subscription per pattern, so a topic alone
	// names it, in a group or not (clients written before groups leave
	// them so); a group given must be its group.
	found := b.subs.find(r.Conn, pattern, dflt)
	switch {
	case found == nil:
		return nil, rpc.Errorf(rpc.CodeSubscriptionNotFound, "subscription not found: %q", pattern)
	case group != "" && found.group != group:
		return nil, rpc.Errorf(rpc.CodeSubscriptionNotFound, "subscription not found: %q in queue group %q", pattern, group)
	}
	b.removeSub(found)
	return SuccessResult{Success: true}, nil
}

// removeSub ends a subscription: on unsubscribe, or when its connection
// ends.
func (b *Bus) removeSub(sub *subscription) {
	if b.subs.remove(sub) {
		b.dropMeshSub(sub)
	}
}

func (b *Bus) sendMessage(ctx context.Context, r *rpc.Request) (any, error) {
	_, clientID, err := initializedClient(r.Conn)
	if err != nil {
		return nil, err
	}
	if err := b.publicTopic(r); err != nil {
		return nil, err
	}
	var p SendMessageParams
	if err := busParams(MethodSendMessage, r.Params, &p); err != nil {
		// Not seed 001's form: seed 004's objects are taken as written.
		topic, ok, serr := seed004Topic(r.Params)
		switch {
		case serr != nil:
			return nil, serr
		case !ok:
			return nil, err
		}
		p = SendMessageParams{Topic: topic, Payload: r.Params}
	}
	topic := p.Topic
	if err := checkTopic(MethodSendMessage, topic); err != nil {
		return nil, err
	}
	if !protocol.ValidPattern(topic) || strings.ContainsAny(topic, "*?[") {
		return nil, rpc.Errorf(rpc.CodeInvalidParams, "invalid params: send to a topic, not a pattern: %q", topic)
	}
	payload := p.Payload
	if len(payload) == 0 || payload[0] != '{' {
		return nil, rpc.Errorf(rpc.CodeInvalidParams, `invalid params: sendMessage needs "payload", a JSON object`)
	}
	if err := checkPayloadType(payload); err != nil {
		return nil, err
	}
	if err := checkSeedFrom(payload, clientID); err != nil {
		return nil, err
	}
	if err := b.gate.check(b.now()); err != nil {
		return nil, err
	}
	msg := store.Message{ID: newMessageID(), Topic: topic, From: clientID, Payload: payload, Time: b.now().UTC(), ConversationID: conversationOf(payload)}
	res, err := b.dispatch(ctx, msg, true)
	if err != nil {
		return nil, err
	}
	return res, nil
}

// payloadType is the member seed 001 makes mandatory in every payload.
type payloadType struct {
	Type string `json:"type,required"`
}

// checkPayloadType refuses, with -32602, a payload without seed 001's
// mandatory "type": a non-empty string naming the message type. Other
// members are the payload's own and not looked at.
func checkPayloadType(payload json.RawMessage) error {
	var p payloadType
	if err := protocol.DecodeStrict(payload, &p, protocol.AllowUnknown()); err != nil {
		return rpc.Errorf(rpc.CodeInvalidParams, `invalid params: payload: %v (seed 001: "type", a string, is mandatory)`, err)
	}
	if p.Type == "" {
		return rpc.Errorf(rpc.CodeInvalidParams, `invalid params: payload: "type" is empty (seed 001: it names the message type)`)
	}
	return nil
}

// newMessageID is store.NewID: time-ordered ids keep the history's id
// index appending at its right edge.
func newMessageID() string {
	return store.NewID()
}

// conversationOf reads a conversation id from a payload: its
// "conversation_id", else its "chat_id" (seed 001's channel messages).
func conversationOf(payload json.RawMessage) string {
	var p struct {
		ConversationID any `json:"conversation_id"`
		ChatID         any `json:"chat_id"`
	}
	if json.Unmarshal(payload, &p) != nil {
		return ""
	}
	for _, v := range []any{p.ConversationID, p.ChatID} {
		switch v := v.(type) {
		case string:
			return v
		case float64:
			return fmt.Sprint(v)
		}
	}
	return ""
}
