package cli

import (
	"crypto/tls"
	"log/slog"
	"net"

	ucli "github.com/urfave/cli/v2"

	"github.com/meshagent/meshagent/daemon"
	"github.com/meshagent/meshagent/rpc"
)

// defaultWSAddr is where a relay serves its public bus and lobby.
const defaultWSAddr = "0.0.0.0:7892"

// Flags of the relay's public listener.
const (
	flagTokens  = "tokens"
	flagTLSCert = "tls-cert"
	flagTLSKey  = "tls-key"
	// flagMaxClients bounds the WebSocket connections of the relay's bus
	// server (its --ws and --api together).
	flagMaxClients = "max-clients"
)

// maxMaxClients bounds --max-clients: more connections than a process
// has file descriptors for cannot be held anyway.
const maxMaxClients = 1 << 20

// resolvePublic validates the public listener's flags.
func (r *runState) resolvePublic(c *ucli.Context) (daemon.Public, error) {
	p := daemon.Public{Addr: c.String(flagWS), MaxClients: c.Int(flagMaxClients)}
	if _, err := r.hostPort(c, flagWS, p.Addr); err != nil {
		return p, err
	}
	if p.MaxClients < 1 || p.MaxClients > maxMaxClients {
		return p, r.flagError(c, flagMaxClients, "%d is not between 1 and %d", p.MaxClients, maxMaxClients)
	}
	if p.TokensFile = expandHome(c.String(flagTokens)); p.TokensFile != "" {
		var err error
		if p.Tokens, err = rpc.LoadTokens(p.TokensFile); err != nil {
			return p, r.flagError(c, flagTokens, "%v", err)
		}
	}
	cert, key := expandHome(c.String(flagTLSCert)), expandHome(c.String(flagTLSKey))
	switch {
	case cert == "" && key == "":
	case cert == "" || key == "":
		return p, r.flagError(c, flagTLSCert, "--tls-cert and --tls-key go together")
	default:
		kp, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return p, r.flagError(c, flagTLSCert, "cannot load the certificate and key: %v", err)
		}
		p.TLS = &tls.Config{Certificates: []tls.Certificate{kp}, MinVersion: tls.VersionTLS12}
	}
	return p, nil
}

// publicWarnings names the risks of the public listener's settings.
func publicWarnings(p daemon.Public, log *slog.Logger) {
	host, _, _ := net.SplitHostPort(p.Addr)
	if isLoopback(host) {
		return
	}
	if p.Tokens == nil {
		log.Warn("the public bus and lobby are open to anyone who reaches --ws: without --tokens any client can "+
			"subscribe to and send on every topic and register in the lobby; admin methods and mesh.* stay refused",
			"ws", p.Addr)
	} else if p.TLS == nil {
		log.Warn("tokens travel in clear text: --ws is not a loopback address and has no --tls-cert; "+
			"anyone on the path can read them", "ws", p.Addr)
	}
}

func (r *runState) relayCommand() *ucli.Command {
	nc := r.nodeCommand()
	flags := []ucli.Flag{
		stringFlag(flagWS, defaultWSAddr, "`ADDR` (host:port) of the public bus (path /) and lobby (path /lobby)"),
		stringFlag(flagTokens, "", "tokens `FILE` (JSON): --ws then requires a token (?token= or Authorization: Bearer), each granting topics and methods; reloaded on change and SIGHUP"),
		stringFlag(flagTLSCert, "", "certificate `FILE` (PEM): --ws serves wss (TLS); needs --tls-key"),
		stringFlag(flagTLSKey, "", "private key `FILE` (PEM) of --tls-cert"),
		&ucli.IntFlag{Name: flagMaxClients, Value: rpc.DefaultMaxClients, EnvVars: []string{envVar(flagMaxClients)},
			Usage: "at most `N` WebSocket clients on --ws and --api together (an idle one costs at most 50 KiB); the open file limit must allow them"},
	}
	for _, f := range nc.Flags {
		if f.Names()[0] == flagAPI {
			// The relay's bus is public on --ws; a loopback API as well
			// is opt-in (and would clash with --ws's default port).
			f = stringFlag(flagAPI, "off", "`ADDR` (host:port) of a loopback local API as well, or off")
		}
		flags = append(flags, f)
	}
	return &ucli.Command{
		Name:  "relay",
		Usage: "run a node that also serves the bus and the lobby over WebSocket, and relays for others",
		Description: "Runs a node (every `node` flag applies) that also serves seed 001's message bus " +
			"(JSON-RPC 2.0 over WebSocket at path /) and seed 000's lobby (path /lobby) on --ws for " +
			"clients anywhere, bridged into the mesh, and a libp2p circuit relay (v2) so that agents " +
			"that cannot be dialled are reached through it (they start with --relay <this node's address>). " +
			"It keeps direct messages and agent:<id> bus messages for agents that name it as their mailbox (--mailbox <this node's address>) " +
			"while they are offline, within bounds per agent and in all, for up to seven days. " +
			"With --api the local API serves the same bus. On --ws an anonymous client may initialize, ping, " +
			"subscribe, unsubscribe and sendMessage; bus.history, bus.deadLetters, bus.replay, mesh.* and calls to " +
			"mesh agents through agent:<id> need a token granting them (--tokens; then every connection needs one). " +
			"--tls-cert and --tls-key serve wss. " +
			"Prints the node's start line with \"ws <addr>\" added (--json: \"ws\").",
		Flags:  flags,
		Action: r.runRelay,
	}
}

func (r *runState) runRelay(c *ucli.Context) error {
	r.relayMode = true
	return r.runNode(c)
}
