package protocol

import (
	"encoding/json"
	"time"
)

// Built-in capabilities every node answers about its requests, as tasks
// (seed 003's request states, seed 000's in_progress): only the agent that
// sent a request may read or cancel it.
const (
	TaskStatusCapability = "task.status"
	TaskCancelCapability = "task.cancel"
)

// TaskState is a request's state on the provider (seed 003).
type TaskState string

// Request states. A request is VALIDATING while the provider checks it,
// then REJECTED or APPROVED (its handler runs); a handler may mark it
// ESCALATED; it ends COMPLETED, FAILED (the handler's error) or CANCELLED
// (by its requester).
const (
	TaskPending    TaskState = "PENDING"
	TaskValidating TaskState = "VALIDATING"
	TaskApproved   TaskState = "APPROVED"
	TaskRejected   TaskState = "REJECTED"
	TaskEscalated  TaskState = "ESCALATED"
	TaskCompleted  TaskState = "COMPLETED"
	TaskFailed     TaskState = "FAILED"
	TaskCancelled  TaskState = "CANCELLED"
)

// Final reports whether the state ends a task.
func (s TaskState) Final() bool {
	return s == TaskRejected || s == TaskCompleted || s == TaskFailed || s == TaskCancelled
}

// TaskEvent is one state change.
type TaskEvent struct {
	State TaskState `json:"state"`
	At    time.Time `json:"at"`
	Note  string    `json:"note,omitempty"`
}

// Task is what a provider knows of one request: its id is the request's
// correlation id.
type Task struct {
	ID         string            `json:"id"`
	Agent      string            `json:"agent"` // the provider
	Requester  string            `json:"requester"`
	Capability string            `json:"capability"`
	State      TaskState         `json:"state"`
	History    []TaskEvent       `json:"history"`
	Progress   []json.RawMessage `json:"progress,omitempty"`
	Result     json.RawMessage   `json:"result,omitempty"`
	Error      *Error            `json:"error,omitempty"`
}

// TaskRef is the params of task.status and task.cancel.
type TaskRef struct {
	TaskID string `json:"task_id"`
}

// A2ACardCapability is the built-in capability by which a node answers
// with its own A2A Agent Card, signed by its key: params {"url": "…"}, the
// JSON-RPC URL the card names (a gateway's).
const A2ACardCapability = "a2a.card"
