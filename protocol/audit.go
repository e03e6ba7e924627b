package protocol

import (
	"encoding/json"
	"time"
)

// AuditRecord is one request an agent sent to another agent or served for
// one, as its audit log keeps it (seed 004: "who sent what to whom, when,
// response times and outcomes").
type AuditRecord struct {
	// Direction is CallSent or CallServed.
	Direction string `json:"direction"`
	// From is the requester, To the provider (agent ids).
	From string `json:"from"`
	To   string `json:"to"`
	// Capability is the action asked for (agent.message for a direct
	// message, agent.messages for a batch of them).
	Capability string `json:"capability"`
	// Size is the params' size in bytes.
	Size int `json:"size"`
	// Outcome is "success" or the AgentProtocol error code.
	Outcome string `json:"outcome"`
	// DurationMS is how long the request took, in milliseconds.
	DurationMS float64 `json:"duration_ms"`
	// Params are the request's params, only when the log keeps bodies.
	Params json.RawMessage `json:"params,omitempty"`
}

// AuditEntry is one audit record with its id and time.
type AuditEntry struct {
	ID string    `json:"id"`
	At time.Time `json:"at"`
	AuditRecord
}

// AuditQuery selects audit records, newest first: those whose requester or
// provider is Agent (any when empty), at or after Since and before Until
// (either zero: unbounded), at most Limit of them (the history's default
// and limit apply), older than the record Before (the last id of the
// previous page).
type AuditQuery struct {
	Agent  string    `json:"agent,omitempty"`
	Since  time.Time `json:"since,omitzero"`
	Until  time.Time `json:"until,omitzero"`
	Limit  int       `json:"limit,omitempty"`
	Before string    `json:"before,omitempty"`
}
