package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/rpc"
)

// nodeControl is the operator's control of a running node, served on its
// loopback local API only (never on a relay's public listener).
type nodeControl struct {
	n     *node.Node
	level *slog.LevelVar // the level every logger of the process reads
}

var _ rpc.Control = nodeControl{}

// Addrs returns the node's listen addresses ending in /p2p/<agent id>.
func (c nodeControl) Addrs() []string {
	addrs := c.n.Addrs()
	out := make([]string, 0, len(addrs))
	for _, a := range addrs {
		out = append(out, a.String())
	}
	return out
}

// Connect dials the peer at addr, unless the node is connected to it.
func (c nodeControl) Connect(ctx context.Context, addr string) (string, bool, error) {
	m, err := ma.NewMultiaddr(strings.TrimSpace(addr))
	if err != nil {
		return "", false, fmt.Errorf("%w: %q is not a multiaddr (%v); use a form like /ip4/192.0.2.7/tcp/4001/p2p/12D3KooW…", rpc.ErrInvalidAddr, addr, err)
	}
	ai, err := peer.AddrInfoFromP2pAddr(m)
	if err != nil {
		return "", false, fmt.Errorf("%w: %q does not end in /p2p/<agent id>; append the peer's agent id", rpc.ErrInvalidAddr, addr)
	}
	if ai.ID == c.n.ID() {
		return "", false, fmt.Errorf("%w: %q is this node's own address", rpc.ErrInvalidAddr, addr)
	}
	already := c.n.Host().Network().Connectedness(ai.ID) == network.Connected
	if err := c.n.Connect(ctx, *ai); err != nil {
		return "", false, protocol.Errorf(protocol.CodeUnknownAgent, "cannot connect to %s: %v", addr, err)
	}
	return ai.ID.String(), already, nil
}

// LogLevel returns the current level's name (debug, info, warn or error).
func (c nodeControl) LogLevel() string { return strings.ToLower(c.level.Level().String()) }

// SetLogLevel changes the level of meshagent's logs (and whether libp2p's
// debug logs show, unless GOLOG_LOG_LEVEL chose).
func (c nodeControl) SetLogLevel(level string) error {
	var l slog.Level
	switch name := strings.ToLower(strings.TrimSpace(level)); name {
	case "debug", "info", "warn", "error":
		if err := l.UnmarshalText([]byte(name)); err != nil {
			return err
		}
	default:
		return fmt.Errorf("%q is not a level; use debug, info, warn or error", level)
	}
	c.level.Set(l)
	return nil
}

// Capabilities returns the capabilities the node serves itself, sorted
// by name (mesh.capabilities, mesh.status).
func (c nodeControl) Capabilities() []protocol.Capability { return c.n.Capabilities() }

// SubscribeTaskEvents passes on the events of the tasks the node serves
// (mesh.taskEvents).
func (c nodeControl) SubscribeTaskEvents(fn func(protocol.TaskChange)) (func(), error) {
	return c.n.SubscribeTaskEvents(fn)
}
