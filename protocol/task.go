package protocol

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Built-in capabilities every node answers about its requests, as tasks
// (seed 003's request states, seed 000's in_progress): only the agent that
// sent a request may read or cancel it.
const (
	TaskStatusCapability = "task.status"
	TaskCancelCapability = "task.cancel"
	// TaskResultCapability is what a provider calls on the requester of a
	// detached task when the task ends: params TaskResult. It travels the
	// store-and-forward path of direct messages (outbox, mailboxes), so a
	// requester that was away gets it when it is back.
	TaskResultCapability = "task.result"
)

// MaxDetachMs bounds a detached task's deadline (Request.Detach): 7 days.
const MaxDetachMs = 7 * 24 * 60 * 60 * 1000

// Submitted is a provider's answer to a detached request: it accepted the
// request and recorded it as task TaskID.
type Submitted struct {
	TaskID  string    `json:"taskId"`
	AgentID string    `json:"agentId"`
	State   TaskState `json:"state"`
}

// TaskResult is the params of task.result: the task's final response,
// the provider's signed envelope in its embedded JSON form (a receipt
// meshagent verify checks), for the request RequestID.
type TaskResult struct {
	TaskID    string          `json:"taskId"`
	RequestID string          `json:"requestId"`
	Envelope  json.RawMessage `json:"envelope"`
}

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

// taskStates are the states, in the order a task may pass through them.
var taskStates = []TaskState{TaskPending, TaskValidating, TaskApproved, TaskRejected, TaskEscalated, TaskCompleted, TaskFailed, TaskCancelled}

// Check returns an error naming the states there are unless s is one of
// them (exactly: "completed" is not one).
func (s TaskState) Check() error {
	if slices.Contains(taskStates, s) {
		return nil
	}
	names := make([]string, len(taskStates))
	for i, t := range taskStates {
		names[i] = string(t)
	}
	return fmt.Errorf("%q is not a task state: one of %s", s, strings.Join(names, ", "))
}

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
// correlation id, or for a task recorded on disk (a detached submission,
// a request from a mailbox) the id the provider chose, with the
// correlation id in RequestID.
type Task struct {
	ID         string            `json:"id"`
	RequestID  string            `json:"requestId,omitempty"`
	Agent      string            `json:"agent"` // the provider
	Requester  string            `json:"requester"`
	Capability string            `json:"capability"`
	State      TaskState         `json:"state"`
	History    []TaskEvent       `json:"history"`
	Progress   []json.RawMessage `json:"progress,omitempty"`
	Result     json.RawMessage   `json:"result,omitempty"`
	Error      *Error            `json:"error,omitempty"`
	// Decision is the provider's operator's decision on the task, once it
	// was ESCALATED and then resolved (meshagent task resolve).
	Decision *TaskDecision `json:"decision,omitempty"`
}

// TaskDecision is an operator's decision on an escalated task: approved
// or rejected, with a reason (which may be empty).
type TaskDecision struct {
	Approved bool      `json:"approved"`
	Reason   string    `json:"reason,omitempty"`
	At       time.Time `json:"at"`
}

// MaxDecisionReason bounds the bytes of a decision's or an escalation's
// reason.
const MaxDecisionReason = 4096

// Seed 003's request events: the state changes of the tasks a node
// serves, as its local API reports them (mesh.taskEvents). submitted: the
// request passed its checks and was accepted; approved: its handler runs
// (again, after an operator approved it); escalated: it awaits a human's
// decision; rejected: refused by its checks, its handler or its operator.
// The last three are beyond seed 003: how the task ended.
const (
	EventRequestSubmitted = "request.submitted"
	EventRequestApproved  = "request.approved"
	EventRequestRejected  = "request.rejected"
	EventRequestEscalated = "request.escalated"
	EventRequestCompleted = "request.completed"
	EventRequestFailed    = "request.failed"
	EventRequestCancelled = "request.cancelled"
)

// TaskChange is one event of a task a node serves: its id (the one its
// requester knows), who asked for what, the state it is in, and the
// reason or note that came with the change.
type TaskChange struct {
	Event      string    `json:"event"`
	TaskID     string    `json:"taskId"`
	RequestID  string    `json:"requestId,omitempty"`
	Requester  string    `json:"requester"`
	Capability string    `json:"capability"`
	State      TaskState `json:"state"`
	Reason     string    `json:"reason,omitempty"`
	At         time.Time `json:"at"`
}

// TaskRef is the params of task.status and task.cancel.
type TaskRef struct {
	TaskID string `json:"task_id"`
}

// A2ACardCapability is the built-in capability by which a node answers
// with its own A2A Agent Card, signed by its key: params {"url": "…"}, the
// JSON-RPC URL the card names (a gateway's).
const A2ACardCapability = "a2a.card"

// SubmittedTask is what a requester's node records of a task it
// submitted (mesh.submit, meshagent call --detach): the provider's answer
// to the submission, the last state it learnt, and the final answer when
// it came back: Envelope is then the provider's signed response (or
// error) envelope in its embedded JSON form, a receipt for a response.
type SubmittedTask struct {
	TaskID     string            `json:"taskId"`
	AgentID    string            `json:"agentId"`
	RequestID  string            `json:"requestId"`
	Capability string            `json:"capability"`
	State      TaskState         `json:"state"`
	Submitted  time.Time         `json:"submitted"`
	Deadline   time.Time         `json:"deadline"`
	Envelope   json.RawMessage   `json:"envelope,omitempty"`
	Result     json.RawMessage   `json:"result,omitempty"`
	Error      *Error            `json:"error,omitempty"`
	Progress   []json.RawMessage `json:"progress,omitempty"`
	History    []TaskEvent       `json:"history,omitempty"`
}

// TaskInfo is one task a node keeps on disk, as mesh.tasks and meshagent
// task list show it: Role "served" (this node is its provider; Requester
// asked) or "submitted" (this node asked AgentID).
type TaskInfo struct {
	TaskID     string    `json:"taskId"`
	Role       string    `json:"role"`
	AgentID    string    `json:"agentId"`
	Requester  string    `json:"requester,omitempty"`
	RequestID  string    `json:"requestId"`
	Capability string    `json:"capability"`
	State      TaskState `json:"state"`
}

// TaskInfo roles.
const (
	TaskRoleServed    = "served"
	TaskRoleSubmitted = "submitted"
)
