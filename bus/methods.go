package bus

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
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

var (
	subscribeFields   = map[string]bool{"topic": true, "policy": true, "defaultHandler": true}
	unsubscribeFields = map[string]bool{"topic": true, "defaultHandler": true}
	sendMessageFields = map[string]bool{"topic": true, "payload": true}
)

// busParams decodes a bus method's object params. A missing or malformed
// params object is -32600, as seed 001 lists for subscribe.
func busParams(method string, raw json.RawMessage, fields map[string]bool) (map[string]json.RawMessage, error) {
	var w map[string]json.RawMessage
	if len(raw) == 0 || raw[0] != '{' || json.Unmarshal(raw, &w) != nil {
		return nil, rpc.Errorf(rpc.CodeInvalidRequest, "invalid params: %s takes an object {%s}", method, quotedKeys(fields))
	}
	for k := range w {
		if !fields[k] {
			return nil, rpc.Errorf(rpc.CodeInvalidParams, "invalid params: unknown field %q (%s takes %s)", k, method, quotedKeys(fields))
		}
	}
	return w, nil
}

// topicParam reads the "topic" member; missing is -32600 (seed 001).
func topicParam(method string, w map[string]json.RawMessage) (string, error) {
	raw, ok := w["topic"]
	var topic string
	if !ok || json.Unmarshal(raw, &topic) != nil || topic == "" {
		return "", rpc.Errorf(rpc.CodeInvalidRequest, `invalid params: %s needs "topic", a non-empty string`, method)
	}
	if len(topic) > rpc.MaxTopicLen || strings.ContainsRune(topic, 0) {
		return "", rpc.Errorf(rpc.CodeInvalidParams, "invalid params: topic longer than %d bytes or with a NUL", rpc.MaxTopicLen)
	}
	return topic, nil
}

// defaultHandlerParam reads the optional "defaultHandler" member.
func defaultHandlerParam(w map[string]json.RawMessage) (bool, error) {
	var dflt bool
	if raw, ok := w["defaultHandler"]; ok && json.Unmarshal(raw, &dflt) != nil {
		return false, rpc.Errorf(rpc.CodeInvalidParams, `invalid params: "defaultHandler" must be a boolean`)
	}
	return dflt, nil
}

func (b *Bus) subscribe(_ context.Context, r *rpc.Request) (any, error) {
	bc, id, err := initializedClient(r.Conn)
	if err != nil {
		return nil, err
	}
	if err := b.publicTopic(r); err != nil {
		return nil, err
	}
	w, err := busParams(MethodSubscribe, r.Params, subscribeFields)
	if err != nil {
		return nil, err
	}
	pattern, err := topicParam(MethodSubscribe, w)
	if err != nil {
		return nil, err
	}
	if !protocol.ValidPattern(pattern) {
		return nil, rpc.Errorf(rpc.CodeInvalidParams, "invalid params: pattern %q is malformed", pattern)
	}
	prop := b.cfg.DefaultPropagation
	if raw, ok := w["policy"]; ok && !isNull(raw) {
		if json.Unmarshal(raw, &prop) != nil || !prop.valid() {
			return nil, rpc.Errorf(rpc.CodeInvalidParams, "invalid params: policy must be %s, %s or %s", PropagationStopOnProcessed, PropagationStopOnStop, PropagationContinueAll)
		}
	}
	dflt, err := defaultHandlerParam(w)
	if err != nil {
		return nil, err
	}
	sub := &subscription{conn: r.Conn, client: bc, pattern: pattern, propagation: prop, defaultOnly: dflt}
	if !b.subs.add(sub) {
		return nil, rpc.Errorf(rpc.CodeAlreadySubscribed, "already subscribed to %q", pattern)
	}
	b.addMeshSub(sub)
	r.Conn.AfterClose(func() { b.removeSub(sub) })
	b.log.Debug("subscribed", "client", id, "pattern", pattern, "policy", prop, "default", dflt)
	b.wakeClient(id)
	return SuccessResult{Success: true}, nil
}

func (b *Bus) unsubscribe(_ context.Context, r *rpc.Request) (any, error) {
	if _, _, err := initializedClient(r.Conn); err != nil {
		return nil, err
	}
	w, err := busParams(MethodUnsubscribe, r.Params, unsubscribeFields)
	if err != nil {
		return nil, err
	}
	pattern, err := topicParam(MethodUnsubscribe, w)
	if err != nil {
		return nil, err
	}
	dflt, err := defaultHandlerParam(w)
	if err != nil {
		return nil, err
	}
	found := b.subs.find(r.Conn, pattern, dflt)
	if found == nil {
		return nil, rpc.Errorf(rpc.CodeSubscriptionNotFound, "subscription not found: %q", pattern)
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
	w, err := busParams(MethodSendMessage, r.Params, sendMessageFields)
	if err != nil {
		return nil, err
	}
	topic, err := topicParam(MethodSendMessage, w)
	if err != nil {
		return nil, err
	}
	if !protocol.ValidPattern(topic) || strings.ContainsAny(topic, "*?[") {
		return nil, rpc.Errorf(rpc.CodeInvalidParams, "invalid params: send to a topic, not a pattern: %q", topic)
	}
	payload := w["payload"]
	if len(payload) == 0 || payload[0] != '{' {
		return nil, rpc.Errorf(rpc.CodeInvalidParams, `invalid params: sendMessage needs "payload", a JSON object`)
	}
	msg := store.Message{ID: newMessageID(), Topic: topic, From: clientID, Payload: payload, Time: b.now().UTC(), ConversationID: conversationOf(payload)}
	res, err := b.dispatch(ctx, msg, true)
	if err != nil {
		return nil, err
	}
	return res, nil
}

func newMessageID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
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

func isNull(raw json.RawMessage) bool { return string(raw) == "null" }

// quotedKeys lists a params object's members for error messages.
func quotedKeys(fields map[string]bool) string {
	var out []byte
	for i, k := range slices.Sorted(maps.Keys(fields)) {
		if i > 0 {
			out = append(out, ", "...)
		}
		out = strconv.AppendQuote(out, k)
	}
	return string(out)
}
