package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"

	ucli "github.com/urfave/cli/v2"

	"github.com/meshagent/meshagent/protocol"
)

// Exit statuses. The AgentProtocol codes each have their own status so a
// script can tell them apart without parsing text; doc.go has the table.
const (
	ExitOK          = 0
	ExitFailure     = 1
	ExitUsage       = 2
	ExitInterrupted = 130
)

// errHelpShown ends a run after help was printed on request.
var errHelpShown = errors.New("help shown")

// errNotPrinted answers a durable subscription's message that subscribe
// did not print (past --count, or after a write error): the node keeps
// it for the next run.
var errNotPrinted = errors.New("subscribe: message not printed")

// exitCodes maps each AgentProtocol error code to its exit status.
var exitCodes = map[protocol.Code]int{
	protocol.CodeInvalidMessage:         3,
	protocol.CodeInvalidSignature:       4,
	protocol.CodeUnknownAgent:           5,
	protocol.CodeCapabilityNotSupported: 6,
	protocol.CodeTimeout:                7,
	protocol.CodeRateLimited:            8,
	protocol.CodeInternalError:          9,
	protocol.CodeUnauthorized:           10,
}

// codeMessages says, for people, what each AgentProtocol code means and
// what to do about it.
var codeMessages = map[protocol.Code]string{
	protocol.CodeInvalidMessage:         "the message was rejected as malformed",
	protocol.CodeInvalidSignature:       "a signature did not verify, or the agent id does not match the signing key",
	protocol.CodeUnknownAgent:           "the agent is not known to, or not reachable from, this node; check the agent id and that both nodes are connected (`meshagent peers`)",
	protocol.CodeCapabilityNotSupported: "the agent does not offer that capability",
	protocol.CodeTimeout:                "no answer in time; retry, or raise --timeout",
	protocol.CodeRateLimited:            "the agent is rate-limiting this caller; retry later",
	protocol.CodeInternalError:          "the capability failed on the agent",
	protocol.CodeUnauthorized:           "this agent is not in the capability's authorized_requester_ids",
}

// exitStatusHelp is the exit status table shown by `meshagent --help`.
func exitStatusHelp() string {
	var b strings.Builder
	b.WriteString("Exit status: 0 success, 1 other failure, 2 usage error, 130 interrupted;")
	for _, c := range protocol.Codes {
		fmt.Fprintf(&b, " %d %s,", ExitCodeFor(c), c)
	}
	return strings.TrimSuffix(b.String(), ",") + "."
}

// ExitCodeFor returns the exit status for an AgentProtocol error code, and
// ExitFailure for a code it does not know.
func ExitCodeFor(c protocol.Code) int {
	if s, ok := exitCodes[c]; ok {
		return s
	}
	return ExitFailure
}

// ExitError is an error that carries the process exit status Main returns
// for it. Commands return it; only Main turns it into an exit.
type ExitError struct {
	// Code is the exit status (see the table in the package doc).
	Code int
	// Err says what went wrong; Main prints it on stderr after "meshagent: ".
	Err error
}

var (
	_ error          = (*ExitError)(nil)
	_ ucli.ExitCoder = (*ExitError)(nil)
)

// Error implements error.
func (e *ExitError) Error() string { return e.Err.Error() }

// Unwrap returns the underlying error.
func (e *ExitError) Unwrap() error { return e.Err }

// ExitCode implements urfave/cli's ExitCoder.
func (e *ExitError) ExitCode() int { return e.Code }

// exitErrorf returns an *ExitError with a formatted message.
func exitErrorf(code int, format string, args ...any) *ExitError {
	return &ExitError{Code: code, Err: fmt.Errorf(format, args...)}
}

// usageErrorf reports a mistake in how the command was invoked: a missing
// argument or an invalid flag value. It exits with ExitUsage.
func usageErrorf(format string, args ...any) *ExitError {
	return exitErrorf(ExitUsage, format, args...)
}

// protocolExit wraps an AgentProtocol error with a message that says what
// the code means, and the exit status of its code.
func protocolExit(op string, pe *protocol.Error) *ExitError {
	msg := codeMessages[pe.Code]
	if msg == "" {
		msg = "the request failed"
	}
	text := fmt.Sprintf("%s: %s: %s", op, pe.Code, msg)
	if pe.Message != "" {
		text += " (" + pe.Message + ")"
	}
	if avail := availableCapabilities(pe); avail != "" {
		text += "; it offers: " + avail
	}
	return &ExitError{Code: ExitCodeFor(pe.Code), Err: &codedError{text: text, pe: pe}}
}

// codedError keeps the *protocol.Error reachable with errors.As while
// printing the friendlier text.
type codedError struct {
	text string
	pe   *protocol.Error
}

func (e *codedError) Error() string { return e.text }
func (e *codedError) Unwrap() error { return e.pe }

// exitStatus picks the exit status for an error returned by the app.
func exitStatus(err error) int {
	if err == nil {
		return ExitOK
	}
	var ee *ExitError
	if errors.As(err, &ee) {
		return ee.Code
	}
	var pe *protocol.Error
	if errors.As(err, &pe) {
		return ExitCodeFor(pe.Code)
	}
	var ec ucli.ExitCoder
	if errors.As(err, &ec) {
		return ec.ExitCode()
	}
	if errors.Is(err, context.Canceled) {
		return ExitInterrupted
	}
	return ExitFailure
}
