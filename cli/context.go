package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	ucli "github.com/urfave/cli/v2"

	"github.com/meshagent/meshagent/protocol"
)

func (r *runState) contextCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "context",
		Usage:     "read or change a bead's shared context through the local node (seed 004)",
		ArgsUsage: "get BEAD | set BEAD JSON | patch BEAD JSON",
		Description: "A bead's shared context is a JSON object its agents share with no central store. " +
			"`context get BEAD` prints it; `context set BEAD JSON` replaces it; `context patch BEAD JSON` applies " +
			"an RFC 7396 merge patch (a member set to null is removed). JSON is an object inline, @FILE or - " +
			"to read stdin. Every member applies the changes in the order of their hybrid logical clock and " +
			"author, so all converge to the same document; a member that was away catches up from the others' " +
			"history (nodes run with --keep-history 'beadctx:*', or a relay). Only a bead's members change it: the " +
			"first change makes its author a member, with the agents --members lists; a member's --members replaces " +
			"the members; everyone else's changes are refused (UNAUTHORIZED here, ignored by every member). " +
			"Prints the document; --json prints " +
			"{\"bead_id\",\"collaborating_agents\" (the members),\"shared_context\",\"version\",\"patches\",\"refused\",\"message_history\" (the newest 20 changes)}.",
		Flags: []ucli.Flag{
			apiFlag(),
			jsonFlag("print the bead's context as JSON, with its version and members"),
			&ucli.StringFlag{Name: flagMembers, Usage: "with set or patch: the bead's members after the change, agent ids separated by commas (the author is a member of a bead it creates in any case)"},
		},
		Action: r.runContext,
	}
}

// flagMembers names the --members of context set and patch.
const flagMembers = "members"

func (r *runState) runContext(c *ucli.Context) error {
	args := r.positional
	op := ""
	if len(args) > 0 {
		op = args[0]
	}
	switch {
	case op == "get" && len(args) == 2:
	case (op == "set" || op == "patch") && len(args) == 3:
	default:
		return usageErrorf("context needs `get BEAD`, `set BEAD JSON` or `patch BEAD JSON`")
	}
	bead := args[1]
	if strings.TrimSpace(bead) == "" {
		return usageErrorf("context %s: the bead id is empty", op)
	}
	var members []string
	if c.IsSet(flagMembers) {
		if op == "get" {
			return usageErrorf("context get: --members is for set and patch")
		}
		for id := range strings.SplitSeq(c.String(flagMembers), ",") {
			if id = strings.TrimSpace(id); id == "" {
				return usageErrorf("context %s: --members has an empty agent id (give ID,ID...)", op)
			}
			members = append(members, id)
		}
	}
	var value json.RawMessage
	if op != "get" {
		var err error
		if value, err = r.readJSONArg(c, op, args[2]); err != nil {
			return err
		}
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
	var res *protocol.BeadContext
	switch op {
	case "get":
		res, err = cl.ContextGet(ctx, bead)
	case "set":
		res, err = cl.ContextSet(ctx, bead, value, members)
	default:
		res, err = cl.ContextPatch(ctx, bead, value, members)
	}
	if err != nil {
		var pe *protocol.Error
		if errors.As(err, &pe) && pe.Code == protocol.CodeUnauthorized {
			// Not the capability's message: the node says which bead.
			return &ExitError{Code: ExitCodeFor(pe.Code), Err: &codedError{text: fmt.Sprintf("context %s: %s: %s", op, pe.Code, pe.Message), pe: pe}}
		}
		if errors.As(err, &pe) {
			return protocolExit("context "+op, pe)
		}
		return r.apiError(c, addr, err)
	}
	if c.Bool(flagJSON) {
		return writeJSONLine(r.stdout, res)
	}
	var out bytes.Buffer
	if err := json.Indent(&out, res.SharedContext, "", "  "); err != nil {
		return exitErrorf(ExitFailure, "context %s: the node answered a document that is not JSON: %v", op, err)
	}
	fmt.Fprintln(r.stdout, out.String())
	return nil
}

// readJSONArg reads a JSON object given as an argument: inline, @FILE or
// - for stdin, at most maxParamsSize bytes.
func (r *runState) readJSONArg(c *ucli.Context, op, v string) (json.RawMessage, error) {
	var raw []byte
	switch {
	case v == "-":
		b, err := io.ReadAll(io.LimitReader(c.App.Reader, maxParamsSize+1))
		if err != nil {
			return nil, exitErrorf(ExitFailure, "context %s -: read stdin: %v", op, err)
		}
		raw = b
	case strings.HasPrefix(v, "@"):
		b, err := readLimited(expandHome(v[1:]), maxParamsSize)
		if err != nil {
			return nil, usageErrorf("context %s: %v", op, err)
		}
		raw = b
	default:
		raw = []byte(v)
	}
	if len(raw) > maxParamsSize {
		return nil, usageErrorf("context %s: the JSON is larger than %d bytes", op, maxParamsSize)
	}
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return nil, usageErrorf("context %s: JSON must be an object, e.g. '{\"review_status\":\"done\"}', @FILE or - to read stdin", op)
	}
	canon, err := canonicalInput(raw)
	if err != nil {
		return nil, usageErrorf("context %s: the JSON is not valid (%v)", op, err)
	}
	return canon, nil
}
