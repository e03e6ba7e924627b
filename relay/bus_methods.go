package relay

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/store"
)

// busClient is a connection's bus state.
type busClient struct {
	mu          sync.Mutex
	initialized bool
	id          string
	// legacy is set once the client answered processMessage with
	// method-not-found: it gets deliveries as sendMessage, as the base
	// protocol of seed 001 does.
	legacy bool
}

type busClientKey struct{}

// clientOf returns a connection's bus state, creating it on first use.
func clientOf(c *Conn) *busClient {
	c.mu.Lock()
	defer c.mu.Unlock()
	if v, ok := c.values[busClientKey{}].(*busClient); ok {
		return v
	}
	bc := &busClient{}
	if c.values == nil {
		c.values = make(map[any]any)
	}
	c.values[busClientKey{}] = bc
	return bc
}

// initializedClient returns the client's state and id, or -32006 before
// initialize.
func initializedClient(c *Conn) (*busClient, string, error) {
	bc := clientOf(c)
	bc.mu.Lock()
	defer bc.mu.Unlock()
	if !bc.initialized {
		return nil, "", Errorf(CodeNotInitialized, "not initialized: send initialize first (seed 001)")
	}
	return bc, bc.id, nil
}

var (
	initializeFields  = map[string]bool{"clientId": true, "clientInfo": true}
	busSubFields      = map[string]bool{"topic": true, "policy": true, "defaultHandler": true}
	busUnsubFields    = map[string]bool{"topic": true, "defaultHandler": true}
	sendMessageFields = map[string]bool{"topic": true, "payload": true}
)

const maxClientID = 256

func (b *bus) initialize(_ context.Context, r *Request) (any, error) {
	bc := clientOf(r.Conn)
	var p InitializeParams
	var w map[string]json.RawMessage
	if len(r.Params) == 0 || r.Params[0] != '{' || json.Unmarshal(r.Params, &w) != nil {
		return nil, Errorf(CodeInvalidClientInfo, `invalid client info: initialize takes {"clientId", "clientInfo": {"name", "version"}}`)
	}
	for k := range w {
		if !initializeFields[k] {
			return nil, Errorf(CodeInvalidClientInfo, "invalid client info: unknown field %q", k)
		}
	}
	if json.Unmarshal(w["clientId"], &p.ClientID) != nil || p.ClientID == "" || len(p.ClientID) > maxClientID || strings.ContainsRune(p.ClientID, 0) {
		return nil, Errorf(CodeInvalidClientInfo, `invalid client info: "clientId" must be a non-empty string of at most %d bytes`, maxClientID)
	}
	if ci := w["clientInfo"]; len(ci) > 0 {
		if ci[0] != '{' || decodeStrict(ci, &p.ClientInfo) != nil || p.ClientInfo.Name == "" {
			return nil, Errorf(CodeInvalidClientInfo, `invalid client info: "clientInfo" must be {"name": string, "version": string}`)
		}
	}
	bc.mu.Lock()
	defer bc.mu.Unlock()
	if bc.initialized {
		return nil, Errorf(CodeAlreadyInitialized, "already initialized as %q", bc.id)
	}
	if err := b.srv.claimClientID(r.Conn, p.ClientID); err != nil {
		return nil, err
	}
	bc.initialized, bc.id = true, p.ClientID
	return InitializeResult{
		ServerID:     b.cfg.ServerID,
		ServerInfo:   ClientInfo{Name: "meshagent-bus", Version: protocol.HelloVersion},
		Capabilities: BusCapabilities{Subscribe: true, Publish: true, Topics: []string{"inbound:*", "outbound:*", "agent:*"}},
	}, nil
}

// busParams decodes a bus method's object params. A missing or malformed
// params object is -32600, as seed 001 lists for subscribe.
func busParams(method string, raw json.RawMessage, fields map[string]bool) (map[string]json.RawMessage, error) {
	var w map[string]json.RawMessage
	if len(raw) == 0 || raw[0] != '{' || json.Unmarshal(raw, &w) != nil {
		return nil, Errorf(CodeInvalidRequest, "invalid params: %s takes an object {%s}", method, quotedKeys(fields))
	}
	for k := range w {
		if !fields[k] {
			return nil, Errorf(CodeInvalidParams, "invalid params: unknown field %q (%s takes %s)", k, method, quotedKeys(fields))
		}
	}
	return w, nil
}

// topicParam reads the "topic" member; missing is -32600 (seed 001).
func topicParam(method string, w map[string]json.RawMessage) (string, error) {
	raw, ok := w["topic"]
	var topic string
	if !ok || json.Unmarshal(raw, &topic) != nil || topic == "" {
		return "", Errorf(CodeInvalidRequest, `invalid params: %s needs "topic", a non-empty string`, method)
	}
	if len(topic) > maxTopicLen || strings.ContainsRune(topic, 0) {
		return "", Errorf(CodeInvalidParams, "invalid params: topic longer than %d bytes or with a NUL", maxTopicLen)
	}
	return topic, nil
}

// defaultHandlerParam reads the optional "defaultHandler" member.
func defaultHandlerParam(w map[string]json.RawMessage) (bool, error) {
	var dflt bool
	if raw, ok := w["defaultHandler"]; ok && json.Unmarshal(raw, &dflt) != nil {
		return false, Errorf(CodeInvalidParams, `invalid params: "defaultHandler" must be a boolean`)
	}
	return dflt, nil
}

func (b *bus) subscribe(_ context.Context, r *Request) (any, error) {
	bc, id, err := initializedClient(r.Conn)
	if err != nil {
		return nil, err
	}
	w, err := busParams(MethodSubscribe, r.Params, busSubFields)
	if err != nil {
		return nil, err
	}
	pattern, err := topicParam(MethodSubscribe, w)
	if err != nil {
		return nil, err
	}
	if !protocol.ValidPattern(pattern) {
		return nil, Errorf(CodeInvalidParams, "invalid params: pattern %q is malformed", pattern)
	}
	prop := b.cfg.DefaultPropagation
	if raw, ok := w["policy"]; ok && !isNull(raw) {
		if json.Unmarshal(raw, &prop) != nil || !prop.valid() {
			return nil, Errorf(CodeInvalidParams, "invalid params: policy must be %s, %s or %s", PropagationStopOnProcessed, PropagationStopOnStop, PropagationContinueAll)
		}
	}
	dflt, err := defaultHandlerParam(w)
	if err != nil {
		return nil, err
	}
	sub := &subscription{conn: r.Conn, client: bc, pattern: pattern, propagation: prop, defaultOnly: dflt}
	if !b.subs.add(sub) {
		return nil, Errorf(CodeAlreadySubscribed, "already subscribed to %q", pattern)
	}
	b.addMeshSub(sub)
	r.Conn.AfterClose(func() { b.removeSub(sub) })
	b.log.Debug("subscribed", "client", id, "pattern", pattern, "policy", prop, "default", dflt)
	b.wakeClient(id)
	return SuccessResult{Success: true}, nil
}

func (b *bus) unsubscribe(_ context.Context, r *Request) (any, error) {
	if _, _, err := initializedClient(r.Conn); err != nil {
		return nil, err
	}
	w, err := busParams(MethodUnsubscribe, r.Params, busUnsubFields)
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
		return nil, Errorf(CodeSubscriptionNotFound, "subscription not found: %q", pattern)
	}
	b.removeSub(found)
	return SuccessResult{Success: true}, nil
}

// removeSub ends a subscription: on unsubscribe, or when its connection
// ends.
func (b *bus) removeSub(sub *subscription) {
	if b.subs.remove(sub) {
		b.dropMeshSub(sub)
	}
}

func (b *bus) sendMessage(ctx context.Context, r *Request) (any, error) {
	_, clientID, err := initializedClient(r.Conn)
	if err != nil {
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
		return nil, Errorf(CodeInvalidParams, "invalid params: send to a topic, not a pattern: %q", topic)
	}
	payload := w["payload"]
	if len(payload) == 0 || payload[0] != '{' {
		return nil, Errorf(CodeInvalidParams, `invalid params: sendMessage needs "payload", a JSON object`)
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
