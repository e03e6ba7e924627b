package cli

import (
	"context"
	"errors"
	"strings"
	"sync"

	ucli "github.com/urfave/cli/v2"

	"github.com/meshagent/meshagent/bus"
	"github.com/meshagent/meshagent/rpc"
)

// flagGroup names a bus queue group.
const flagGroup = "group"

func (r *runState) busSubscribeCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "bus-subscribe",
		Usage:     "print the bus messages on topics matching a pattern (seed 001's subscribe)",
		ArgsUsage: "TOPIC",
		Description: "Connects to the bus at --bus (MESHAGENT_BUS_URL or BUB_BUS_URL; default the local node), " +
			"initializes as BUB_AGENT_ID (or a generated id), and subscribes to TOPIC, a seed 001 pattern " +
			"(agent:42, inbound:*). Prints each delivery as one JSON line {\"topic\",\"payload\"} and acknowledges " +
			"it as processed. With --group G it joins the queue group G on TOPIC: each message goes to one " +
			"member of the group (an extension of seed 001, as NATS's queue groups). Runs until SIGINT or " +
			"SIGTERM (exit 0); exits 1 if the bus goes away.",
		Flags: []ucli.Flag{
			stringFlag(flagGroup, "", "join the queue group `NAME` on TOPIC: each message goes to one of its members"),
			busFlag(),
		},
		Action: r.runBusSubscribe,
	}
}

func (r *runState) runBusSubscribe(c *ucli.Context) error {
	if len(r.positional) != 1 || strings.TrimSpace(r.positional[0]) == "" {
		return usageErrorf("bus-subscribe needs one TOPIC, e.g. `meshagent bus-subscribe 'inbound:*'`")
	}
	topic := r.positional[0]
	log, err := r.parseLogSettings(c)
	if err != nil {
		return err
	}
	var mu sync.Mutex // deliveries run on goroutines of their own
	deliver := bus.ProcessHandler(func(_ context.Context, p bus.ProcessParams) (bus.ProcessResult, error) {
		mu.Lock()
		defer mu.Unlock()
		if err := writeJSONLine(r.stdout, p); err != nil {
			// Not processed: the bus retries it, here or elsewhere.
			return bus.ProcessResult{}, rpc.Errorf(rpc.CodeInternalError, "write output: %v", err)
		}
		return bus.ProcessResult{Processed: true}, nil
	})
	ctx, cancel := context.WithTimeout(c.Context, busTimeout)
	defer cancel()
	cl, url, err := r.dialBus(ctx, c, rpc.WithRequestHandler(deliver))
	if err != nil {
		return err
	}
	defer cl.Close()
	params := bus.SubscribeParams{Topic: topic, Group: c.String(flagGroup)}
	if err := cl.Call(ctx, bus.MethodSubscribe, params, nil); err != nil {
		var re *rpc.Error
		if errors.As(err, &re) && (re.Code == rpc.CodeInvalidParams || re.Code == rpc.CodeInvalidRequest) {
			return usageErrorf("bus-subscribe %s: %s", topic, strings.TrimPrefix(re.Message, "invalid params: "))
		}
		return exitErrorf(ExitFailure, "bus-subscribe via %s: %v", url, err)
	}
	log.newLogger(r.stderr).Info("subscribed", "topic", topic, "group", params.Group, "bus", url)
	select {
	case <-c.Context.Done():
		return nil // interrupted: the normal way to stop
	case <-cl.Done():
		return exitErrorf(ExitFailure, "bus-subscribe: lost the bus at %s: %v", url, cl.Err())
	}
}
