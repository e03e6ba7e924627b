package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"

	ucli "github.com/urfave/cli/v2"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/rpc"
)

func (r *runState) durableCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "durable",
		Usage:     "list or forget the durable subscription names the local node keeps",
		ArgsUsage: "list | forget NAME",
		Description: "A node keeps the position of a bounded number of durable subscription names " +
			"(`subscribe --durable NAME`; 256 for a node's store), and refuses a new name past it. " +
			"`durable list` shows what fills it: each name, its position's size, and whether a " +
			"subscription of it runs now (ACTIVE), then how many names the node keeps at most; --json " +
			"prints {\"durables\":[{\"name\",\"bytes\",\"active\"}],\"limit\"}. `durable forget NAME` " +
			"deletes a name's position, which makes room (its next subscription starts from now); a " +
			"name in use must be unsubscribed first, and a name the node does not keep is a usage error " +
			"(exit 2). --json prints {\"durable\",\"forgotten\"}.",
		Flags: []ucli.Flag{
			apiFlag(),
			jsonFlag("print the answer as JSON"),
		},
		Action: func(c *ucli.Context) error {
			return r.listOr(listOrVerb{noun: "durable", verb: "forget", arg: "NAME", argDesc: "one NAME"},
				func() error { return r.runDurableList(c) },
				func(name string) error { return r.runDurableForget(c, name) })
		},
	}
}

func (r *runState) runDurableList(c *ucli.Context) error {
	if _, err := r.parseLogSettings(c); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(c.Context, localTimeout)
	defer cancel()
	cl, addr, err := r.connectAPI(ctx, c)
	if err != nil {
		return err
	}
	defer cl.Close()
	list, err := cl.Durables(ctx)
	if err != nil {
		return r.durableError(c, "durable list", addr, rpc.MethodMeshDurables, err)
	}
	if list.Durables == nil {
		list.Durables = []protocol.DurableInfo{}
	}
	if c.Bool(flagJSON) {
		return writeJSONLine(r.stdout, list)
	}
	return writeDurablesTable(r, list)
}

func writeDurablesTable(r *runState, list protocol.DurableList) error {
	if len(list.Durables) > 0 {
		tw := tabwriter.NewWriter(r.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tBYTES\tACTIVE")
		for _, d := range list.Durables {
			active := "no"
			if d.Active {
				active = "yes"
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\n", d.Name, d.Bytes, active)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	kept := fmt.Sprintf("%d durable names kept", len(list.Durables))
	if len(list.Durables) == 1 {
		kept = "1 durable name kept"
	}
	if list.Limit > 0 {
		kept += fmt.Sprintf(" of %d", list.Limit)
	}
	_, err := fmt.Fprintln(r.stdout, kept)
	return err
}

func (r *runState) runDurableForget(c *ucli.Context, name string) error {
	if _, err := r.parseLogSettings(c); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(c.Context, localTimeout)
	defer cancel()
	cl, addr, err := r.connectAPI(ctx, c)
	if err != nil {
		return err
	}
	defer cl.Close()
	forgotten, err := cl.ForgetDurable(ctx, name)
	if err != nil {
		return r.durableError(c, "durable forget", addr, rpc.MethodMeshForgetDurable, err)
	}
	if !forgotten {
		// As for any other name or id the node does not know (dlq
		// replay ID): a usage error, which a script can tell apart.
		return usageErrorf("durable forget: the node keeps no position for %q (see `meshagent durable list`)", name)
	}
	if c.Bool(flagJSON) {
		return writeJSONLine(r.stdout, rpc.ForgetDurableResult{Durable: name, Forgotten: true})
	}
	_, err = fmt.Fprintf(r.stdout, "forgot durable %s: its next subscription starts from now\n", name)
	return err
}

// durableError words a refusal of mesh.durables or mesh.forgetDurable: a
// name in use, or a node that keeps no positions (-32602), is a usage
// error, as a refused `subscribe --durable` is.
func (r *runState) durableError(c *ucli.Context, op, addr, method string, err error) error {
	var re *rpc.Error
	if errors.As(err, &re) {
		switch re.Code {
		case rpc.CodeInvalidParams:
			return usageErrorf("%s: %s", op, strings.TrimPrefix(re.Message, "invalid params: "))
		case rpc.CodeMethodNotFound:
			return exitErrorf(ExitFailure, "%s: the server at %s does not offer %s: it is not a node's local API (a relay's public listener, or an older meshagent)", op, addr, method)
		}
	}
	if pe := rpc.ProtocolError(err); pe != nil {
		return protocolExit(op, pe)
	}
	return r.apiError(c, addr, err)
}
