package cli

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/rpc"
	"github.com/meshagent/meshagent/sign"
)

// Flags of publish and subscribe.
const (
	flagDurable           = "durable"
	flagPayload           = "payload"
	flagIncludeAgent      = "include-agent"
	flagExcludeAgent      = "exclude-agent"
	flagPersona           = "persona"
	flagRequireCapability = "require-capability"
	flagCount             = "count"
)

// defaultPublishWait is how long publish waits for a subscriber.
const defaultPublishWait = 10 * time.Second

func (r *runState) publishCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "publish",
		Usage:     "publish a message to a mesh topic through the local node",
		ArgsUsage: "TOPIC",
		Description: "Publishes --payload (a JSON object) to TOPIC, e.g. outbound:42, for every agent in the " +
			"mesh subscribed to a matching pattern. The node looks subscribers up in the directory and waits " +
			"up to --timeout for one; if nobody subscribes to the topic's family (the part before the first ':' or '.') the " +
			"message is not sent and publish exits 1. Prints how many topic peers the message went to " +
			"(--json: {\"topic\",\"peers\"}). The filter flags attach a seed 004 broadcast filter that each " +
			"receiver applies.",
		Flags: []ucli.Flag{
			stringFlag(flagPayload, "", "the message, a JSON object: inline, @FILE, or - for stdin (required)"),
			sliceFlag(flagIncludeAgent, "deliver only to this agent `ID` (repeatable)"),
			sliceFlag(flagExcludeAgent, "never deliver to this agent `ID` (repeatable)"),
			sliceFlag(flagPersona, "deliver only to agents of this persona `TYPE` (repeatable)"),
			sliceFlag(flagRequireCapability, "deliver only to agents offering this capability `NAME` (repeatable; all required)"),
			durationFlag(flagTimeout, defaultPublishWait, "how long to wait for a subscriber"),
			apiFlag(),
			jsonFlag(`print {"topic","peers"}`),
		},
		Action: r.runPublish,
	}
}

func (r *runState) runPublish(c *ucli.Context) error {
	if len(r.positional) != 1 {
		return usageErrorf("publish needs one TOPIC, e.g. `meshagent publish outbound:42 --payload '{\"text\":\"hi\"}'`")
	}
	topic := r.positional[0]
	if topic == "" || strings.ContainsAny(topic, "*?[") {
		return usageErrorf("TOPIC %q must be a topic, not a pattern (patterns are for subscribe)", topic)
	}
	if _, err := r.parseLogSettings(c); err != nil {
		return err
	}
	payload, err := r.readJSONFlag(c, flagPayload, true)
	if err != nil {
		return err
	}
	if payload == nil {
		return r.flagError(c, flagPayload, "a payload is required: JSON inline, @FILE or - for stdin")
	}
	filter, err := r.broadcastFilter(c)
	if err != nil {
		return err
	}
	timeout, err := r.positiveDuration(c, flagTimeout)
	if err != nil {
		return err
	}
	if timeout > rpc.MaxPublishTimeout {
		return usageErrorf("--timeout %s is longer than the %s a publish may wait", timeout, rpc.MaxPublishTimeout)
	}
	ctx, cancel := context.WithTimeout(c.Context, timeout+apiGrace)
	defer cancel()
	cl, addr, err := r.connectAPI(ctx, c)
	if err != nil {
		return err
	}
	defer cl.Close()
	peers, err := cl.Publish(ctx, topic, payload, filter, timeout)
	if err != nil {
		var pe *protocol.Error
		switch {
		case errors.Is(err, protocol.ErrNoPeers):
			return exitErrorf(ExitFailure, "not published: no agent subscribes to %q within %s (is a `meshagent subscribe` running for a pattern of the %q family?)",
				topic, timeout, protocol.TopicFamily(topic))
		case errors.As(err, &pe):
			return protocolExit("publish", pe)
		}
		return r.apiError(c, addr, err)
	}
	if c.Bool(flagJSON) {
		return writeJSONLine(r.stdout, rpc.PublishResult{Topic: topic, Peers: peers})
	}
	_, err = r.stdout.Write([]byte("published to " + topic + " (" + plural(peers, "peer") + ")\n"))
	return err
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}

// broadcastFilter builds the seed 004 filter from the filter flags, or nil.
func (r *runState) broadcastFilter(c *ucli.Context) (*protocol.Filter, error) {
	var f protocol.Filter
	for _, spec := range []struct {
		flag string
		ids  bool
		dst  *[]string
	}{
		{flagIncludeAgent, true, &f.IncludeAgents},
		{flagExcludeAgent, true, &f.ExcludeAgents},
		{flagPersona, false, &f.PersonaTypes},
		{flagRequireCapability, false, &f.Capabilities},
	} {
		for _, v := range c.StringSlice(spec.flag) {
			v = strings.TrimSpace(v)
			if v == "" {
				continue
			}
			if spec.ids {
				id, err := sign.ParseAgentID(v)
				if err != nil {
					return nil, r.flagError(c, spec.flag, "%q is not an agent id (%v)", v, err)
				}
				v = id.String() // receivers compare peer IDs
			}
			*spec.dst = append(*spec.dst, v)
		}
	}
	if len(f.IncludeAgents)+len(f.ExcludeAgents)+len(f.PersonaTypes)+len(f.Capabilities) == 0 {
		return nil, nil
	}
	return &f, nil
}

func (r *runState) subscribeCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "subscribe",
		Usage:     "print the messages of mesh topics matching a pattern",
		ArgsUsage: "PATTERN",
		Description: "Subscribes through the local node to PATTERN: a topic (outbound:42), a wildcard " +
			"(outbound:*), or a prefix ending in ':', '-', '.', '/' or '_' (outbound:). The part before the " +
			"first ':' or '.' must be literal. Prints each message, from any agent in the mesh, as one JSON line " +
			"{\"topic\",\"from\",\"payload\",\"time\",\"id\"} and nothing else on stdout. Runs until SIGINT or " +
			"SIGTERM (exit 0), or until --count messages (exit 0); exits 1 if the node goes away. With --durable NAME " +
			"the node remembers what NAME has seen: subscribed again under NAME, it first prints, in order, what was " +
			"published meanwhile (fetched from history keepers such as relays), then the live messages; " +
			"each message counts as seen once its line is written, so one printed just before the process was killed " +
			"may be printed again (same \"id\") by the next run, and none is lost; exits 1 if no keeper answers.",
		Flags: []ucli.Flag{
			&ucli.IntFlag{Name: flagCount, Usage: "exit after `N` messages (0: run until interrupted)", EnvVars: []string{envVar(flagCount)}},
			stringFlag(flagDurable, "", "durable subscription `NAME`: catch up on what was missed since its last run"),
			apiFlag(),
		},
		Action: r.runSubscribe,
	}
}

func (r *runState) runSubscribe(c *ucli.Context) error {
	if len(r.positional) != 1 || r.positional[0] == "" {
		return usageErrorf("subscribe needs one PATTERN, e.g. `meshagent subscribe 'outbound:*'`")
	}
	pattern := r.positional[0]
	count := c.Int(flagCount)
	if count < 0 {
		return r.flagError(c, flagCount, "%d is negative; use 0 to run until interrupted", count)
	}
	log, err := r.parseLogSettings(c)
	if err != nil {
		return err
	}
	dialCtx, cancel := context.WithTimeout(c.Context, localTimeout)
	defer cancel()
	cl, addr, err := r.connectAPI(dialCtx, c)
	if err != nil {
		return err
	}
	defer cl.Close()

	done := make(chan struct{})
	var (
		mu       sync.Mutex
		printed  int
		writeErr error
	)
	// Messages arrive on the client's reader goroutine, in order. A
	// durable message is answered when show returns: nil once it is
	// written, an error (not processed: the node keeps it for the next
	// run) when it is not.
	show := func(m protocol.TopicMessage) error {
		mu.Lock()
		defer mu.Unlock()
		if writeErr != nil || count > 0 && printed >= count {
			return errNotPrinted
		}
		if writeErr = writeJSONLine(r.stdout, m); writeErr != nil {
			close(done)
			return writeErr
		}
		printed++
		if count > 0 && printed == count {
			close(done)
		}
		return nil
	}
	var id string
	name := c.String(flagDurable)
	if name != "" {
		// The first fetch of the catch-up runs before the answer: give
		// it the node's time.
		subCtx, cancel := context.WithTimeout(c.Context, rpc.DurableCatchUpTimeout+localTimeout)
		defer cancel()
		id, err = cl.SubscribeDurable(subCtx, pattern, name, show)
		var re *rpc.Error
		if errors.As(err, &re) && re.Code == rpc.CodeNoPeers {
			return exitErrorf(ExitFailure, "subscribe --durable %s: %s (is a relay, or a node with --keep-history, reachable?)", name, re.Message)
		}
	} else {
		id, err = cl.Subscribe(dialCtx, pattern, func(m protocol.TopicMessage) { _ = show(m) })
	}
	if err != nil {
		var pe *protocol.Error
		var re *rpc.Error
		switch {
		case errors.As(err, &re) && re.Code == rpc.CodeInvalidParams:
			msg := strings.TrimPrefix(strings.TrimPrefix(re.Message, "invalid params: "), "pubsub: ")
			// The node's reason names what it refused: the durable name
			// (pubsub.ErrDurable's words), or else the pattern.
			if why, ok := strings.CutPrefix(msg, "durable subscription refused: "); ok && name != "" {
				return r.flagError(c, flagDurable, "%s", why)
			}
			return usageErrorf("PATTERN %q: %s", pattern, msg)
		case errors.As(err, &pe):
			return protocolExit("subscribe", pe)
		}
		return r.apiError(c, addr, err)
	}
	log.newLogger(r.stderr).Info("subscribed", "pattern", pattern, "subscription", id, "api", addr)
	select {
	case <-done:
		if name != "" {
			// The answer to the last message printed is written by the
			// reader goroutine before it reads this ping's answer: the
			// node has it before the connection closes.
			pingCtx, cancel := context.WithTimeout(c.Context, localTimeout)
			_ = cl.Call(pingCtx, rpc.MethodPing, nil, nil)
			cancel()
		}
		mu.Lock()
		defer mu.Unlock()
		if writeErr != nil {
			return exitErrorf(ExitFailure, "subscribe: write output: %v", writeErr)
		}
		return nil
	case <-c.Context.Done():
		return nil // interrupted: the normal way to stop
	case <-cl.Done():
		return exitErrorf(ExitFailure, "subscribe: lost the local API at %s: %v", addr, cl.Err())
	}
}
