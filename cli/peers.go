package cli

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/meshagent/meshagent/protocol"
)

func (r *runState) peersCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "peers",
		Usage: "list the agents the local node knows",
		Description: "Asks the local node (--api) for the agents it knows: those it has exchanged " +
			"hello with, those whose heartbeats reach it through the mesh, and connected peers. People " +
			"get a table (STATUS is available, busy, or stale once 3 heartbeats are missed; HEARTBEAT is " +
			"the age of the last one; ADDRS shows the first address and how many more); --json prints one " +
			"JSON array of {\"agentId\",\"publicKey\",\"name\",\"capabilities\",\"features\",\"addrs\"," +
			"\"connected\",\"lastHello\",\"latencyMs\",\"status\",\"lastHeartbeat\",\"load\",\"personaType\"}.",
		Flags: []ucli.Flag{
			apiFlag(),
			jsonFlag("print the peers as one JSON array"),
		},
		Action: r.runPeers,
	}
}

func (r *runState) runPeers(c *ucli.Context) error {
	if err := r.noArgs(c); err != nil {
		return err
	}
	if _, err := r.parseLogSettings(c); err != nil {
		return err
	}
	addr, err := r.apiClientAddr(c)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(c.Context, localTimeout)
	defer cancel()
	cl, err := dialAPI(ctx, addr)
	if err != nil {
		return r.apiError(c, addr, err)
	}
	defer cl.Close()
	peers, err := cl.Peers(ctx)
	if err != nil {
		return r.apiError(c, addr, err)
	}
	if peers == nil {
		peers = []protocol.PeerInfo{}
	}
	if c.Bool(flagJSON) {
		return writeJSONLine(r.stdout, peers)
	}
	return writePeersTable(r, peers, time.Now())
}

func writePeersTable(r *runState, peers []protocol.PeerInfo, now time.Time) error {
	if len(peers) == 0 {
		_, err := fmt.Fprintln(r.stdout, "no peers yet")
		return err
	}
	tw := tabwriter.NewWriter(r.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "AGENT ID\tNAME\tSTATUS\tHEARTBEAT\tCONNECTED\tLATENCY\tCAPABILITIES\tADDRS")
	for _, p := range peers {
		names := make([]string, len(p.Capabilities))
		for i, cp := range p.Capabilities {
			names[i] = cp.Name
		}
		latency := "-"
		if p.LatencyMS > 0 {
			latency = fmt.Sprintf("%.1fms", p.LatencyMS)
		}
		connected := "no"
		if p.Connected {
			connected = "yes"
		}
		heartbeat := "-"
		if !p.LastHeartbeat.IsZero() {
			heartbeat = max(now.Sub(p.LastHeartbeat), 0).Round(time.Second).String()
		}
		addrs := "-"
		if len(p.Addrs) > 0 {
			addrs = p.Addrs[0]
			if len(p.Addrs) > 1 {
				addrs += fmt.Sprintf("(+%d)", len(p.Addrs)-1)
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.AgentID, orDash(p.Name), orDash(string(p.Status)),
			heartbeat, connected, latency, orDash(strings.Join(names, ",")), addrs)
	}
	return tw.Flush()
}
