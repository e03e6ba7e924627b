package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"

	ucli "github.com/urfave/cli/v2"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/sign"
)

func (r *runState) taskCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "task",
		Usage:     "show or cancel a request sent through the local node",
		ArgsUsage: "status|cancel TASK_ID",
		Description: "A request is a task on its provider (VALIDATING, APPROVED or REJECTED, ESCALATED, then " +
			"COMPLETED, FAILED or CANCELLED; seed 003). `task status ID` prints its state, history, progress " +
			"and result; `task cancel ID` cancels it (its caller gets an error). The node remembers which " +
			"agent each of its requests went to; --agent names it otherwise. --json prints the task object.",
		Flags: []ucli.Flag{
			stringFlag(flagAgent, "", "the provider's agent `ID` (default: the one the node remembers)"),
			apiFlag(),
			jsonFlag("print the task as JSON"),
		},
		Action: r.runTask,
	}
}

func (r *runState) runTask(c *ucli.Context) error {
	if len(r.positional) != 2 || (r.positional[0] != "status" && r.positional[0] != "cancel") || r.positional[1] == "" {
		return usageErrorf("task needs `status ID` or `cancel ID`")
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
