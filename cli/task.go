package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/rpc"
	"github.com/meshagent/meshagent/sign"
)

// flagState filters task list by state.
const flagState = "state"

// Flags of task resolve: exactly one of approve and reject.
const (
	flagApprove = "approve"
	flagReject  = "reject"
	flagReason  = "reason"
)

// submit is `call --detach`: mesh.submit, then the task id.
func (r *runState) submit(ctx context.Context, c *ucli.Context, agent, capability string, params json.RawMessage, timeout time.Duration) error {
	deadline, err := r.positiveDuration(c, flagDeadline)
	if err != nil {
		return err
	}
	if deadline.Milliseconds() > protocol.MaxDetachMs {
		return r.flagError(c, flagDeadline, "%s is past the limit of 168h (7 days)", deadline)
	}
	cl, addr, err := r.connectAPI(ctx, c)
	if err != nil {
		return err
	}
	defer cl.Close()
	sub, err := cl.Submit(ctx, rpc.SubmitParams{AgentID: agent, Capability: capability, Params: params,
		TimeoutMS: min(timeout, rpc.MaxCallTimeout).Milliseconds(), Deadline: deadline.String()})
	if err != nil {
		var pe *protocol.Error
		if errors.As(err, &pe) {
			if c.Bool(flagJSON) {
				_ = writeJSONLine(r.stdout, pe)
			}
			return protocolExit("call", pe)
		}
		return r.apiError(c, addr, err)
	}
	if c.Bool(flagJSON) {
		return writeJSONLine(r.stdout, sub)
	}
	fmt.Fprintf(r.stdout, "task %s %s on %s (meshagent task wait %s)\n", sub.TaskID, sub.State, sub.AgentID, sub.TaskID)
	return nil
}

// taskWait is `task wait ID`.
func (r *runState) taskWait(c *ucli.Context, id string) error {
	if _, err := r.parseLogSettings(c); err != nil {
		return err
	}
	timeout, err := r.positiveDuration(c, flagTimeout)
	if err != nil {
		return err
	}
	timeout = min(timeout, rpc.MaxCallTimeout)
	ctx, cancel := context.WithTimeout(c.Context, timeout+apiGrace)
	defer cancel()
	cl, addr, err := r.connectAPI(ctx, c)
	if err != nil {
		return err
	}
	defer cl.Close()
	// Progress lines as they come: the wait is asked again every second.
	t, err := cl.FollowTask(ctx, id, timeout, time.Second, func(p json.RawMessage) { r.printProgress(c, []json.RawMessage{p}) })
	if err != nil {
		var pe *protocol.Error
		if errors.As(err, &pe) {
			if c.Bool(flagJSON) {
				_ = writeJSONLine(r.stdout, pe)
			}
			return protocolExit("task wait", pe)
		}
		return r.apiError(c, addr, err)
	}
	if c.Bool(flagJSON) {
		return writeJSONLine(r.stdout, t)
	}
	return writePrettyJSON(r.stdout, t.Result)
}

func (r *runState) printProgress(c *ucli.Context, ps []json.RawMessage) {
	for _, p := range ps {
		if c.Bool(flagJSON) {
			_ = writeJSONLine(r.stdout, map[string]json.RawMessage{"progress": p})
		} else {
			r.stderr.printf("in progress: %s\n", compactJSON(p))
		}
	}
}

// taskList is `task list`.
func (r *runState) taskList(c *ucli.Context) error {
	if _, err := r.parseLogSettings(c); err != nil {
		return err
	}
	state := protocol.TaskState(strings.ToUpper(strings.TrimSpace(c.String(flagState))))
	if state != "" {
		if err := state.Check(); err != nil {
			return r.flagError(c, flagState, "%v", err)
		}
	}
	ctx, cancel := context.WithTimeout(c.Context, localTimeout+apiGrace)
	defer cancel()
	cl, addr, err := r.connectAPI(ctx, c)
	if err != nil {
		return err
	}
	defer cl.Close()
	ts, err := cl.Tasks(ctx, state)
	if err != nil {
		var pe *protocol.Error
		if errors.As(err, &pe) {
			return protocolExit("task list", pe)
		}
		return r.apiError(c, addr, err)
	}
	if c.Bool(flagJSON) {
		return writeJSONLine(r.stdout, rpc.TasksResult{Tasks: ts})
	}
	for _, t := range ts {
		who := t.AgentID
		if t.Role == "served" {
			who = t.Requester
		}
		fmt.Fprintf(r.stdout, "%s  %-9s  %-10s  %s  %s\n", t.TaskID, t.Role, t.State, t.Capability, who)
	}
	return nil
}

func (r *runState) taskCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "task",
		Usage:     "show, wait for, list or cancel tasks through the local node",
		ArgsUsage: "status|cancel|wait TASK_ID | resolve TASK_ID --approve|--reject | list",
		Description: "A request is a task on its provider (VALIDATING, APPROVED or REJECTED, ESCALATED, then " +
			"COMPLETED, FAILED or CANCELLED; seed 003). `task status ID` prints its state, history, progress " +
			"and result; `task cancel ID` cancels it (its caller gets an error). The node remembers which " +
			"agent each of its requests went to; --agent names it otherwise. `task wait ID` follows a task " +
			"submitted with `call --detach` until it ends (--timeout), from any terminal, before or after it " +
			"finished: its progress lines, then its result, with the exit codes of `call`. `task list` lists " +
			"the tasks the node keeps on disk, submitted and served (--state S keeps one state). `task resolve ID " +
			"--approve|--reject [--reason TEXT]` is the operator's decision on a task this node serves that its " +
			"handler ESCALATED (see `task list --state ESCALATED`): the handler learns it, or it is the answer. " +
			"--json prints JSON.",
		Flags: []ucli.Flag{
			stringFlag(flagAgent, "", "the provider's agent `ID` (default: the one the node remembers)"),
			durationFlag(flagTimeout, defaultCallTimeout, "task wait: how long to wait for the task to end (at most 1h)"),
			stringFlag(flagState, "", "task list: only tasks in this `STATE` (e.g. ESCALATED)"),
			boolFlag(flagApprove, "task resolve: approve the escalated task"),
			boolFlag(flagReject, "task resolve: reject the escalated task"),
			stringFlag(flagReason, "", "task resolve: the reason of the decision (`TEXT`, at most 4096 bytes)"),
			apiFlag(),
			jsonFlag("print the task as JSON"),
		},
		Action: r.runTask,
	}
}

func (r *runState) runTask(c *ucli.Context) error {
	if len(r.positional) == 1 && r.positional[0] == "list" {
		return r.taskList(c)
	}
	if len(r.positional) == 2 && r.positional[0] == "wait" && r.positional[1] != "" {
		return r.taskWait(c, r.positional[1])
	}
	if len(r.positional) == 2 && r.positional[0] == "resolve" && r.positional[1] != "" {
		return r.taskResolve(c, r.positional[1])
	}
	if len(r.positional) != 2 || (r.positional[0] != "status" && r.positional[0] != "cancel") || r.positional[1] == "" {
		return usageErrorf("task needs `status ID`, `cancel ID`, `wait ID`, `resolve ID --approve|--reject` or `list`")
	}
	if _, err := r.parseLogSettings(c); err != nil {
		return err
	}
	agent := strings.TrimSpace(c.String(flagAgent))
	if agent != "" {
		if _, err := sign.ParseAgentID(agent); err != nil {
			return r.flagError(c, flagAgent, "%q is not an agent id (%v)", agent, err)
		}
	}
	ctx, cancel := context.WithTimeout(c.Context, localTimeout+apiGrace)
	defer cancel()
	cl, addr, err := r.connectAPI(ctx, c)
	if err != nil {
		return err
	}
	defer cl.Close()
	t, err := cl.Task(ctx, r.positional[1], agent, r.positional[0] == "cancel")
	if err != nil {
		var pe *protocol.Error
		if errors.As(err, &pe) {
			return protocolExit("task "+r.positional[0], pe)
		}
		return r.apiError(c, addr, err)
	}
	return r.printTask(c, t)
}

// taskResolve is `task resolve ID --approve|--reject [--reason TEXT]`:
// mesh.taskResolve, then the task as it stands.
func (r *runState) taskResolve(c *ucli.Context, id string) error {
	approve, reject := c.Bool(flagApprove), c.Bool(flagReject)
	if approve == reject {
		return usageErrorf("task resolve needs exactly one of --approve and --reject")
	}
	reason := c.String(flagReason)
	if len(reason) > protocol.MaxDecisionReason {
		return r.flagError(c, flagReason, "is longer than %d bytes", protocol.MaxDecisionReason)
	}
	if _, err := r.parseLogSettings(c); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(c.Context, localTimeout+apiGrace)
	defer cancel()
	cl, addr, err := r.connectAPI(ctx, c)
	if err != nil {
		return err
	}
	defer cl.Close()
	t, err := cl.TaskResolve(ctx, id, approve, reason)
	if err != nil {
		var pe *protocol.Error
		if errors.As(err, &pe) {
			return protocolExit("task resolve", pe)
		}
		return r.apiError(c, addr, err)
	}
	return r.printTask(c, t)
}

// printTask prints a task: JSON with --json, else its state, history,
// progress and answer.
func (r *runState) printTask(c *ucli.Context, t *protocol.Task) error {
	if c.Bool(flagJSON) {
		return writeJSONLine(r.stdout, t)
	}
	fmt.Fprintf(r.stdout, "task %s: %s (%s on %s, for %s)\n", t.ID, t.State, t.Capability, t.Agent, t.Requester)
	for _, e := range t.History {
		line := fmt.Sprintf("  %s %s", e.At.Format("15:04:05.000"), e.State)
		if e.Note != "" {
			line += ": " + e.Note
		}
		fmt.Fprintln(r.stdout, line)
	}
	for _, p := range t.Progress {
		fmt.Fprintf(r.stdout, "  progress %s\n", compactJSON(p))
	}
	if len(t.Result) > 0 {
		fmt.Fprintf(r.stdout, "  result %s\n", compactJSON(t.Result))
	}
	if t.Error != nil {
		fmt.Fprintf(r.stdout, "  error %s\n", t.Error.Error())
	}
	return nil
}
