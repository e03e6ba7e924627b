package protocol

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
)

// Code is an AgentProtocol error code (seed 002), carried in the payload of
// an error envelope and mapped to exit statuses and JSON-RPC errors at the
// edges.
type Code string

// The error codes of seed 002, plus UNAUTHORIZED for seed 000's
// authorized_requester_ids check.
const (
	CodeInvalidMessage         Code = "INVALID_MESSAGE"
	CodeInvalidSignature       Code = "INVALID_SIGNATURE"
	CodeUnknownAgent           Code = "UNKNOWN_AGENT"
	CodeCapabilityNotSupported Code = "CAPABILITY_NOT_SUPPORTED"
	CodeTimeout                Code = "TIMEOUT"
	CodeRateLimited            Code = "RATE_LIMITED"
	CodeInternalError          Code = "INTERNAL_ERROR"
	CodeUnauthorized           Code = "UNAUTHORIZED"
)

// Codes lists every code in a stable order.
var Codes = []Code{
	CodeInvalidMessage, CodeInvalidSignature, CodeUnknownAgent,
	CodeCapabilityNotSupported, CodeTimeout, CodeRateLimited,
	CodeInternalError, CodeUnauthorized,
}

// Valid reports whether c is one of the known codes.
func (c Code) Valid() bool {
	for _, k := range Codes {
		if c == k {
			return true
		}
	}
	return false
}

// Error is an AgentProtocol error: the payload of an error envelope, and the
// error value that Go callers receive when a request fails remotely or
// locally. Callers branch on Code with errors.As or CodeOf.
type Error struct {
	Code          Code            `json:"code"`
	CorrelationID string          `json:"correlationId,omitempty"`
	Message       string          `json:"message"`
	Details       json.RawMessage `json:"details,omitempty"`
}

var _ error = (*Error)(nil)

// Error implements error.
func (e *Error) Error() string {
	if e.Message == "" {
		return string(e.Code)
	}
	return string(e.Code) + ": " + e.Message
}

// Is makes errors.Is(err, &Error{Code: c}) match any *Error with code c.
func (e *Error) Is(target error) bool {
	var t *Error
	if !errors.As(target, &t) {
		return false
	}
	return t.Code == e.Code && (t.Message == "" || t.Message == e.Message)
}

// Errorf returns an *Error with the given code and a formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// WithDetails returns a copy of e carrying details marshalled as JSON. A value
// that cannot be marshalled is dropped rather than losing the error itself.
func (e *Error) WithDetails(details any) *Error {
	c := *e
	if b, err := json.Marshal(details); err == nil {
		c.Details = b
	}
	return &c
}

// CodeOf returns the AgentProtocol code that describes err: the code of a
// wrapped *Error, TIMEOUT for deadline errors (a context deadline, a stream
// deadline, or any error whose Timeout method reports true, as net.Error
// and yamux's errors do), INTERNAL_ERROR otherwise. It returns "" for a nil
// error.
func CodeOf(err error) Code {
	if err == nil {
		return ""
	}
	var pe *Error
	if errors.As(err, &pe) {
		return pe.Code
	}
	if isTimeout(err) {
		return CodeTimeout
	}
	return CodeInternalError
}

func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) {
		return true
	}
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

// AsError converts any error into an *Error, keeping the code of a wrapped
// *Error and classifying the rest as CodeOf does.
func AsError(err error) *Error {
	if err == nil {
		return nil
	}
	var pe *Error
	if errors.As(err, &pe) {
		return pe
	}
	return &Error{Code: CodeOf(err), Message: err.Error()}
}

// Sentinels wrapped by *FieldError, for callers that branch on what was
// wrong with a decoded value.
var (
	// ErrSyntax: the text is not JSON.
	ErrSyntax = errors.New("not valid JSON")
	// ErrWrongType: a value of the wrong JSON type for its field.
	ErrWrongType = errors.New("wrong JSON type")
	// ErrUnknownMember: a member the type does not declare.
	ErrUnknownMember = errors.New("unknown field")
	// ErrDuplicateMember: a member given twice.
	ErrDuplicateMember = errors.New("duplicate member")
	// ErrMissingMember: a required member absent or null.
	ErrMissingMember = errors.New("missing member")
	// ErrTrailingData: more than one JSON value.
	ErrTrailingData = errors.New("trailing data after the JSON value")
	// ErrInvalidValue: a type's own UnmarshalJSON or UnmarshalText
	// refused its value.
	ErrInvalidValue = errors.New("invalid value")
)

// FieldError is what DecodeStrict returns: which member was wrong and how.
// Err is one of the sentinels above.
type FieldError struct {
	// Field is the member's path from the decoded value, such as
	// "capabilities[0].name"; empty for the value itself.
	Field string
	// Want names the JSON type an ErrWrongType needed ("a string", "an
	// integer"); Got is the type found, in encoding/json's words: "string",
	// "number", "bool", "array", "object", or "number 1.5" for a number
	// that does not fit the field.
	Want, Got string
	// Reason details ErrSyntax and ErrInvalidValue.
	Reason string
	Err    error
	// parent and member split Field for ErrUnknownMember.
	parent, member string
}

var _ error = (*FieldError)(nil)

// Error words the problem as encoding/json and the existing transcripts do
// (`unknown field "rate"`, `member "action" must be a string, not a
// number`).
func (e *FieldError) Error() string {
	switch e.Err {
	case ErrWrongType:
		if e.Field == "" {
			return "must be " + e.Want + ", not " + jsonKind(e.Got)
		}
		return fmt.Sprintf("member %q must be %s, not %s", e.Field, e.Want, jsonKind(e.Got))
	case ErrUnknownMember:
		if e.member == "" {
			return fmt.Sprintf("unknown field %q", e.Field)
		}
		if e.parent == "" {
			return fmt.Sprintf("unknown field %q", e.member)
		}
		return fmt.Sprintf("unknown field %q in %q", e.member, e.parent)
	case ErrDuplicateMember:
		return fmt.Sprintf("duplicate member %q", e.Field)
	case ErrMissingMember:
		return fmt.Sprintf("member %q is required", e.Field)
	case ErrSyntax:
		return "not valid JSON: " + e.Reason
	case ErrTrailingData:
		return ErrTrailingData.Error()
	}
	if e.Field == "" {
		return e.Reason
	}
	return fmt.Sprintf("member %q: %s", e.Field, e.Reason)
}

// Name returns the member's own name, the last step of Field ("name" for
// "capabilities[0].name"; "" for an array element or the value itself).
func (e *FieldError) Name() string {
	if e.member != "" {
		return e.member
	}
	i := strings.LastIndexAny(e.Field, ".]")
	if i >= 0 && e.Field[i] == ']' {
		return ""
	}
	return e.Field[i+1:]
}

// Unwrap returns the sentinel.
func (e *FieldError) Unwrap() error { return e.Err }
