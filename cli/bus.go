package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/meshagent/meshagent/bus"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/rpc"
	"github.com/meshagent/meshagent/sign"
)

// Flags of the bus client commands.
const (
	flagBus          = "bus"
	flagTopic        = "topic"
	flagAgent        = "agent"
	flagConversation = "conversation"
	flagSince        = "since"
	flagUntil        = "until"
	flagLimit        = "limit"
)

// busTimeout bounds a bus client command.
const busTimeout = 60 * time.Second

func busFlag() ucli.Flag {
	return &ucli.StringFlag{
		Name: flagBus, Value: "ws://" + defaultAPIAddr + "/",
		EnvVars: []string{envVar(flagBus), "MESHAGENT_BUS_URL", "BUB_BUS_URL"},
		Usage:   "`URL` of the bus: a relay's ws://host:port/ or a node's local API (seed 001's agents set BUB_BUS_URL)",
	}
}

// dialBus connects to the bus and initializes as clientID, with opts
// beside the CLI's own. The URL it returns is for messages: its token is
// masked (rpc.RedactURL).
func (r *runState) dialBus(ctx context.Context, c *ucli.Context, opts ...rpc.ClientOption) (*rpc.Client, string, error) {
	url := strings.TrimSpace(c.String(flagBus))
	if url == "" {
		return nil, "", r.flagError(c, flagBus, "a bus URL is required, e.g. ws://127.0.0.1:7892/")
	}
	id := os.Getenv("BUB_AGENT_ID")
	if id == "" {
		var b [6]byte
		_, _ = rand.Read(b[:])
		id = "meshagent-cli-" + hex.EncodeToString(b[:])
	}
	opts = append([]rpc.ClientOption{rpc.WithClientID(id), rpc.WithClientInfo(rpc.ClientInfo{Name: "meshagent", Version: "cli"})}, opts...)
	cl, err := rpc.Dial(ctx, url, opts...)
	// What the CLI prints of the URL: a token in it stays off the screen.
	shown := rpc.RedactURL(url)
	if err != nil {
		switch {
		case errors.Is(err, rpc.ErrNoServer):
			return nil, shown, exitErrorf(ExitFailure, "no bus is listening at %s: start `meshagent node` or `meshagent relay`, or set --bus / MESHAGENT_BUS_URL", shown)
		case errors.Is(err, rpc.ErrUnauthorized):
			return nil, shown, exitErrorf(ExitFailure, "the bus at %s refused the token: give one its tokens file holds, as ?token= in --bus / MESHAGENT_BUS_URL", shown)
		}
		return nil, shown, exitErrorf(ExitFailure, "bus at %s: %v", shown, err)
	}
	return cl, shown, nil
}

func (r *runState) sendMessageCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "send-message",
		Usage: "send a message through the bus (seed 001's send-message) and print the acks",
		Description: "Connects to the bus at --bus (MESHAGENT_BUS_URL or BUB_BUS_URL; default the local node), " +
			"initializes as BUB_AGENT_ID (or a generated id), and sends --payload to --topic (default " +
			"BUB_DEFAULT_TOPIC). Prints the sendMessage result as one JSON line: " +
			"{\"success\",\"stopPropagation\",\"acks\":[{\"client_id\",\"processed\",\"message\"}],\"messageId\"}. " +
			"A message to agent:<id> whose agent is away is queued in the node's outbox (its ack has " +
			"\"queued\": true, and a line on stderr says so) and delivered when the agent is back, " +
			"within 7 days. The ack of a mesh agent that answered also carries its \"receipt\", its " +
			"signed answer, which `meshagent verify --provider AGENT_ID` checks. Exits 1 when no " +
			"subscriber took the message, and when the node refused it: an away agent's message " +
			"that its outbox could not queue (full, or its disk full) is refused, never acknowledged. " +
			"Without a topic, --payload may be one of seed 004's objects as " +
			"written (\"type\": agent_message, broadcast or notification): it goes to agent:<to_agent_id> or " +
			"agent.broadcast, and its from_agent_id, when given, must be this client's id.",
		Flags: []ucli.Flag{
			&ucli.StringFlag{Name: flagTopic, EnvVars: []string{envVar(flagTopic), "BUB_DEFAULT_TOPIC"}, Usage: "`TOPIC` to send to (default BUB_DEFAULT_TOPIC)"},
			stringFlag(flagPayload, "", "the message, a JSON object: inline, @FILE, or - for stdin (required)"),
			busFlag(),
		},
		Action: r.runSendMessage,
	}
}

func (r *runState) runSendMessage(c *ucli.Context) error {
	if err := r.noArgs(c); err != nil {
		return err
	}
	if _, err := r.parseLogSettings(c); err != nil {
		return err
	}
	topic := strings.TrimSpace(c.String(flagTopic))
	payload, err := r.readJSONFlag(c, flagPayload, true)
	if err != nil {
		return err
	}
	if payload == nil {
		return r.flagError(c, flagPayload, "a payload is required: JSON inline, @FILE or - for stdin")
	}
	// Seed 004's objects go as written, routed by their type, when no
	// topic is named; with a topic they are a payload like any other.
	var params any = map[string]any{"topic": topic, "payload": payload}
	if topic == "" {
		typ, ok := rpc.SeedShape(payload)
		if !ok {
			return r.flagError(c, flagTopic, "a topic is required (or set BUB_DEFAULT_TOPIC), unless the payload is one of seed 004's agent_message, broadcast or notification objects")
		}
		params, topic = payload, "(seed 004 "+typ+")"
	}
	ctx, cancel := context.WithTimeout(c.Context, busTimeout)
	defer cancel()
	cl, url, err := r.dialBus(ctx, c)
	if err != nil {
		return err
	}
	defer cl.Close()
	var res bus.SendResult
	if err := cl.Call(ctx, bus.MethodSendMessage, params, &res); err != nil {
		var re *rpc.Error
		if errors.As(err, &re) && (re.Code == rpc.CodeInvalidParams || re.Code == rpc.CodeInvalidRequest) {
			return usageErrorf("send-message: %s", re.Message)
		}
		return exitErrorf(ExitFailure, "send-message via %s: %v", url, err)
	}
	if err := writeJSONLine(r.stdout, res); err != nil {
		return err
	}
	for _, a := range res.Acks {
		if a.Queued {
			fmt.Fprintf(r.stderr, "send-message: agent %s is away; message %s is queued in the node's outbox and goes out when the agent is back\n", a.ClientID, res.MessageID)
		}
	}
	if !res.Success {
		if strings.HasPrefix(topic, "agent:") && len(res.Acks) == 1 {
			// A mesh agent that is away, whose message the node's outbox
			// refused: the ack says why.
			return exitErrorf(ExitFailure, "send-message: refused: agent %s did not take the message and it was not queued: %s", res.Acks[0].ClientID, res.Acks[0].Message)
		}
		return exitErrorf(ExitFailure, "send-message: no subscriber took the message on %q (it is in the dead-letter queue as %s)", topic, res.MessageID)
	}
	return nil
}

func (r *runState) historyCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "history",
		Usage: "query the bus's persisted message history, or (--direct) this agent's audit log",
		Description: "Asks the bus at --bus for recorded messages, newest first, filtered by agent (sender or " +
			"recipient), topic (exact, or a trailing * as a prefix), conversation and time. --since and " +
			"--until take RFC 3339 times or durations back from now (1h). History is kept 7 days. --json " +
			"prints one JSON object per message. With --direct it asks the node at --api for its audit log " +
			"instead (a node started with --audit): the requests and direct messages it sent and served, " +
			"with requester, provider, capability, size, outcome and duration, filtered by agent and time.",
		Flags: []ucli.Flag{
			stringFlag(flagAgent, "", "only messages from or to this `AGENT`"),
			stringFlag(flagTopic, "", "only this `TOPIC` (a trailing * matches a prefix)"),
			stringFlag(flagConversation, "", "only this conversation `ID`"),
			stringFlag(flagSince, "", "only messages at or after `TIME` (RFC 3339, or a duration ago such as 1h)"),
			stringFlag(flagUntil, "", "only messages before `TIME`"),
			&ucli.IntFlag{Name: flagLimit, Value: 50, Usage: "at most `N` messages", EnvVars: []string{envVar(flagLimit)}},
			busFlag(),
			boolFlag(flagDirect, "read this agent's audit log (requests and direct messages sent and served) from the node at --api"),
			apiFlag(),
			jsonFlag("print one JSON object per message"),
		},
		Action: r.runHistory,
	}
}

// timeFlag reads an RFC 3339 time or a duration back from now.
func (r *runState) timeFlag(c *ucli.Context, name string) (time.Time, error) {
	v := strings.TrimSpace(c.String(name))
	if v == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return time.Now().Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}, r.flagError(c, name, "%q is neither an RFC 3339 time (2026-11-22T10:00:00Z) nor a duration (1h)", v)
	}
	return t, nil
}

func (r *runState) runHistory(c *ucli.Context) error {
	if err := r.noArgs(c); err != nil {
		return err
	}
	if _, err := r.parseLogSettings(c); err != nil {
		return err
	}
	p := bus.HistoryParams{Agent: c.String(flagAgent), Topic: c.String(flagTopic), ConversationID: c.String(flagConversation), Limit: c.Int(flagLimit)}
	var err error
	if p.Since, err = r.timeFlag(c, flagSince); err != nil {
		return err
	}
	if p.Until, err = r.timeFlag(c, flagUntil); err != nil {
		return err
	}
	if p.Limit < 1 {
		return r.flagError(c, flagLimit, "%d is not a positive number", p.Limit)
	}
	if c.Bool(flagDirect) {
		return r.runAudit(c, p)
	}
	ctx, cancel := context.WithTimeout(c.Context, busTimeout)
	defer cancel()
	cl, url, err := r.dialBus(ctx, c)
	if err != nil {
		return err
	}
	defer cl.Close()
	var msgs []bus.StoredMessage
	if err := cl.Call(ctx, bus.MethodBusHistory, p, &msgs); err != nil {
		return busAdminError("history", url, err)
	}
	return r.writeMessages(c, msgs, false)
}

// runAudit prints the node's audit log (history --direct).
func (r *runState) runAudit(c *ucli.Context, p bus.HistoryParams) error {
	for _, name := range []string{flagTopic, flagConversation, flagBus} {
		if c.IsSet(name) {
			return usageErrorf("history --direct reads the node's audit log, which has no --%s; filter with --agent, --since and --until", name)
		}
	}
	q := protocol.AuditQuery{Agent: p.Agent, Since: p.Since, Until: p.Until, Limit: p.Limit}
	if q.Agent != "" {
		id, err := sign.ParseAgentID(q.Agent)
		if err != nil {
			return r.flagError(c, flagAgent, "%q is not an agent id", q.Agent)
		}
		q.Agent = id.String()
	}
	if err := rpc.CheckAuditQuery(&q); err != nil {
		return usageErrorf("history --direct: %v", err)
	}
	ctx, cancel := context.WithTimeout(c.Context, localTimeout)
	defer cancel()
	cl, addr, err := r.connectAPI(ctx, c)
	if err != nil {
		return err
	}
	defer cl.Close()
	es, err := cl.Audit(ctx, q)
	if err != nil {
		if pe := rpc.ProtocolError(err); pe != nil {
			return protocolExit("history --direct", pe)
		}
		return r.apiError(c, addr, err)
	}
	if c.Bool(flagJSON) {
		for _, e := range es {
			if err := writeJSONLine(r.stdout, e); err != nil {
				return err
			}
		}
		return nil
	}
	if len(es) == 0 {
		_, err := fmt.Fprintln(r.stdout, "no messages")
		return err
	}
	tw := tabwriter.NewWriter(r.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tDIRECTION\tFROM\tTO\tCAPABILITY\tSIZE\tOUTCOME\tMS")
	for _, e := range es {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%.1f\n", e.At.Format(time.RFC3339), e.Direction, e.From, e.To, e.Capability, e.Size, e.Outcome, e.DurationMS)
	}
	return tw.Flush()
}

func busAdminError(op, url string, err error) error {
	var re *rpc.Error
	if errors.As(err, &re) {
		switch re.Code {
		case rpc.CodeInvalidParams:
			return usageErrorf("%s: %s", op, strings.TrimPrefix(re.Message, "invalid params: "))
		case rpc.CodeMethodNotFound:
			return exitErrorf(ExitFailure, "%s: the bus at %s keeps no message store", op, url)
		}
	}
	return exitErrorf(ExitFailure, "%s via %s: %v", op, url, err)
}

// writeMessages prints stored messages: JSON lines, or a table.
func (r *runState) writeMessages(c *ucli.Context, msgs []bus.StoredMessage, dead bool) error {
	if c.Bool(flagJSON) {
		for _, m := range msgs {
			if err := writeJSONLine(r.stdout, m); err != nil {
				return err
			}
		}
		return nil
	}
	if len(msgs) == 0 {
		_, err := fmt.Fprintln(r.stdout, "no messages")
		return err
	}
	tw := tabwriter.NewWriter(r.stdout, 0, 4, 2, ' ', 0)
	if dead {
		fmt.Fprintln(tw, "ID\tDEAD AT\tTOPIC\tFROM\tTO\tATTEMPTS\tREASON")
	} else {
		fmt.Fprintln(tw, "ID\tTIME\tTOPIC\tFROM\tTO\tPAYLOAD")
	}
	for _, m := range msgs {
		if dead {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", m.ID, m.DeadAt.Format(time.RFC3339), m.Topic, orDash(m.From), orDash(m.To), m.Attempts, m.Reason)
		} else {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", m.ID, m.Time.Format(time.RFC3339), m.Topic, orDash(m.From), orDash(m.To), compactJSON(m.Payload))
		}
	}
	return tw.Flush()
}

func (r *runState) dlqCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "dlq",
		Usage:     "list and replay dead letters: the bus's, and the node's messages to agents",
		ArgsUsage: "list | replay ID",
		Description: "`dlq list` lists the messages given up on, oldest first, with why: the bus's (after its " +
			"retries, or with no subscriber), and the node's direct messages (topic agent.messages.dlq) and " +
			"agent:<id> messages (after their attempts, a refusal, or 7 days waiting for an agent that is " +
			"away); `dlq replay ID` moves one back to the outbox it came from with its attempts reset, and " +
			"the bus or the node delivers it again.",
		Flags: []ucli.Flag{
			stringFlag(flagTopic, "", "list: only this `TOPIC`"),
			&ucli.IntFlag{Name: flagLimit, Usage: "list: at most `N` (0: all)", EnvVars: []string{envVar(flagLimit)}},
			busFlag(),
			jsonFlag("list: print one JSON object per dead letter"),
		},
		Action: func(c *ucli.Context) error {
			return r.listOr(listOrVerb{noun: "dlq", verb: "replay", arg: "ID", argDesc: "the ID of a dead letter"},
				func() error { return r.runDLQList(c) },
				func(id string) error { return r.runDLQReplay(c, id) })
		},
	}
}

func (r *runState) runDLQList(c *ucli.Context) error {
	if _, err := r.parseLogSettings(c); err != nil {
		return err
	}
	if c.Int(flagLimit) < 0 {
		return r.flagError(c, flagLimit, "%d is negative", c.Int(flagLimit))
	}
	ctx, cancel := context.WithTimeout(c.Context, busTimeout)
	defer cancel()
	cl, url, err := r.dialBus(ctx, c)
	if err != nil {
		return err
	}
	defer cl.Close()
	var msgs []bus.StoredMessage
	if err := cl.Call(ctx, bus.MethodBusDeadLetters, bus.DeadLettersParams{Topic: c.String(flagTopic), Limit: c.Int(flagLimit)}, &msgs); err != nil {
		return busAdminError("dlq list", url, err)
	}
	return r.writeMessages(c, msgs, true)
}

func (r *runState) runDLQReplay(c *ucli.Context, id string) error {
	if _, err := r.parseLogSettings(c); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(c.Context, busTimeout)
	defer cancel()
	cl, url, err := r.dialBus(ctx, c)
	if err != nil {
		return err
	}
	defer cl.Close()
	var m bus.StoredMessage
	if err := cl.Call(ctx, bus.MethodBusReplay, bus.ReplayParams{ID: id}, &m); err != nil {
		return busAdminError("dlq replay", url, err)
	}
	_, err = fmt.Fprintf(r.stdout, "replayed %s (%s): back in the outbox\n", m.ID, m.Topic)
	return err
}
