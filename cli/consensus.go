package cli

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/sign"
)

// Flags of consensus.
const (
	flagAgents    = "agents"
	flagQuestion  = "question"
	flagOptions   = "options"
	flagThreshold = "threshold"
	flagDeadline  = "deadline"
	flagContext   = "context"
)

func (r *runState) consensusCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "consensus",
		Usage: "ask agents to vote on a question and decide (seed 004)",
		Description: "Asks each of --agents, through the local node, to vote on --question with one of " +
			"--options (their consensus.vote capability answers {\"vote\",\"rationale\",\"confidence\"}), " +
			"until all answer or --deadline passes. The decision is reached when one option's share of the " +
			"agents asked reaches --threshold. Prints the outcome, the tally and each vote; --json prints " +
			"{\"decision_id\",\"question\",\"outcome\",\"decision\",\"threshold\",\"tally\",\"votes\"} where each " +
			"vote carries the voter's signed response envelope (\"signed\"), which `meshagent verify` checks. " +
			"Exit status 0 when reached, 1 when not reached, 7 when timed out.",
		Flags: []ucli.Flag{
			stringFlag(flagAgents, "", "comma-separated agent `IDS` to ask (required)"),
			stringFlag(flagQuestion, "", "the `QUESTION` (required)"),
			stringFlag(flagOptions, "yes,no", "comma-separated `OPTIONS`"),
			&ucli.Float64Flag{Name: flagThreshold, Value: 0.5, Usage: "share of the agents asked an option needs, in (0, 1]", EnvVars: []string{envVar(flagThreshold)}},
			durationFlag(flagDeadline, 30*time.Second, "how long voters have"),
			stringFlag(flagContext, "", "context for the voters: a JSON object inline, @FILE or -"),
			apiFlag(),
			jsonFlag("print the result, with the signed votes, as JSON"),
		},
		Action: r.runConsensus,
	}
}

func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

func (r *runState) runConsensus(c *ucli.Context) error {
	if err := r.noArgs(c); err != nil {
		return err
	}
	if _, err := r.parseLogSettings(c); err != nil {
		return err
	}
	req := protocol.ConsensusRequest{Agents: splitList(c.String(flagAgents)), Question: strings.TrimSpace(c.String(flagQuestion)),
		Options: splitList(c.String(flagOptions)), Threshold: c.Float64(flagThreshold)}
	if len(req.Agents) == 0 {
		return r.flagError(c, flagAgents, "at least one agent id is required, e.g. --agents 12D3KooW…,12D3KooW…")
	}
	for _, a := range req.Agents {
		if _, err := sign.ParseAgentID(a); err != nil {
			return r.flagError(c, flagAgents, "%q is not an agent id (%v)", a, err)
		}
	}
	if req.Question == "" {
		return r.flagError(c, flagQuestion, "a question is required")
	}
	if len(req.Options) < 2 {
		return r.flagError(c, flagOptions, "at least two options are required, e.g. yes,no,defer")
	}
	if !(req.Threshold > 0 && req.Threshold <= 1) {
		return r.flagError(c, flagThreshold, "%v is not in (0, 1]", req.Threshold)
	}
	var err error
	if req.Deadline, err = r.positiveDuration(c, flagDeadline); err != nil {
		return err
	}
	if req.Context, err = r.readJSONFlag(c, flagContext, true); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(c.Context, req.Deadline+2*apiGrace)
	defer cancel()
	cl, addr, err := r.connectAPI(ctx, c)
	if err != nil {
		return err
	}
	defer cl.Close()
	res, err := cl.Consensus(ctx, req)
	if err != nil {
		var pe *protocol.Error
		if errors.As(err, &pe) {
			return protocolExit("consensus", pe)
		}
		return r.apiError(c, addr, err)
	}
	if c.Bool(flagJSON) {
		err = writeJSONLine(r.stdout, res)
	} else {
		err = writeConsensus(r, res)
	}
	if err != nil {
		return err
	}
	switch res.Outcome {
	case protocol.OutcomeReached:
		return nil
	case protocol.OutcomeTimedOut:
		return exitErrorf(ExitCodeFor(protocol.CodeTimeout), "consensus timed out: missing votes could have decided it")
	}
	return exitErrorf(ExitFailure, "consensus not reached")
}

func writeConsensus(r *runState, res *protocol.ConsensusResult) error {
	outcome := res.Outcome
	if res.Decision != "" {
		outcome += ": " + res.Decision
	}
	var tally []string
	for o, n := range res.Tally {
		tally = append(tally, fmt.Sprintf("%s %d", o, n))
	}
	fmt.Fprintf(r.stdout, "%s (threshold %g, decision %s)\ntally: %s\n", outcome, res.Threshold, res.DecisionID, strings.Join(slices.Sorted(slices.Values(tally)), ", "))
	tw := tabwriter.NewWriter(r.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "AGENT\tVOTE\tCONFIDENCE\tRATIONALE")
	for _, v := range res.Votes {
		if v.Error != "" {
			fmt.Fprintf(tw, "%s\t-\t-\t%s\n", v.Agent, v.Error)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%.2f\t%s\n", v.Agent, v.Vote, v.Confidence, v.Rationale)
	}
	return tw.Flush()
}
