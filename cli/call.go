package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	ucli "github.com/urfave/cli/v2"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/rpc"
	"github.com/meshagent/meshagent/sign"
)

const (
	defaultCallTimeout = 30 * time.Second
	// apiGrace is how much longer than --timeout the client waits for the
	// node, so that the node's TIMEOUT (with its message) arrives first.
	apiGrace = 5 * time.Second
	// maxParamsSize bounds --params read from a file or stdin.
	maxParamsSize = protocol.DefaultMaxFrameSize
	// flagAny is call's --any. It has no environment variable: a
	// variable left set would send every call to whoever answers.
	flagAny = "any"
	// flagDetach submits a detached task (with flagDeadline).
	flagDetach = "detach"
)

func (r *runState) callCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "call",
		Usage:     "call a capability of an agent through the local node",
		ArgsUsage: "AGENT_ID CAPABILITY | --any CAPABILITY",
		Description: "Sends a signed request through the local node's API (--api) and prints the final " +
			"result as indented JSON; in-progress results go to stderr. With --json, each response " +
			"payload is one line on stdout, the final one last, and a failure prints the error object " +
			"{\"code\",\"message\",\"details\"}. Each AgentProtocol error code has its own exit status " +
			"(see `meshagent --help`). The request's task id goes to stderr first (--json: each line's " +
			"correlationId); `meshagent task status|cancel ID` follows or cancels it. With --any and no " +
			"AGENT_ID, the node chooses an agent that offers CAPABILITY (by load, then latency) and tries " +
			"another only if the request provably did not start, or the capability is idempotent; the " +
			"agent that answered goes to stderr (--json: the final line's agentId). With --receipt, the " +
			"provider's signed final response envelope (a delivery receipt) is printed on one line after " +
			"the result (--json: the final line's \"receipt\"); --receipt-out FILE writes it to FILE instead. " +
			"`meshagent verify --provider AGENT_ID --correlation-id TASK_ID` checks it later.",
		Flags: append([]ucli.Flag{
			stringFlag(flagParams, "", "the capability's params: a JSON object, @FILE to read one from a file, or - for stdin"),
			durationFlag(flagTimeout, defaultCallTimeout, "how long to wait for the final response"),
			apiFlag(),
			jsonFlag("print response payloads as JSON lines"),
			&ucli.BoolFlag{Name: flagAny, Usage: "let the node choose the agent: any that offers CAPABILITY"},
			&ucli.BoolFlag{Name: flagDetach, Usage: "submit a detached task: return once the provider accepted and recorded it, with its task id (follow it with `meshagent task wait ID`)"},
			durationFlag(flagDeadline, 24*time.Hour, "with --detach: how long the provider's handler may run (at most 168h)"),
		}, receiptFlags()...),
		Action: r.runCall,
	}
}

func (r *runState) runCall(c *ucli.Context) error {
	anyAgent := c.Bool(flagAny)
	var agent, capability string
	switch {
	case anyAgent && len(r.positional) != 1:
		return usageErrorf("call --any needs CAPABILITY alone (the node chooses the agent), e.g. `meshagent call --any echo --params '{\"text\":\"hi\"}'`")
	case anyAgent:
		capability = r.positional[0]
	case len(r.positional) != 2:
		return usageErrorf("call needs AGENT_ID and CAPABILITY, e.g. `meshagent call 12D3KooW… echo --params '{\"text\":\"hi\"}'` (or --any CAPABILITY)")
	default:
		agent, capability = r.positional[0], r.positional[1]
		if _, err := sign.ParseAgentID(agent); err != nil {
			return usageErrorf("AGENT_ID %q is not an agent id (%v); use an id printed by `meshagent id` or `meshagent peers`", agent, err)
		}
	}
	if err := (&protocol.Capability{Name: capability}).Validate(); err != nil {
		return usageErrorf("CAPABILITY %q: %v", capability, protocol.AsError(err).Message)
	}
	if _, err := r.parseLogSettings(c); err != nil {
		return err
	}
	params, err := r.readParams(c)
	if err != nil {
		return err
	}
	timeout, err := r.positiveDuration(c, flagTimeout)
	if err != nil {
		return err
	}
	asJSON := c.Bool(flagJSON)
	ctx, cancel := context.WithTimeout(c.Context, timeout+apiGrace)
	defer cancel()
	if c.Bool(flagDetach) {
		if anyAgent {
			return usageErrorf("call --detach needs AGENT_ID: a detached task is submitted to one agent")
		}
		return r.submit(ctx, c, agent, capability, params, timeout)
	}
	cl, addr, err := r.connectAPI(ctx, c)
	if err != nil {
		return err
	}
	defer cl.Close()

	var outMu sync.Mutex // progress arrives on the client's reader goroutine
	progress := func(resp *protocol.Response) {
		outMu.Lock()
		defer outMu.Unlock()
		if asJSON {
			_ = writeJSONLine(r.stdout, resp)
			return
		}
		r.stderr.printf("in progress: %s\n", compactJSON(resp.Result))
	}
	// The request's id is its task id on the provider: say it first, so
	// that a long request can be followed or cancelled from elsewhere.
	taskID := protocol.NewID()
	if !asJSON {
		r.stderr.printf("task %s (meshagent task status %s)\n", taskID, taskID)
	}
	req := protocol.CallRequest{To: agent, Action: capability, Params: params, Timeout: timeout, CorrelationID: taskID}
	wantReceipt := c.Bool(flagReceipt) || c.String(flagReceiptOut) != ""
	var receipt json.RawMessage
	if wantReceipt {
		req.Signed = func(s json.RawMessage) { receipt = s }
	}
	var resp *protocol.Response
	if anyAgent {
		resp, agent, err = cl.MeshCallAny(ctx, req, progress)
	} else {
		resp, err = cl.MeshCall(ctx, req, progress)
	}
	outMu.Lock()
	defer outMu.Unlock()
	if err != nil {
		var pe *protocol.Error
		if errors.As(err, &pe) {
			if asJSON {
				_ = writeJSONLine(r.stdout, pe)
			}
			return protocolExit("call", pe)
		}
		return r.apiError(c, addr, err)
	}
	// The receipt goes in the JSON line unless it goes to a file; a
	// CallResult without agentId and receipt is the plain response.
	toFile := c.String(flagReceiptOut) != ""
	out := rpc.CallResult{Response: *resp}
	if anyAgent {
		out.AgentID = agent
	}
	if asJSON && !toFile {
		out.Receipt = receipt
	}
	switch {
	case asJSON:
		err = writeJSONLine(r.stdout, out)
	default:
		if anyAgent {
			r.stderr.printf("answered by %s\n", agent)
		}
		err = writePrettyJSON(r.stdout, resp.Result)
	}
	switch {
	case err != nil || !wantReceipt:
		return err
	case out.Receipt != nil:
		return nil // in the JSON line
	}
	return r.writeReceipt(c, receipt, agent, taskID)
}

// connectAPI dials the local API named by --api, turning failures into
// the CLI's errors (a missing node says how to start one).
func (r *runState) connectAPI(ctx context.Context, c *ucli.Context) (*rpc.Client, string, error) {
	addr, err := r.apiClientAddr(c)
	if err != nil {
		return nil, "", err
	}
	cl, err := dialAPI(ctx, addr)
	if err != nil {
		return nil, addr, r.apiError(c, addr, err)
	}
	return cl, addr, nil
}

// readParams reads --params: a JSON object given inline, @FILE, or - for
// stdin. An empty value sends no params.
func (r *runState) readParams(c *ucli.Context) (json.RawMessage, error) {
	return r.readJSONFlag(c, flagParams, true)
}

// readJSONFlag reads a JSON flag given inline, as @FILE, or as - for
// stdin, and returns it canonical. An empty value returns nil. With
// object, only a JSON object is accepted.
func (r *runState) readJSONFlag(c *ucli.Context, name string, object bool) (json.RawMessage, error) {
	v := c.String(name)
	var raw []byte
	switch {
	case strings.TrimSpace(v) == "":
		return nil, nil
	case v == "-":
		b, err := io.ReadAll(io.LimitReader(c.App.Reader, maxParamsSize+1))
		if err != nil {
			return nil, exitErrorf(ExitFailure, "--%s -: read stdin: %v", name, err)
		}
		raw = b
	case strings.HasPrefix(v, "@"):
		b, err := readLimited(expandHome(v[1:]), maxParamsSize)
		if err != nil {
			return nil, r.flagError(c, name, "%v", err)
		}
		raw = b
	default:
		raw = []byte(v)
	}
	if len(raw) > maxParamsSize {
		return nil, r.flagError(c, name, "the value is larger than %d bytes", maxParamsSize)
	}
	raw = bytes.TrimSpace(raw)
	if object && (len(raw) == 0 || raw[0] != '{') {
		return nil, r.flagError(c, name, "%s must be a JSON object, e.g. '{\"text\":\"hi\"}', @%s.json or - to read stdin", name, name)
	}
	canon, err := canonicalInput(raw)
	if err != nil {
		return nil, r.flagError(c, name, "not valid JSON (%v); give JSON inline, @FILE or - to read stdin", err)
	}
	return canon, nil
}

// canonicalInput is raw, JSON a user wrote, in RFC 8785 form. Where raw
// is not JSON, the error is jsontext's, which says what is wrong where.
func canonicalInput(raw []byte) ([]byte, error) {
	if err := jsonv2.Unmarshal(raw, new(jsontext.Value)); err != nil {
		return nil, errors.New(strings.TrimPrefix(err.Error(), "jsontext: "))
	}
	return sign.Canonicalize(raw)
}

func readLimited(path string, limit int) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, int64(limit)+1))
}

// apiClientAddr validates --api for the client commands.
func (r *runState) apiClientAddr(c *ucli.Context) (string, error) {
	v := strings.TrimSpace(c.String(flagAPI))
	if v == "" || strings.EqualFold(v, "off") {
		return "", r.flagError(c, flagAPI, "%s needs the local API of a running node; pass --api ADDR (the node's default is %s)", c.Command.Name, defaultAPIAddr)
	}
	if _, err := r.apiHostPort(c, v); err != nil {
		return "", err
	}
	return v, nil
}

// apiError explains a failure to use the local API.
func (r *runState) apiError(c *ucli.Context, addr string, err error) error {
	switch {
	case errors.Is(err, rpc.ErrNoServer):
		hint := "pass --api"
		if addr != defaultAPIAddr {
			hint = "check --api (from " + r.source(c, flagAPI) + ")"
		}
		return exitErrorf(ExitFailure, "no meshagent node is listening on %s: start one with `meshagent node`, or %s", addr, hint)
	case c.Context.Err() != nil:
		return context.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		return protocolExit(c.Command.Name, protocol.Errorf(protocol.CodeTimeout, "the node at %s did not answer in time", addr))
	}
	return exitErrorf(ExitFailure, "%s: local API at %s: %v", c.Command.Name, addr, err)
}

// compactJSON renders a JSON value on one line for people.
func compactJSON(raw json.RawMessage) string {
	var buf bytes.Buffer
	if len(raw) == 0 || json.Compact(&buf, raw) != nil {
		return fmt.Sprintf("%s", raw)
	}
	return buf.String()
}
