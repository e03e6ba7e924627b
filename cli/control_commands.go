package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/rpc"
)

func (r *runState) connectCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "connect",
		Usage:     "make the running node dial a peer now",
		ArgsUsage: "MULTIADDR",
		Description: "Asks the local node (--api) to connect to the peer at MULTIADDR, which ends in " +
			"/p2p/<agent id> (another node's start line, `meshagent id --api`, or `meshagent status` " +
			"print such addresses). Prints \"connected to <agent id>\" (--json: {\"agentId\",\"addr\"}). A peer " +
			"that cannot be reached within --timeout exits 5 (UNKNOWN_AGENT).",
		Flags: []ucli.Flag{
			apiFlag(),
			durationFlag(flagTimeout, rpc.DefaultConnectTimeout, "how long the dial may take"),
			jsonFlag(`print {"agentId","addr"} as one JSON line`),
		},
		Action: r.runConnect,
	}
}

func (r *runState) runConnect(c *ucli.Context) error {
	if len(r.positional) != 1 {
		return usageErrorf("connect takes one MULTIADDR, e.g. `meshagent connect /ip4/192.0.2.7/tcp/4001/p2p/12D3KooW…`")
	}
	timeout, err := r.positiveDuration(c, flagTimeout)
	if err != nil {
		return err
	}
	if timeout > rpc.MaxConnectTimeout {
		return r.flagError(c, flagTimeout, "%s is more than the %s the node allows", timeout, rpc.MaxConnectTimeout)
	}
	var res rpc.ConnectResult
	params := rpc.ConnectParams{Addr: r.positional[0], TimeoutMS: timeout.Milliseconds()}
	if err := r.control(c, timeout+localTimeout, rpc.MethodMeshConnect, params, &res); err != nil {
		var re *rpc.Error
		if errors.As(err, &re) && re.Code == rpc.CodeInvalidParams {
			return usageErrorf("connect: %s", strings.TrimPrefix(re.Message, "invalid params: "))
		}
		return err
	}
	if c.Bool(flagJSON) {
		return writeJSONLine(r.stdout, res)
	}
	if res.AlreadyConnected {
		_, err = fmt.Fprintf(r.stdout, "already connected to %s (%s was not dialled)\n", res.AgentID, res.Addr)
		return err
	}
	_, err = fmt.Fprintf(r.stdout, "connected to %s\n", res.AgentID)
	return err
}

func (r *runState) logLevelCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "log-level",
		Usage:     "show or change the running node's log level",
		ArgsUsage: "[LEVEL]",
		Description: "Sets the log level of the node whose local API is --api to LEVEL (debug, info, warn " +
			"or error) without a restart, and prints \"log level: <previous> -> <level>\"; without LEVEL " +
			"it prints the current one. At debug, libp2p's own debug logs show too (unless the node was " +
			"started with GOLOG_LOG_LEVEL). --json prints {\"previous\",\"level\"}. The node's --log-level " +
			"flag is this command's --log-level too, so LEVEL is an argument, not a flag.",
		Flags: []ucli.Flag{
			apiFlag(),
			jsonFlag(`print {"previous","level"} as one JSON line`),
		},
		Action: r.runLogLevel,
	}
}

func (r *runState) runLogLevel(c *ucli.Context) error {
	var params any
	switch len(r.positional) {
	case 0:
	case 1:
		level := strings.ToLower(r.positional[0])
		if _, ok := logLevels[level]; !ok {
			return usageErrorf("%q is not a level; use debug, info, warn or error", r.positional[0])
		}
		params = rpc.LogLevelParams{Level: level}
	default:
		return usageErrorf("log-level takes at most one LEVEL (debug, info, warn or error)")
	}
	var res rpc.LogLevelResult
	if err := r.control(c, localTimeout, rpc.MethodMeshLogLevel, params, &res); err != nil {
		return err
	}
	if c.Bool(flagJSON) {
		return writeJSONLine(r.stdout, res)
	}
	var err error
	if params == nil {
		_, err = fmt.Fprintf(r.stdout, "log level: %s\n", res.Level)
	} else {
		_, err = fmt.Fprintf(r.stdout, "log level: %s -> %s\n", res.Previous, res.Level)
	}
	return err
}

func (r *runState) statusCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "status",
		Usage: "summarise the running node: identity, addresses, peers, capabilities, bus",
		Description: "Asks the local node (--api) for its agent id, public key, listen addresses, log " +
			"level, the capabilities it serves, the agents it knows, and its bus (clients other than " +
			"this command, and the topic patterns they subscribe to), and prints them for people. --json prints the node's " +
			"answer as one JSON object {\"agentId\",\"publicKey\",\"addrs\",\"logLevel\",\"capabilities\"," +
			"\"peers\",\"busClients\",\"topics\",\"busSubscriptions\"} (peers as `peers --json` prints them).",
		Flags: []ucli.Flag{
			apiFlag(),
			jsonFlag("print the status as one JSON object"),
		},
		Action: r.runStatus,
	}
}

func (r *runState) runStatus(c *ucli.Context) error {
	if err := r.noArgs(c); err != nil {
		return err
	}
	var st rpc.StatusResult
	if err := r.control(c, localTimeout, rpc.MethodMeshStatus, nil, &st); err != nil {
		return err
	}
	if c.Bool(flagJSON) {
		return writeJSONLine(r.stdout, st)
	}
	connected := 0
	for _, p := range st.Peers {
		if p.Connected {
			connected++
		}
	}
	tw := tabwriter.NewWriter(r.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "agent id:\t%s\n", st.AgentID)
	fmt.Fprintf(tw, "public key:\t%s\n", st.PublicKey)
	fmt.Fprintf(tw, "addresses:\t%s\n", orDash(strings.Join(st.Addrs, "\n\t")))
	fmt.Fprintf(tw, "log level:\t%s\n", st.LogLevel)
	fmt.Fprintf(tw, "capabilities:\t%s\n", orDash(strings.Join(st.Capabilities, ", ")))
	fmt.Fprintf(tw, "peers:\t%d known, %d connected\n", len(st.Peers), connected)
	fmt.Fprintf(tw, "bus:\t%d clients, %d subscriptions\n", st.BusClients, st.BusSubscriptions)
	fmt.Fprintf(tw, "topics:\t%s\n", orDash(strings.Join(st.Topics, ", ")))
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(st.Peers) == 0 {
		return nil
	}
	fmt.Fprintln(r.stdout)
	return writePeersTable(r, st.Peers, time.Now())
}

// runIDFromAPI prints the identity and addresses of the running node at
// --api (`meshagent id --api ADDR`).
func (r *runState) runIDFromAPI(c *ucli.Context) error {
	var res rpc.IDResult
	if err := r.control(c, localTimeout, rpc.MethodMeshID, nil, &res); err != nil {
		return err
	}
	if res.Addrs == nil {
		res.Addrs = []string{}
	}
	if c.Bool(flagJSON) {
		return writeJSONLine(r.stdout, struct {
			AgentID   string   `json:"agentId"`
			PublicKey string   `json:"publicKey"`
			Addrs     []string `json:"addrs"`
		}{res.AgentID, res.PublicKey, res.Addrs})
	}
	_, err := fmt.Fprintf(r.stdout, "agent id:   %s\npublic key: %s\naddresses:  %s\n", res.AgentID, res.PublicKey,
		orDash(strings.Join(res.Addrs, "\n            ")))
	return err
}

// control calls one method of the local API at --api and decodes its
// result, turning failures into messages that say what to do.
func (r *runState) control(c *ucli.Context, timeout time.Duration, method string, params, result any) error {
	if _, err := r.parseLogSettings(c); err != nil {
		return err
	}
	addr, err := r.apiClientAddr(c)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(c.Context, timeout)
	defer cancel()
	cl, err := dialAPI(ctx, addr)
	if err != nil {
		return r.apiError(c, addr, err)
	}
	defer cl.Close()
	err = cl.Call(ctx, method, params, result)
	if err == nil {
		return nil
	}
	if pe := rpc.ProtocolError(err); pe != nil {
		return protocolExit(c.Command.Name, pe)
	}
	var re *rpc.Error
	if errors.As(err, &re) && re.Code == rpc.CodeMethodNotFound {
		return exitErrorf(ExitFailure, "the server at %s does not offer %s: it is not a node's local API (a relay's public listener, or an older meshagent)", addr, method)
	}
	if errors.As(err, &re) {
		return err
	}
	var pe *protocol.Error
	if errors.As(err, &pe) {
		return protocolExit(c.Command.Name, pe)
	}
	return r.apiError(c, addr, err)
}
