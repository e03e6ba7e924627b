package relay

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"

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

// strictParams decodes an object with known fields only (absent params
// are an empty object).
func strictParams(method string, raw json.RawMessage, v any) error {
	if len(raw) == 0 || isNull(raw) {
		return nil
	}
	if raw[0] != '{' {
		return Errorf(CodeInvalidParams, "invalid params: %s takes an object", method)
	}
	if err := decodeStrict(raw, v); err != nil {
		return Errorf(CodeInvalidParams, "invalid params: %s: %v", method, err)
	}
	return nil
}

func (b *bus) needStore(method string) error {
	if b.store == nil {
		return Errorf(CodeMethodNotFound, "method not found: %s (this server keeps no message store)", method)
	}
	return nil
}

func storeError(err error) error {
	switch {
	case errors.Is(err, store.ErrNotFound):
		return Errorf(CodeInvalidParams, "invalid params: %v", err)
	case errors.Is(err, store.ErrInvalid):
		return Errorf(CodeInvalidParams, "invalid params: %v", err)
	}
	return err
}

func (b *bus) history(ctx context.Context, r *Request) (any, error) {
	if err := b.needStore(r.Method); err != nil {
		return nil, err
	}
	var p HistoryParams
	if err := strictParams(r.Method, r.Params, &p); err != nil {
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

func (b *bus) deadLetters(ctx context.Context, r *Request) (any, error) {
	if err := b.needStore(r.Method); err != nil {
		return nil, err
	}
	var p DeadLettersParams
	if err := strictParams(r.Method, r.Params, &p); err != nil {
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

func (b *bus) replay(ctx context.Context, r *Request) (any, error) {
	if err := b.needStore(r.Method); err != nil {
		return nil, err
	}
	var p ReplayParams
	if err := strictParams(r.Method, r.Params, &p); err != nil {
		return nil, err
	}
	if p.ID == "" {
		return nil, Errorf(CodeInvalidParams, `invalid params: bus.replay needs "id"`)
	}
	m, err := b.store.Replay(ctx, p.ID)
	if err != nil {
		return nil, storeError(err)
	}
	b.wake()
	return storedMessage(m), nil
}

// decodeStrict decodes a JSON object into the struct v points to,
// refusing members that are not exactly (case included: encoding/json
// alone would take "TASKID" for "taskId") the names of v's fields, and
// members of the wrong JSON type.
func decodeStrict(raw json.RawMessage, v any) error {
	var w map[string]json.RawMessage
	if err := json.Unmarshal(raw, &w); err != nil {
		return err
	}
	known := jsonFieldNames(reflect.TypeOf(v).Elem())
	for _, k := range slices.Sorted(maps.Keys(w)) {
		if !known[k] {
			return fmt.Errorf("unknown field %q", k)
		}
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return fmt.Errorf("%q must be %s, not %s", te.Field, jsonKind(te.Type), te.Value)
		}
		return err
	}
	return nil
}

// jsonFieldNames returns the JSON member names of struct type t.
func jsonFieldNames(t reflect.Type) map[string]bool {
	out := map[string]bool{}
	for f := range t.Fields() {
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch name {
		case "-":
			continue
		case "":
			name = f.Name
		}
		out[name] = true
	}
	return out
}

// jsonKind names the JSON type a Go type decodes from.
func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		if t == reflect.TypeFor[time.Time]() {
			return "an RFC 3339 time string"
		}
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		if t == reflect.TypeFor[time.Time]() {
			return "an RFC 3339 time string"
		}
		return "an object"
	}
	return t.String()
}
