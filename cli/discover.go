package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	ucli "github.com/urfave/cli/v2"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/rpc"
)

const flagKeyword = "keyword"

func (r *runState) discoverCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "discover",
		Usage:     "find agents that offer a capability, through the mesh directory",
		ArgsUsage: "CAPABILITY",
		Description: "Asks the local node (--api) to search the capability directory (a private " +
			"Kademlia DHT). Each agent is printed as soon as its signed hello confirms it, with the " +
			"capability objects it signed. With --keyword the argument is a keyword rather than a " +
			"capability name. --json prints seed 000's SERVICES_AVAILABLE payload " +
			"{\"services_found\":[{\"agent_id\",\"relevant_capabilities\"}],\"discovered_for_capability\"} " +
			"once the search ends.",
		Flags: []ucli.Flag{
			boolFlag(flagKeyword, "search by keyword instead of capability name"),
			durationFlag(flagTimeout, rpc.DefaultDiscoverTimeout, "how long to search"),
			apiFlag(),
			jsonFlag("print the result as seed 000's SERVICES_AVAILABLE JSON"),
		},
		Action: r.runDiscover,
	}
}

func (r *runState) runDiscover(c *ucli.Context) error {
	if len(r.positional) != 1 {
		return usageErrorf("discover needs one CAPABILITY (or keyword with --keyword), e.g. `meshagent discover translate`")
	}
	query := r.positional[0]
	if err := (&protocol.Capability{Name: query}).Validate(); err != nil {
		return usageErrorf("CAPABILITY %q: %v", query, protocol.AsError(err).Message)
	}
	if _, err := r.parseLogSettings(c); err != nil {
		return err
	}
	timeout, err := r.positiveDuration(c, flagTimeout)
	if err != nil {
		return err
	}
	if timeout > rpc.MaxDiscoverTimeout {
		return usageErrorf("--timeout %s is longer than the %s a search may take", timeout, rpc.MaxDiscoverTimeout)
	}
	asJSON := c.Bool(flagJSON)
	ctx, cancel := context.WithTimeout(c.Context, timeout+apiGrace)
	defer cancel()
	cl, addr, err := r.connectAPI(ctx, c)
	if err != nil {
		return err
	}
	defer cl.Close()

	var mu sync.Mutex // results arrive on the client's reader goroutine
	found := 0
	onFound := func(pi protocol.PeerInfo) {
		if asJSON {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		found++
		names := make([]string, len(pi.Capabilities))
		for i, cp := range pi.Capabilities {
			names[i] = cp.Name
			if cp.Description != "" {
				names[i] += " (" + cp.Description + ")"
			}
		}
		name := ""
		if pi.Name != "" {
			name = " " + pi.Name
		}
		fmt.Fprintf(r.stdout, "%s%s: %s\n", pi.AgentID, name, strings.Join(names, ", "))
	}
	res, err := cl.Discover(ctx, query, c.Bool(flagKeyword), timeout, onFound)
	if err != nil {
		var pe *protocol.Error
		if errors.As(err, &pe) {
			return protocolExit("discover", pe)
		}
		var re *rpc.Error
		if errors.As(err, &re) && re.Code == rpc.CodeMethodNotFound {
			return exitErrorf(ExitFailure, "the node at %s has no capability directory (%s)", addr, re.Message)
		}
		return r.apiError(c, addr, err)
	}
	if asJSON {
		return writeJSONLine(r.stdout, res)
	}
	mu.Lock()
	defer mu.Unlock()
	if found == 0 {
		what := "capability"
		if c.Bool(flagKeyword) {
			what = "keyword"
		}
		r.stderr.printf("no agent found offering %s %q within %s\n", what, query, timeout)
	}
	return nil
}
