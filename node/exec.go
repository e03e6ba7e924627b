package node

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/meshagent/meshagent/internal/childproc"
	"github.com/meshagent/meshagent/protocol"
)

// DefaultExecTimeout bounds one run of an exec handler unless configured.
const DefaultExecTimeout = 30 * time.Second

// maxExecOutput bounds what is read from a handler's stdout; a result must
// fit in a frame anyway.
const maxExecOutput = protocol.DefaultMaxFrameSize

// stderrTail is how much of a failing handler's stderr is reported.
const stderrTail = 2048

// ExecEscalateStatus is the exit status by which an exec handler
// escalates its request (Call.Escalate) and leaves the answer to its
// operator's decision (ErrEscalated): its stdout, trimmed, is the reason
// (at most protocol.MaxDecisionReason bytes of it).
const ExecEscalateStatus = 10

// ExecHandler returns a handler that runs argv once per request with the
// params JSON on stdin and takes its stdout, which must be one JSON value,
// as the result. A non-zero exit becomes an INTERNAL_ERROR carrying the tail
// of stderr; a run longer than timeout (DefaultExecTimeout if zero) is
// killed, with the processes it started, and reported as TIMEOUT; on Linux
// a handler dies with its node, so none outlives a node killed with
// SIGKILL (internal/childproc). The command sees the requester, the
// capability and the correlation id in MESHAGENT_REQUESTER,
// MESHAGENT_CAPABILITY and MESHAGENT_CORRELATION_ID, and the client the
// requester vouches for (Call.OnBehalfOf, empty if none) in
// MESHAGENT_ON_BEHALF_OF, and the task id its requester knows the
// request by in MESHAGENT_TASK_ID. Exiting with ExecEscalateStatus
// escalates the request.
func ExecHandler(argv []string, timeout time.Duration) Handler {
	if timeout <= 0 {
		timeout = DefaultExecTimeout
	}
	argv = append([]string(nil), argv...)
	return HandlerFunc(func(ctx context.Context, call *Call) (json.RawMessage, error) {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		childproc.Tie(cmd)
		params := call.Request.Params
		if len(params) == 0 {
			params = json.RawMessage("{}")
		}
		cmd.Stdin = bytes.NewReader(params)
		stdout := &limitedBuffer{max: maxExecOutput}
		stderr := &tailBuffer{max: stderrTail}
		cmd.Stdout, cmd.Stderr = stdout, stderr
		cmd.Env = append(os.Environ(),
			"MESHAGENT_REQUESTER="+call.From.String(),
			"MESHAGENT_CAPABILITY="+call.Request.Action,
			"MESHAGENT_CORRELATION_ID="+call.Request.CorrelationID,
			"MESHAGENT_ON_BEHALF_OF="+call.OnBehalfOf,
			"MESHAGENT_TASK_ID="+call.TaskID(),
		)
		// A handler that leaves children holding the pipes must not hang
		// the request once it has been killed.
		cmd.WaitDelay = time.Second
		err := cmd.Run()
		if ctx.Err() != nil {
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return nil, protocol.Errorf(protocol.CodeTimeout, "handler %s did not finish within %s", argv[0], timeout)
			}
			return nil, ctx.Err()
		}
		if err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) && ee.ExitCode() == ExecEscalateStatus && call.task != nil {
				reason := strings.TrimSpace(stdout.String())
				if len(reason) > protocol.MaxDecisionReason {
					reason = reason[:protocol.MaxDecisionReason]
				}
				if err := call.Escalate(reason); err != nil {
					return nil, err
				}
				return nil, ErrEscalated
			}
			if errors.As(err, &ee) {
				return nil, protocol.Errorf(protocol.CodeInternalError, "handler %s exited with status %d: %s",
					argv[0], ee.ExitCode(), strings.TrimSpace(stderr.String()))
			}
			return nil, protocol.Errorf(protocol.CodeInternalError, "handler %s: %v", argv[0], err)
		}
		if stdout.overflow {
			return nil, protocol.Errorf(protocol.CodeInternalError, "handler %s wrote more than %d bytes", argv[0], maxExecOutput)
		}
		out := bytes.TrimSpace(stdout.Bytes())
		if len(out) == 0 {
			return json.RawMessage("null"), nil
		}
		if !json.Valid(out) {
			return nil, protocol.Errorf(protocol.CodeInternalError, "handler %s wrote output that is not JSON: %.80q", argv[0], out)
		}
		return out, nil
	})
}

// limitedBuffer keeps at most max bytes and notes overflow.
type limitedBuffer struct {
	bytes.Buffer
	max      int
	overflow bool
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.Len(); len(p) > room {
		b.overflow = true
		b.Buffer.Write(p[:max(room, 0)])
		return len(p), nil
	}
	return b.Buffer.Write(p)
}

// tailBuffer keeps the last max bytes written.
type tailBuffer struct {
	buf []byte
	max int
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.buf = append(b.buf, p...)
	if len(b.buf) > b.max {
		b.buf = append(b.buf[:0], b.buf[len(b.buf)-b.max:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string { return string(b.buf) }
