package bus

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/meshagent/meshagent/rpc"
	"github.com/meshagent/meshagent/store"
)

// HistoryParams are the params of bus.history: every field optional.
type HistoryParams struct {
	Agent          string    `json:"agent,omitempty"`
	Topic          string    `json:"topic,omitempty"`
	ConversationID string    `json:"conversationId,omitempty"`
	Since          time.Time `json:"since,omitzero"`
	Until          time.Time `json:"until,omitzero"`
	Limit          int       `json:"limit,omitempty"`
	Before         string    `json:"before,omitempty"`
}

// StoredMessage is a message as bus.history and bus.deadLetters return it.
type StoredMessage struct {
	ID             string          `json:"id"`
	Topic          string          `json:"topic"`
	From           string          `json:"from"`
	To             string          `json:"to,omitempty"`
	ConversationID string          `json:"conversationId,omitempty"`
	Payload        json.RawMessage `json:"payload"`
	Time           time.Time       `json:"time"`
	Attempts       int             `json:"attempts,omitempty"`
	LastError      string          `json:"lastError,omitempty"`
	// Reason and DeadAt are set for dead letters.
	Reason string    `json:"reason,omitempty"`
	DeadAt time.Time `json:"deadAt,omitzero"`
}

func storedMessage(m store.Message) StoredMessage {
	return StoredMessage{ID: m.ID, Topic: m.Topic, From: m.From, To: m.To, ConversationID: m.ConversationID,
		Payload: m.Payload, Time: m.Time, Attempts: m.Attempts, LastError: m.LastError}
}

// DeadLettersParams are the params of bus.deadLetters.
type DeadLettersParams struct {
	Topic string    `json:"topic,omitempty"`
	Since time.Time `json:"since,omitzero"`
	Limit int       `json:"limit,omitempty"`
}

// ReplayParams are the params of bus.replay.
type ReplayParams struct {
	ID string `json:"id"`
}

func (b *Bus) needStore(method string) error {
	if b.store == nil {
		return rpc.Errorf(rpc.CodeMethodNotFound, "method not found: %s (this server keeps no message store)", method)
	}
	return nil
}

func storeError(err error) error {
	switch {
	case errors.Is(err, store.ErrNotFound):
		return rpc.Errorf(rpc.CodeInvalidParams, "invalid params: %v", err)
	case errors.Is(err, store.ErrInvalid):
		return rpc.Errorf(rpc.CodeInvalidParams, "invalid params: %v", err)
	}
	return err
}

func (b *Bus) history(ctx context.Context, r *rpc.Request) (any, error) {
	if err := b.needStore(r.Method); err != nil {
		return nil, err
	}
	var p HistoryParams
	if err := rpc.DecodeParams(r.Method, r.Params, &p); err != nil {
		return nil, err
	}
	msgs, err := b.store.History(ctx, store.HistoryQuery{Agent: p.Agent, Topic: p.Topic, ConversationID: p.ConversationID,
		Since: p.Since, Until: p.Until, Limit: p.Limit, Before: p.Before})
	if err != nil {
		return nil, storeError(err)
	}
	out := make([]StoredMessage, 0, len(msgs))
	for _, m := range msgs {
		out = append(out, storedMessage(m))
	}
	return out, nil
}

func (b *Bus) deadLetters(ctx context.Context, r *rpc.Request) (any, error) {
	if err := b.needStore(r.Method); err != nil {
		return nil, err
	}
	var p DeadLettersParams
	if err := rpc.DecodeParams(r.Method, r.Params, &p); err != nil {
		return nil, err
	}
	dls, err := b.store.DeadLetters(ctx, store.DLQFilter{Topic: p.Topic, Since: p.Since, Limit: p.Limit})
	if err != nil {
		return nil, storeError(err)
	}
	out := make([]StoredMessage, 0, len(dls))
	for _, d := range dls {
		sm := storedMessage(d.Message)
		sm.Reason, sm.DeadAt = d.Reason, d.DeadAt
		out = append(out, sm)
	}
	return out, nil
}

func (b *Bus) replay(ctx context.Context, r *rpc.Request) (any, error) {
	if err := b.needStore(r.Method); err != nil {
		return nil, err
	}
	var p ReplayParams
	if err := rpc.DecodeParams(r.Method, r.Params, &p); err != nil {
		return nil, err
	}
	if p.ID == "" {
		return nil, rpc.Errorf(rpc.CodeInvalidParams, `invalid params: bus.replay needs "id"`)
	}
	m, err := b.store.Replay(ctx, p.ID)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, rpc.Errorf(rpc.CodeInvalidParams, "invalid params: no dead letter %q (bus.deadLetters lists them)", p.ID)
	case errors.Is(err, store.ErrExists):
		return nil, rpc.Errorf(rpc.CodeInvalidParams, "invalid params: dead letter %q is already back in the outbox", p.ID)
	case err != nil:
		return nil, storeError(err)
	}
	b.wake()
	return storedMessage(m), nil
}
