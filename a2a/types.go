package a2a

import "encoding/json"

// The A2A v1.0 data model (specification/a2a.proto, package lf.a2a.v1), in
// its JSON form: camelCase members, enums as their proto names
// ("TASK_STATE_COMPLETED", "ROLE_USER"), a oneof as the member named after
// its case ({"text": …}, {"task": …}), and members equal to their default
// left out. Only what the JSON-RPC binding carries is here; names are the
// specification's, so that moving to a v1.0 Go library is a rename. Members
// the gateway never fills are kept as json.RawMessage so that strict
// decoding accepts what a conforming client sends.

// ProtocolVersion is the A2A version this package speaks, sent and checked
// in the A2A-Version header and named by every AgentInterface.
const ProtocolVersion = "1.0"

// TransportJSONRPC is AgentInterface.ProtocolBinding for the JSON-RPC
// binding.
const TransportJSONRPC = "JSONRPC"

// TaskState is the lifecycle state of a Task.
type TaskState string

// Task states.
const (
	TaskStateUnspecified   TaskState = "TASK_STATE_UNSPECIFIED"
	TaskStateSubmitted     TaskState = "TASK_STATE_SUBMITTED"
	TaskStateWorking       TaskState = "TASK_STATE_WORKING"
	TaskStateCompleted     TaskState = "TASK_STATE_COMPLETED"
	TaskStateFailed        TaskState = "TASK_STATE_FAILED"
	TaskStateCanceled      TaskState = "TASK_STATE_CANCELED"
	TaskStateInputRequired TaskState = "TASK_STATE_INPUT_REQUIRED"
	TaskStateRejected      TaskState = "TASK_STATE_REJECTED"
	TaskStateAuthRequired  TaskState = "TASK_STATE_AUTH_REQUIRED"
)

// Terminal reports whether s is a final state (completed, failed, canceled,
// rejected).
func (s TaskState) Terminal() bool {
	switch s {
	case TaskStateCompleted, TaskStateFailed, TaskStateCanceled, TaskStateRejected:
		return true
	}
	return false
}

// Interrupted reports whether s waits for the client (input or auth
// required).
func (s TaskState) Interrupted() bool {
	return s == TaskStateInputRequired || s == TaskStateAuthRequired
}

// Role is the sender of a Message.
type Role string

// Roles.
const (
	RoleUnspecified Role = "ROLE_UNSPECIFIED"
	RoleUser        Role = "ROLE_USER"
	RoleAgent       Role = "ROLE_AGENT"
)

// AgentCard is an agent's self-describing manifest, served at
// /.well-known/agent-card.json.
type AgentCard struct {
	Name                 string               `json:"name"`
	Description          string               `json:"description"`
	SupportedInterfaces  []AgentInterface     `json:"supportedInterfaces"`
	Provider             *AgentProvider       `json:"provider,omitempty"`
	Version              string               `json:"version"`
	DocumentationURL     string               `json:"documentationUrl,omitempty"`
	Capabilities         *AgentCapabilities   `json:"capabilities,omitempty"`
	SecuritySchemes      json.RawMessage      `json:"securitySchemes,omitempty"`
	SecurityRequirements json.RawMessage      `json:"securityRequirements,omitempty"`
	DefaultInputModes    []string             `json:"defaultInputModes,omitempty"`
	DefaultOutputModes   []string             `json:"defaultOutputModes,omitempty"`
	Skills               []AgentSkill         `json:"skills,omitempty"`
	Signatures           []AgentCardSignature `json:"signatures,omitempty"`
	IconURL              string               `json:"iconUrl,omitempty"`
}

// AgentInterface is one URL at which an agent speaks one protocol binding
// of one A2A version.
type AgentInterface struct {
	URL             string `json:"url"`
	ProtocolBinding string `json:"protocolBinding"`
	Tenant          string `json:"tenant,omitempty"`
	ProtocolVersion string `json:"protocolVersion"`
}

// AgentProvider is the organisation behind an agent.
type AgentProvider struct {
	URL          string `json:"url"`
	Organization string `json:"organization"`
}

// AgentCapabilities are the optional protocol features an agent supports.
type AgentCapabilities struct {
	Streaming         *bool           `json:"streaming,omitempty"`
	PushNotifications *bool           `json:"pushNotifications,omitempty"`
	Extensions        json.RawMessage `json:"extensions,omitempty"`
	ExtendedAgentCard *bool           `json:"extendedAgentCard,omitempty"`
}

// AgentSkill is one thing an agent can do.
type AgentSkill struct {
	ID                   string          `json:"id"`
	Name                 string          `json:"name"`
	Description          string          `json:"description"`
	Tags                 []string        `json:"tags"`
	Examples             []string        `json:"examples,omitempty"`
	InputModes           []string        `json:"inputModes,omitempty"`
	OutputModes          []string        `json:"outputModes,omitempty"`
	SecurityRequirements json.RawMessage `json:"securityRequirements,omitempty"`
}

// AgentCardSignature is a JWS (RFC 7515, flattened, detached payload) over
// the JCS form of the card without its signatures.
type AgentCardSignature struct {
	Protected string          `json:"protected"`
	Signature string          `json:"signature"`
	Header    json.RawMessage `json:"header,omitempty"`
}

// Part is one piece of content: exactly one of Text, Raw, URL and Data.
type Part struct {
	Text      *string         `json:"text,omitempty"`
	Raw       *string         `json:"raw,omitempty"` // base64
	URL       *string         `json:"url,omitempty"`
	Data      json.RawMessage `json:"data,omitempty"`
	Metadata  json.RawMessage `json:"metadata,omitempty"`
	Filename  string          `json:"filename,omitempty"`
	MediaType string          `json:"mediaType,omitempty"`
}

// Message is one unit of communication between a client and an agent.
type Message struct {
	MessageID        string          `json:"messageId"`
	ContextID        string          `json:"contextId,omitempty"`
	TaskID           string          `json:"taskId,omitempty"`
	Role             Role            `json:"role"`
	Parts            []Part          `json:"parts"`
	Metadata         json.RawMessage `json:"metadata,omitempty"`
	Extensions       []string        `json:"extensions,omitempty"`
	ReferenceTaskIDs []string        `json:"referenceTaskIds,omitempty"`
}

// TaskStatus is a task's state, with an optional message, at a time.
type TaskStatus struct {
	State     TaskState `json:"state"`
	Message   *Message  `json:"message,omitempty"`
	Timestamp string    `json:"timestamp,omitempty"` // RFC 3339
}

// Artifact is an output of a task.
type Artifact struct {
	ArtifactID  string          `json:"artifactId"`
	Name        string          `json:"name,omitempty"`
	Description string          `json:"description,omitempty"`
	Parts       []Part          `json:"parts"`
	Metadata    json.RawMessage `json:"metadata,omitempty"`
	Extensions  []string        `json:"extensions,omitempty"`
}

// Task is the unit of work A2A tracks.
type Task struct {
	ID        string          `json:"id"`
	ContextID string          `json:"contextId"`
	Status    TaskStatus      `json:"status"`
	Artifacts []Artifact      `json:"artifacts,omitempty"`
	History   []Message       `json:"history,omitempty"`
	Metadata  json.RawMessage `json:"metadata,omitempty"`
}

// TaskStatusUpdateEvent tells a streaming client that a task's status
// changed.
type TaskStatusUpdateEvent struct {
	TaskID    string          `json:"taskId"`
	ContextID string          `json:"contextId"`
	Status    TaskStatus      `json:"status"`
	Metadata  json.RawMessage `json:"metadata,omitempty"`
}

// TaskArtifactUpdateEvent tells a streaming client of a new or extended
// artifact.
type TaskArtifactUpdateEvent struct {
	TaskID    string          `json:"taskId"`
	ContextID string          `json:"contextId"`
	Artifact  Artifact        `json:"artifact"`
	Append    bool            `json:"append,omitempty"`
	LastChunk bool            `json:"lastChunk,omitempty"`
	Metadata  json.RawMessage `json:"metadata,omitempty"`
}

// SendMessageConfiguration configures a SendMessage request.
type SendMessageConfiguration struct {
	AcceptedOutputModes        []string        `json:"acceptedOutputModes,omitempty"`
	TaskPushNotificationConfig json.RawMessage `json:"taskPushNotificationConfig,omitempty"`
	HistoryLength              *int32          `json:"historyLength,omitempty"`
	ReturnImmediately          bool            `json:"returnImmediately,omitempty"`
}

// SendMessageRequest is the params of SendMessage and SendStreamingMessage.
type SendMessageRequest struct {
	Tenant        string                    `json:"tenant,omitempty"`
	Message       *Message                  `json:"message"`
	Configuration *SendMessageConfiguration `json:"configuration,omitempty"`
	Metadata      json.RawMessage           `json:"metadata,omitempty"`
}

// GetTaskRequest is the params of GetTask.
type GetTaskRequest struct {
	Tenant        string `json:"tenant,omitempty"`
	ID            string `json:"id"`
	HistoryLength *int32 `json:"historyLength,omitempty"`
}

// CancelTaskRequest is the params of CancelTask.
type CancelTaskRequest struct {
	Tenant   string          `json:"tenant,omitempty"`
	ID       string          `json:"id"`
	Metadata json.RawMessage `json:"metadata,omitempty"`
}

// SubscribeToTaskRequest is the params of SubscribeToTask.
type SubscribeToTaskRequest struct {
	Tenant string `json:"tenant,omitempty"`
	ID     string `json:"id"`
}

// ListTasksRequest is the params of ListTasks.
type ListTasksRequest struct {
	Tenant               string    `json:"tenant,omitempty"`
	ContextID            string    `json:"contextId,omitempty"`
	Status               TaskState `json:"status,omitempty"`
	PageSize             *int32    `json:"pageSize,omitempty"`
	PageToken            string    `json:"pageToken,omitempty"`
	HistoryLength        *int32    `json:"historyLength,omitempty"`
	StatusTimestampAfter string    `json:"statusTimestampAfter,omitempty"`
	IncludeArtifacts     *bool     `json:"includeArtifacts,omitempty"`
}

// ListTasksResponse is the result of ListTasks.
type ListTasksResponse struct {
	Tasks         []Task `json:"tasks"`
	NextPageToken string `json:"nextPageToken"`
	PageSize      int32  `json:"pageSize"`
	TotalSize     int32  `json:"totalSize"`
}

// SendMessageResponse is the result of SendMessage: exactly one of Task and
// Message.
type SendMessageResponse struct {
	Task    *Task    `json:"task,omitempty"`
	Message *Message `json:"message,omitempty"`
}

// StreamResponse is one event of a stream: exactly one member.
type StreamResponse struct {
	Task           *Task                    `json:"task,omitempty"`
	Message        *Message                 `json:"message,omitempty"`
	StatusUpdate   *TaskStatusUpdateEvent   `json:"statusUpdate,omitempty"`
	ArtifactUpdate *TaskArtifactUpdateEvent `json:"artifactUpdate,omitempty"`
}

// JSON-RPC method names of the v1.0 binding.
const (
	MethodSendMessage          = "SendMessage"
	MethodSendStreamingMessage = "SendStreamingMessage"
	MethodGetTask              = "GetTask"
	MethodCancelTask           = "CancelTask"
	MethodSubscribeToTask      = "SubscribeToTask"
	MethodListTasks            = "ListTasks"
)

// JSON-RPC error codes: JSON-RPC 2.0's, then A2A's.
const (
	CodeParseError                   = -32700
	CodeInvalidRequest               = -32600
	CodeMethodNotFound               = -32601
	CodeInvalidParams                = -32602
	CodeInternalError                = -32603
	CodeTaskNotFound                 = -32001
	CodeTaskNotCancelable            = -32002
	CodePushNotificationNotSupported = -32003
	CodeUnsupportedOperation         = -32004
	CodeContentTypeNotSupported      = -32005
	CodeInvalidAgentResponse         = -32006
	CodeExtendedCardNotConfigured    = -32007
	CodeExtensionSupportRequired     = -32008
	CodeVersionNotSupported          = -32009
)
