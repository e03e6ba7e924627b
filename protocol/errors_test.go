package protocol

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"testing"
)

func TestCodeValid(t *testing.T) {
	seen := map[Code]bool{}
	for _, c := range Codes {
		if !c.Valid() {
			t.Errorf("%s.Valid() = false", c)
		}
		if seen[c] {
			t.Errorf("%s listed twice", c)
		}
		seen[c] = true
	}
	if len(Codes) != 8 {
		t.Errorf("%d codes, want the 7 of seed 002 plus UNAUTHORIZED", len(Codes))
	}
	for _, c := range []Code{"", "invalid_message", "TEAPOT", "INVALID_MESSAGE "} {
		if c.Valid() {
			t.Errorf("%q.Valid() = true", c)
		}
	}
}

func TestErrorString(t *testing.T) {
	if got := (&Error{Code: CodeTimeout}).Error(); got != "TIMEOUT" {
		t.Errorf("Error() = %q", got)
	}
	if got := Errorf(CodeRateLimited, "%d per %s", 5, "second").Error(); got != "RATE_LIMITED: 5 per second" {
		t.Errorf("Error() = %q", got)
	}
}

func TestCodeOf(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want Code
	}{
		{"nil", nil, ""},
		{"*Error", Errorf(CodeUnauthorized, "no"), CodeUnauthorized},
		{"wrapped *Error", fmt.Errorf("call: %w", Errorf(CodeCapabilityNotSupported, "no")), CodeCapabilityNotSupported},
		{"joined *Error", errors.Join(io.EOF, Errorf(CodeRateLimited, "slow down")), CodeRateLimited},
		{"*Error wins over deadline", fmt.Errorf("%w: %w", context.DeadlineExceeded, Errorf(CodeUnknownAgent, "x")), CodeUnknownAgent},
		{"deadline exceeded", context.DeadlineExceeded, CodeTimeout},
		{"wrapped deadline", fmt.Errorf("send: %w", context.DeadlineExceeded), CodeTimeout},
		{"context cause", context.Cause(expiredContext(t)), CodeTimeout},
		{"cancelled", context.Canceled, CodeInternalError},
		{"other", io.ErrUnexpectedEOF, CodeInternalError},
		{"stream deadline", fmt.Errorf("read frame: %w", os.ErrDeadlineExceeded), CodeTimeout},
		{"net timeout", &net.OpError{Op: "read", Err: timeoutError{}}, CodeTimeout},
		{"net error that is not a timeout", &net.OpError{Op: "read", Err: errors.New("reset")}, CodeInternalError},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := CodeOf(tc.err); got != tc.want {
				t.Errorf("CodeOf(%v) = %q, want %q", tc.err, got, tc.want)
			}
		})
	}
}

type timeoutError struct{}

func (timeoutError) Error() string   { return "i/o timeout" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }

func expiredContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 0)
	t.Cleanup(cancel)
	<-ctx.Done()
	return ctx
}

func TestErrorIs(t *testing.T) {
	err := fmt.Errorf("call agent: %w", Errorf(CodeTimeout, "after 5s"))
	tests := []struct {
		name   string
		target error
		want   bool
	}{
		{"same code, no message", &Error{Code: CodeTimeout}, true},
		{"same code and message", &Error{Code: CodeTimeout, Message: "after 5s"}, true},
		{"same code, other message", &Error{Code: CodeTimeout, Message: "after 6s"}, false},
		{"other code", &Error{Code: CodeInternalError}, false},
		{"not an *Error", context.DeadlineExceeded, false},
		{"wrapped target", fmt.Errorf("x: %w", &Error{Code: CodeTimeout}), true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := errors.Is(err, tc.target); got != tc.want {
				t.Errorf("errors.Is(%v, %v) = %v, want %v", err, tc.target, got, tc.want)
			}
		})
	}
	var pe *Error
	if !errors.As(err, &pe) || pe.Message != "after 5s" {
		t.Errorf("errors.As = %v", pe)
	}
}

func TestAsError(t *testing.T) {
	orig := Errorf(CodeUnauthorized, "not on the list")
	tests := []struct {
		name string
		err  error
		want *Error
	}{
		{"nil", nil, nil},
		{"*Error", orig, orig},
		{"wrapped *Error keeps the inner error", fmt.Errorf("ctx: %w", orig), orig},
		{"deadline", fmt.Errorf("dial: %w", context.DeadlineExceeded), &Error{Code: CodeTimeout, Message: "dial: context deadline exceeded"}},
		{"plain", errors.New("boom"), &Error{Code: CodeInternalError, Message: "boom"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := AsError(tc.err)
			if tc.want == nil {
				if got != nil {
					t.Fatalf("AsError(nil) = %v", got)
				}
				return
			}
			if got == nil || got.Code != tc.want.Code || got.Message != tc.want.Message {
				t.Errorf("AsError = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestWithDetails(t *testing.T) {
	base := Errorf(CodeCapabilityNotSupported, "no such capability")
	base.CorrelationID = "c"
	got := base.WithDetails(map[string]any{"requested": "x", "available": []string{"a", "b"}})
	if got == base {
		t.Fatal("WithDetails returned the receiver")
	}
	if base.Details != nil {
		t.Errorf("WithDetails modified the receiver: %s", base.Details)
	}
	if got.Code != base.Code || got.Message != base.Message || got.CorrelationID != "c" {
		t.Errorf("WithDetails = %+v", got)
	}
	var d struct {
		Requested string   `json:"requested"`
		Available []string `json:"available"`
	}
	if err := json.Unmarshal(got.Details, &d); err != nil || d.Requested != "x" || len(d.Available) != 2 {
		t.Errorf("details %s: %v", got.Details, err)
	}

	// Details that cannot be marshalled are dropped, the error is kept.
	bad := got.WithDetails(make(chan int))
	if bad.Code != base.Code || bad.Message != base.Message {
		t.Errorf("WithDetails(chan) = %+v", bad)
	}
	if string(bad.Details) != string(got.Details) {
		t.Errorf("WithDetails(chan) changed details to %s", bad.Details)
	}
	if !errors.Is(bad, &Error{Code: CodeCapabilityNotSupported}) {
		t.Error("errors.Is lost the code")
	}

	// The payload of an error envelope is canonical whatever the details.
	out, err := MarshalCanonical(got)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"code":"CAPABILITY_NOT_SUPPORTED","correlationId":"c","details":{"available":["a","b"],"requested":"x"},"message":"no such capability"}`
	if string(out) != want {
		t.Errorf("payload %s\nwant %s", out, want)
	}
}
