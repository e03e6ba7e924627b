package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
	ucli "github.com/urfave/cli/v2"

	"github.com/meshagent/meshagent/daemon"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/rpc"
)

const defaultShutdownTimeout = 10 * time.Second

// defaultCapsPoll is how often the node checks its settings files for
// changes. Polling the content needs no platform file-event API, and the
// files are small.
const defaultCapsPoll = 2 * time.Second

// nodeSettings is the validated configuration of `meshagent node`.
type nodeSettings struct {
	// cfg is the process as daemon.Start takes it: the data directory,
	// bootstrap peers, capabilities and policy (and their files), the
	// listeners, tokens, exchange, reload poll and kept history bounds.
	// runNode adds the logger and the node's options.
	cfg         daemon.Config
	keyPath     string
	listen      []ma.Multiaddr
	name        string
	kinds       *handlerKinds // the "mcp" handler's servers; closed when the node stops
	policy      *node.Policy
	mdns        bool
	audit       bool // keep an audit log
	auditBodies bool // with the params
	presence    node.Presence
	// staticRelays are circuit relays; mailboxes hold this agent's
	// messages while it is away; outboxTTL is how long a message waits.
	staticRelays []ma.Multiaddr
	mailboxes    []ma.Multiaddr
	outboxTTL    time.Duration
	// keepHistory are the topic patterns kept for durable subscribers,
	// within cfg.KeepAge and cfg.KeepBytes.
	keepHistory []string
	// limits carry --requester-rate and --requester-burst.
	limits node.Limits
	// relay mode (meshagent relay): a public bus and lobby, and a circuit
	// relay service.
	relayMode       bool
	shutdownTimeout time.Duration
	json            bool
	log             logSettings
}

// nodeStarted is the line `meshagent node --json` prints once running.
type nodeStarted struct {
	AgentID   string   `json:"agentId"`
	PublicKey string   `json:"publicKey"`
	Addrs     []string `json:"addrs"`
	API       string   `json:"api"`
	// WS is the relay's public bus and lobby address (relay only).
	WS string `json:"ws,omitempty"`
}

func (r *runState) nodeCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "node",
		Usage: "run an agent node until SIGINT or SIGTERM",
		Description: "Runs a libp2p node whose identity is the agent id, offers the capabilities in " +
			"--capabilities, and serves the local API (JSON-RPC 2.0 over WebSocket) that `call` and " +
			"`peers` use. Once running it prints one line on stdout: \"node <agent id> addrs <addr,...> " +
			"api <addr|off>\", or with --json {\"agentId\",\"publicKey\",\"addrs\",\"api\"}. The node " +
			"reloads --capabilities when the file changes (checked every --capabilities-poll) or on SIGHUP, and advertises " +
			"the new set. Every --heartbeat it publishes a signed status heartbeat (status, load, " +
			"capability digest) that `peers` shows on every node.",
		Flags: []ucli.Flag{
			keyFlag(),
			sliceFlag(flagListen, "`MULTIADDR` to listen on, repeatable (default: TCP and QUIC on all IPv4 interfaces, port 4001, or random ports with a warning when 4001 is taken)"),
			sliceFlag(flagBootstrap, "peer `MULTIADDR` ending in /p2p/<agent id> to connect to at start, repeatable"),
			stringFlag(flagName, "", "display `NAME` announced to other agents"),
			stringFlag(flagCapabilities, "", "capabilities `FILE`: a JSON array of capability objects, each with a \"handler\""),
			apiFlag(),
			boolFlag(flagAPIPublic, "allow --api on a non-loopback address (anyone who reaches it can act as this agent)"),
			stringFlag(flagMetrics, "", "`ADDR` (host:port) serving only /metrics, /healthz and /readyz, for scraping from elsewhere while --api stays on loopback"),
			boolFlag(flagNoMDNS, "do not discover or announce agents on the local network with mDNS"),
			sliceFlag(flagRelay, "circuit relay `MULTIADDR` (ending in /p2p/<id>) to reserve a slot on, so that peers that cannot dial this node reach it through the relay; repeatable"),
			stringFlag(flagPolicy, "", "requester policy `FILE` (JSON): per agent or group a rate_limit, max_request_size and allowed_capabilities"),
			durationFlag(flagCapsPoll, defaultCapsPoll, "how often to check --capabilities and --policy for changes; 0 reloads only on SIGHUP"),
			durationFlag(flagHeartbeat, node.DefaultPresence().Interval, "interval between status heartbeats, stretched in proportion in a mesh of more than 10 agents; 0 sends none (peers see this agent stale after 3 missed, gone after 10)"),
			stringFlag(flagPersonaType, "", "persona `TYPE` announced in heartbeats and matched by broadcast filters (e.g. qa-engineer)"),
			sliceFlag(flagMailbox, "mailbox relay `MULTIADDR` (ending in /p2p/<id>; a `meshagent relay`) that holds direct messages and agent:<id> bus messages for this agent while it is offline: announced to other agents, which leave messages there when they cannot reach it, and read when this node connects to it; repeatable, at most 4"),
			boolFlag(flagAudit, "keep an audit log of every request and message this agent sends to or serves for another (who, to whom, when, capability, size, outcome, duration), 7 days in the store; read it with history --direct or GET /api/v1/messages"),
			boolFlag(flagAuditBodies, "with --audit (which it implies), keep the params of each request too"),
			durationFlag(flagOutboxTTL, node.DefaultMessageTTL, "how long a direct message or agent:<id> bus message to an agent that is away waits in this node's outbox, tried again, before it becomes a dead letter"),
			boolFlag(flagHoldMessages, "refuse direct messages (CAPABILITY_NOT_SUPPORTED, which the sender's node queues and retries) until a local API client takes them with mesh.onMessage: for an agent that serves through the local API, so nothing sent while it is away is lost"),
			durationFlag(flagShutdownTimeout, defaultShutdownTimeout, "how long a clean shutdown may take"),
			sliceFlag(flagKeepHistory, "keep the messages of topics matching `PATTERN` for others' durable subscriptions (repeatable; * keeps every family a connected peer subscribes to; a relay keeps * unless given off)"),
			durationFlag(flagKeepAge, daemon.DefaultConfig().KeepAge, "how long kept topic messages are kept"),
			stringFlag(flagKeepBytes, strconv.FormatInt(daemon.DefaultConfig().KeepBytes, 10), "bound on the kept topic messages, in `BYTES` (the oldest go first)"),
			stringFlag(flagExchange, "", "seed 002 file exchange `DIR`: signed envelopes written there as {from}-{to}-{timestamp}-{id}.json to this agent are handled as POST /agentprotocol is, each once, and answered in the same directory"),
			stringFlag(flagAgentTokens, "", "seed 003 agents' tokens `FILE` (JSON, the format of a relay's --tokens; each token's name is an agent_id): turns on /agent/request, /agent/status/{id}, /agent/context and /agent/capabilities on the local API, each needing Authorization: Bearer <token>; reloaded on change and SIGHUP"),
			&ucli.IntFlag{Name: flagAgentRate, Value: daemon.DefaultConfig().AgentRate, EnvVars: []string{envVar(flagAgentRate)},
				Usage: "seed 003 rate limit: `N` POST /agent/request and /agent/context per minute per agent token (429 with Retry-After past it)"},
			stringFlag(flagRequesterRate, strconv.Itoa(node.DefaultRequestsPerSecond), "requests (and direct messages) a `N` second each requesting agent may send this node before RATE_LIMITED; 0 turns the limit off"),
			stringFlag(flagRequesterBurst, strconv.Itoa(node.DefaultRequestBurst), "size `M` of each requester's token bucket: how far above --requester-rate a burst may go"),
			jsonFlag(`print the start line as {"agentId","publicKey","addrs","api"}`),
		},
		Action: r.runNode,
	}
}

// resolveNode validates every flag of `meshagent node`.
func (r *runState) resolveNode(c *ucli.Context) (*nodeSettings, error) {
	if err := r.noArgs(c); err != nil {
		return nil, err
	}
	s := &nodeSettings{cfg: daemon.DefaultConfig(), mdns: !c.Bool(flagNoMDNS), audit: c.Bool(flagAudit) || c.Bool(flagAuditBodies), auditBodies: c.Bool(flagAuditBodies), json: c.Bool(flagJSON), name: c.String(flagName), relayMode: r.relayMode}
	s.cfg.HoldMessages = c.Bool(flagHoldMessages)
	var err error
	if s.log, err = r.parseLogSettings(c); err != nil {
		return nil, err
	}
	if s.cfg.DataDir, err = r.dataDir(c); err != nil {
		return nil, err
	}
	if s.keyPath, err = r.keyPath(c); err != nil {
		return nil, err
	}
	if s.listen, err = r.multiaddrs(c, flagListen, "/ip4/0.0.0.0/tcp/4001"); err != nil {
		return nil, err
	}
	if s.cfg.Bootstrap, err = r.multiaddrs(c, flagBootstrap, "/ip4/127.0.0.1/tcp/4001/p2p/12D3KooW…"); err != nil {
		return nil, err
	}
	for i, m := range s.cfg.Bootstrap {
		if _, err := peer.AddrInfoFromP2pAddr(m); err != nil {
			return nil, r.flagError(c, flagBootstrap, "%q does not end in /p2p/<agent id>; append the peer's agent id, e.g. %s/p2p/12D3KooW…", c.StringSlice(flagBootstrap)[i], m)
		}
	}
	if len(s.name) > protocol.MaxNameLen {
		return nil, r.flagError(c, flagName, "the name is %d bytes; the limit is %d", len(s.name), protocol.MaxNameLen)
	}
	if s.cfg.PolicyFile = expandHome(c.String(flagPolicy)); s.cfg.PolicyFile != "" {
		if s.policy, err = node.LoadPolicy(s.cfg.PolicyFile); err != nil {
			return nil, r.flagError(c, flagPolicy, "%v", err)
		}
	}
	if s.cfg.CapabilitiesFile = expandHome(c.String(flagCapabilities)); s.cfg.CapabilitiesFile != "" {
		s.kinds = newHandlerKinds(r.stderr, s.log.newLogger(r.stderr))
		if s.cfg.Services, err = node.LoadServices(s.cfg.CapabilitiesFile, s.kinds.options()...); err != nil {
			_ = s.kinds.close()
			return nil, r.flagError(c, flagCapabilities, "%v", err)
		}
	}
	if v := strings.TrimSpace(c.String(flagMetrics)); v != "" {
		if _, err := r.hostPort(c, flagMetrics, v); err != nil {
			return s, err
		}
		s.cfg.MetricsAddr = v
	}
	if s.cfg.API, err = r.apiListenAddr(c); err != nil {
		return nil, err
	}
	if s.relayMode {
		if s.cfg.Public, err = r.resolvePublic(c); err != nil {
			return nil, err
		}
	}
	if s.shutdownTimeout, err = r.positiveDuration(c, flagShutdownTimeout); err != nil {
		return nil, err
	}
	if s.staticRelays, err = r.multiaddrs(c, flagRelay, "/ip4/203.0.113.7/tcp/4001/p2p/12D3KooW…"); err != nil {
		return nil, err
	}
	for i, m := range s.staticRelays {
		if _, err := peer.AddrInfoFromP2pAddr(m); err != nil {
			return nil, r.flagError(c, flagRelay, "%q does not end in /p2p/<agent id>; append the relay's agent id", c.StringSlice(flagRelay)[i])
		}
	}
	if s.mailboxes, err = r.multiaddrs(c, flagMailbox, "/ip4/203.0.113.7/tcp/4001/p2p/12D3KooW…"); err != nil {
		return nil, err
	}
	for i, m := range s.mailboxes {
		if _, err := peer.AddrInfoFromP2pAddr(m); err != nil {
			return nil, r.flagError(c, flagMailbox, "%q does not end in /p2p/<agent id>; append the relay's agent id", c.StringSlice(flagMailbox)[i])
		}
	}
	if len(s.mailboxes) > protocol.MaxMailboxes {
		return nil, r.flagError(c, flagMailbox, "%d mailboxes given; the limit is %d", len(s.mailboxes), protocol.MaxMailboxes)
	}
	s.cfg.ExchangeDir = expandHome(c.String(flagExchange))
	if err := r.resolveAgentREST(c, s); err != nil {
		return nil, err
	}
	if s.outboxTTL, err = r.positiveDuration(c, flagOutboxTTL); err != nil {
		return nil, err
	}
	if s.cfg.Poll = c.Duration(flagCapsPoll); s.cfg.Poll < 0 {
		return nil, r.flagError(c, flagCapsPoll, "%s is negative; use 0 to reload only on SIGHUP", s.cfg.Poll)
	}
	if err := r.resolveKeep(c, s); err != nil {
		return nil, err
	}
	if err := r.resolveRate(c, s); err != nil {
		return nil, err
	}
	s.presence = node.Presence{Interval: c.Duration(flagHeartbeat), PersonaType: c.String(flagPersonaType)}
	if d := s.presence.Interval; d != 0 && (d < node.MinHeartbeatInterval || d > node.MaxHeartbeatInterval) {
		return nil, r.flagError(c, flagHeartbeat, "%s is outside [%s, %s]; use 0 to send no heartbeats", d, node.MinHeartbeatInterval, node.MaxHeartbeatInterval)
	}
	if len(s.presence.PersonaType) > protocol.MaxNameLen {
		return nil, r.flagError(c, flagPersonaType, "the persona type is %d bytes; the limit is %d", len(s.presence.PersonaType), protocol.MaxNameLen)
	}
	return s, nil
}

// multiaddrs parses a repeatable multiaddr flag.
func (r *runState) multiaddrs(c *ucli.Context, name, example string) ([]ma.Multiaddr, error) {
	var out []ma.Multiaddr
	for _, v := range c.StringSlice(name) {
		v = strings.TrimSpace(v)
		if v == "" {
			continue
		}
		m, err := ma.NewMultiaddr(v)
		if err != nil {
			return nil, r.flagError(c, name, "%q is not a multiaddr (%v); use a form like %s", v, err, example)
		}
		out = append(out, m)
	}
	return out, nil
}

// apiListenAddr validates --api for a node: host:port on a loopback
// address unless --api-public, or "" for off.
func (r *runState) apiListenAddr(c *ucli.Context) (string, error) {
	v := strings.TrimSpace(c.String(flagAPI))
	if v == "" || strings.EqualFold(v, "off") {
		return "", nil
	}
	host, err := r.apiHostPort(c, v)
	if err != nil {
		return "", err
	}
	if !c.Bool(flagAPIPublic) && !isLoopback(host) {
		return "", r.flagError(c, flagAPI, "%s is not a loopback address, and anyone who reaches the local API can act as this agent; "+
			"use 127.0.0.1:PORT, or add --api-public to expose it on purpose", v)
	}
	return v, nil
}

// apiHostPort checks that --api's value v is host:port and returns the
// host.
func (r *runState) apiHostPort(c *ucli.Context, v string) (string, error) {
	return r.hostPort(c, flagAPI, v)
}

// hostPort checks that a flag's value v is host:port and returns the host.
func (r *runState) hostPort(c *ucli.Context, flag, v string) (string, error) {
	host, port, err := net.SplitHostPort(v)
	if err == nil {
		var p int
		if p, err = strconv.Atoi(port); err == nil && (p < 0 || p > 65535) {
			err = errors.New("port out of range")
		}
	}
	if err != nil {
		example := defaultAPIAddr + ", or off"
		if flag == flagWS {
			example = defaultWSAddr
		}
		return "", r.flagError(c, flag, "%q is not host:port (%v); use e.g. %s", v, err, example)
	}
	return host, nil
}

// unauthenticatedListenAddr checks a listen address, flag's value v, of
// an endpoint that has no credentials of its own and calls the mesh as
// this node (the MCP server's --http, the A2A gateway's --listen): it must
// be loopback unless --public says to expose it on purpose, as --api must
// unless --api-public.
func (r *runState) unauthenticatedListenAddr(c *ucli.Context, flag, what, v string) error {
	host, err := r.hostPort(c, flag, v)
	if err != nil {
		return err
	}
	if !c.Bool(flagPublic) && !isLoopback(host) {
		return r.flagError(c, flag, "%s is not a loopback address, and %s has no authentication: anyone who reaches it can call the mesh as this node; "+
			"use 127.0.0.1:PORT (a proxy that authenticates can forward to it), or add --public to expose it on purpose", v, what)
	}
	return nil
}

func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func (r *runState) runNode(c *ucli.Context) error {
	s, err := r.resolveNode(c)
	if err != nil {
		return err
	}
	defer func() { _ = s.kinds.close() }()
	// SIGHUP reloads the settings files. Catch it from the start, so that
	// one sent while the node starts is served once it runs rather than
	// killing the process.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	// libp2p binds its loggers on their first line: route them before the
	// host exists.
	log := s.log.newLogger(r.stderr)
	stopLibp2pLogs, err := routeLibp2pLogs(r.stderr, s.log)
	defer stopLibp2pLogs()
	if err != nil {
		log.Warn("libp2p log levels", "err", err)
	}

	if err := os.MkdirAll(s.cfg.DataDir, 0o700); err != nil {
		return r.flagError(c, flagData, "cannot create %s: %v", s.cfg.DataDir, err)
	}
	key, created, err := loadOrCreateKey(s.keyPath)
	if err != nil {
		return err
	}
	if created {
		log.Info("created identity", "path", s.keyPath)
	}
	if len(s.listen) == 0 {
		s.listen = defaultListen("0.0.0.0", defaultP2PPort, log)
	}
	if s.relayMode {
		publicWarnings(s.cfg.Public, log)
	}
	// A signal while the parts start stops them once they run (exit 0),
	// rather than failing the binding of a listener.
	d, err := daemon.Start(context.WithoutCancel(c.Context), daemon.WithConfig(r.daemonConfig(s, key, log)))
	if err != nil {
		return r.startError(c, s, err)
	}
	if err := r.printNodeStarted(d, s.json); err != nil {
		log.Warn("cannot print the start line", "err", err)
	}
	if !s.json && r.terminal(r.stdout) {
		if err := writeNextSteps(r.stdout, d.Node().Addrs(), d.APIAddr()); err != nil {
			log.Warn("cannot print the next steps", "err", err)
		}
	}
	for {
		select {
		case <-c.Context.Done():
			log.Info("shutting down", "timeout", s.shutdownTimeout)
			ctx, cancel := context.WithTimeout(context.Background(), s.shutdownTimeout)
			err := d.Close(ctx)
			cancel()
			switch {
			case errors.Is(err, context.DeadlineExceeded):
				return exitErrorf(ExitFailure, "shutdown did not finish within %s (--shutdown-timeout)", s.shutdownTimeout)
			case err != nil:
				return exitErrorf(ExitFailure, "shutdown: %v", err)
			}
			log.Info("shutdown complete")
			return nil
		case <-hup:
			if !d.Reload() {
				log.Warn("SIGHUP ignored: there is no --capabilities, --policy, --tokens or --agent-tokens file to reload")
			}
		}
	}
}

// daemonConfig is the process s describes, for daemon.Start.
func (r *runState) daemonConfig(s *nodeSettings, key crypto.PrivKey, log *slog.Logger) daemon.Config {
	cfg := s.cfg
	cfg.Logger, cfg.Level = log, s.log.levelVar
	if s.kinds != nil {
		cfg.ParseOptions = s.kinds.options()
	}
	cfg.NodeOptions = []node.Option{
		node.WithIdentity(key),
		node.WithListenAddrs(s.listen...),
		node.WithName(s.name),
		node.WithAgentCard(a2aCard),
		node.WithMDNS(s.mdns),
		node.WithPresence(s.presence),
		node.WithStaticRelays(s.staticRelays...),
		node.WithRelayService(s.relayMode),
		node.WithPolicy(s.policy),
		node.WithMailboxes(s.mailboxes...),
		node.WithMessageTTL(s.outboxTTL),
		node.WithKeepHistory(s.keepHistory...),
		node.WithLimits(s.limits),
	}
	if s.relayMode {
		// A relay keeps messages for agents that name it as their mailbox.
		cfg.NodeOptions = append(cfg.NodeOptions, node.WithMailboxService())
	}
	if s.audit {
		cfg.NodeOptions = append(cfg.NodeOptions, node.WithAudit(s.auditBodies))
	}
	return cfg
}

// startError is daemon.Start's error as the command reports it: a
// listener that cannot bind names its flag.
func (r *runState) startError(c *ucli.Context, s *nodeSettings, err error) error {
	if le, ok := errors.AsType[*daemon.ListenError](err); ok {
		switch le.Listener {
		case daemon.ListenerAPI:
			return exitErrorf(ExitFailure, "%v; is another node using it? pass --api with another address (port 0 picks a free one), or --api off", le)
		case daemon.ListenerPublic:
			return exitErrorf(ExitFailure, "%v; pass --ws with another address", le)
		case daemon.ListenerMetrics:
			return exitErrorf(ExitFailure, "%v; pass --metrics with another address", le)
		}
	}
	if se, ok := errors.AsType[*daemon.StoreError](err); ok {
		return exitErrorf(ExitFailure, "%v (is another node using --data %s?)", se, s.cfg.DataDir)
	}
	if errors.Is(err, daemon.ErrExchange) {
		return r.flagError(c, flagExchange, "%v", err)
	}
	return exitErrorf(ExitFailure, "%v", err)
}

func (r *runState) printNodeStarted(d *daemon.Daemon, asJSON bool) error {
	n := d.Node()
	addrs := make([]string, 0, len(n.Addrs()))
	for _, a := range n.Addrs() {
		addrs = append(addrs, a.String())
	}
	apiAddr, wsAddr := d.APIAddr(), d.PublicAddr()
	if asJSON {
		return writeJSONLine(r.stdout, nodeStarted{AgentID: n.AgentID(), PublicKey: n.PublicKeyBase64(), Addrs: addrs, API: apiAddr, WS: wsAddr})
	}
	line := fmt.Sprintf("node %s addrs %s api %s", n.AgentID(), strings.Join(addrs, ","), orOff(apiAddr))
	if wsAddr != "" {
		line += " ws " + wsAddr
	}
	_, err := fmt.Fprintln(r.stdout, line)
	return err
}

func orOff(s string) string {
	if s == "" {
		return "off"
	}
	return s
}

// resolveKeep validates the history keeper's flags: a relay keeps every
// family its peers subscribe to unless --keep-history says otherwise.
func (r *runState) resolveKeep(c *ucli.Context, s *nodeSettings) error {
	patterns := c.StringSlice(flagKeepHistory)
	if !c.IsSet(flagKeepHistory) && s.relayMode {
		patterns = []string{"*"}
	}
	for _, p := range patterns {
		switch p = strings.TrimSpace(p); {
		case p == "" || strings.EqualFold(p, "off"):
		case p == "*":
			s.keepHistory = append(s.keepHistory, p)
		default:
			if fam := pubsubFamily(p); fam == "" || strings.ContainsAny(fam, "*?[") {
				return r.flagError(c, flagKeepHistory, "%q: the family, before the first ':' or '.', must be literal (e.g. 'news:*'), or use * for every family", p)
			}
			s.keepHistory = append(s.keepHistory, p)
		}
	}
	if s.cfg.KeepAge = c.Duration(flagKeepAge); s.cfg.KeepAge <= 0 {
		return r.flagError(c, flagKeepAge, "%s is not positive", s.cfg.KeepAge)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(c.String(flagKeepBytes)), 10, 64)
	if err != nil || n <= 0 {
		return r.flagError(c, flagKeepBytes, "%q is not a positive number of bytes", c.String(flagKeepBytes))
	}
	s.cfg.KeepBytes = n
	return nil
}

// resolveAgentREST validates --agent-tokens and --agent-rate (seed 003's
// REST surface, served on the local API).
func (r *runState) resolveAgentREST(c *ucli.Context, s *nodeSettings) error {
	if s.cfg.AgentRate = c.Int(flagAgentRate); s.cfg.AgentRate < 1 || s.cfg.AgentRate > maxAgentRate {
		return r.flagError(c, flagAgentRate, "%d is not a number of requests per minute from 1 to %d", s.cfg.AgentRate, maxAgentRate)
	}
	if s.cfg.AgentTokensFile = expandHome(c.String(flagAgentTokens)); s.cfg.AgentTokensFile == "" {
		return nil
	}
	if s.cfg.API == "" {
		return r.flagError(c, flagAgentTokens, "seed 003's REST surface is served on the local API, which is off; give --api too")
	}
	var err error
	if s.cfg.AgentTokens, err = rpc.LoadTokens(s.cfg.AgentTokensFile); err != nil {
		return r.flagError(c, flagAgentTokens, "%v", err)
	}
	return nil
}

// maxAgentRate bounds --agent-rate (requests per minute per agent).
const maxAgentRate = 100000

// resolveRate validates --requester-rate and --requester-burst into the
// node's limits.
func (r *runState) resolveRate(c *ucli.Context, s *nodeSettings) error {
	s.limits = node.DefaultLimits()
	rate, err := strconv.ParseFloat(strings.TrimSpace(c.String(flagRequesterRate)), 64)
	if err != nil || rate < 0 || math.IsInf(rate, 0) || math.IsNaN(rate) {
		return r.flagError(c, flagRequesterRate, "%q is not a number of requests per second (0 turns the limit off)", c.String(flagRequesterRate))
	}
	burst, err := strconv.Atoi(strings.TrimSpace(c.String(flagRequesterBurst)))
	if err != nil || burst < 1 {
		return r.flagError(c, flagRequesterBurst, "%q is not a positive number of requests", c.String(flagRequesterBurst))
	}
	s.limits.RequestsPerSecond, s.limits.Burst = rate, burst
	return nil
}

// pubsubFamily is a topic's family: the part before the first ':' or '.'.
func pubsubFamily(p string) string {
	if i := strings.IndexAny(p, ":."); i >= 0 {
		return p[:i]
	}
	return p
}
