// Package cli is meshagent's command line: the commands, their flags,
// environment variables and config file, output formatting, logging setup,
// signal handling and exit statuses. It is the only package that prints to
// stdout or chooses an exit status; cmd/meshagent is just
// os.Exit(cli.Main(os.Args)). The process `meshagent node` and
// `meshagent relay` run is assembled by package daemon: this package
// resolves the flags, environment and config file into a daemon.Config,
// starts it, prints the start line, and maps SIGHUP to Daemon.Reload and
// SIGINT or SIGTERM to Daemon.Close.
//
// # Commands
//
//	meshagent id [--key PATH] [--json]
//	meshagent id --api ADDR [--json]
//	meshagent node [--key PATH] [--data DIR] [--listen MULTIADDR]... [--bootstrap MULTIADDR]...
//	               [--name NAME] [--capabilities FILE] [--capabilities-poll D] [--api ADDR]
//	               [--api-public] [--no-mdns] [--relay MULTIADDR]... [--policy FILE]
//	               [--heartbeat D] [--persona-type TYPE] [--shutdown-timeout D] [--metrics ADDR]
//	               [--keep-history PATTERN|*|off]... [--keep-history-age D] [--keep-history-bytes N]
//	               [--exchange DIR] [--agent-tokens FILE] [--agent-rate N] [--json]
//	meshagent relay [node flags] [--ws ADDR] [--tokens FILE] [--tls-cert PEM --tls-key PEM]
//	meshagent call AGENT_ID CAPABILITY [--params JSON|@FILE|-] [--timeout D] [--api ADDR] [--json]
//	               [--receipt | --receipt-out FILE]
//	meshagent peers [--api ADDR] [--json]
//	meshagent discover CAPABILITY [--keyword] [--timeout D] [--api ADDR] [--json]
//	meshagent mcp [--api ADDR] [--http HOST:PORT] [--poll D]
//	meshagent publish TOPIC --payload JSON|@FILE|- [--include-agent ID]... [--exclude-agent ID]...
//	               [--persona TYPE]... [--require-capability NAME]... [--timeout D] [--api ADDR] [--json]
//	meshagent subscribe PATTERN [--durable NAME] [--count N] [--api ADDR]
//	meshagent durable list [--api ADDR] [--json] | durable forget NAME [--api ADDR] [--json]
//	meshagent send-message --topic T --payload JSON|@FILE|- [--bus URL]
//	meshagent bus-subscribe TOPIC [--group G] [--bus URL]
//	meshagent history [--agent A] [--topic T] [--conversation C] [--since T|D] [--until T] [--limit N]
//	               [--bus URL] [--json]
//	meshagent dlq list [--topic T] [--limit N] [--bus URL] [--json] | dlq replay ID [--bus URL]
//	meshagent consensus --agents A,B,C --question Q --options O,... [--context JSON|@FILE|-]
//	               [--threshold F] [--deadline D] [--api ADDR] [--json]
//	meshagent task status|cancel TASK_ID [--agent ID] [--api ADDR] [--json]
//	meshagent a2a --listen HOST:PORT [--api ADDR]
//	meshagent sign [--key PATH] < envelope.json
//	meshagent verify [--provider AGENT_ID] [--correlation-id TASK_ID] < signed.json
//	meshagent status [--api ADDR] [--json]
//	meshagent connect MULTIADDR [--timeout D] [--api ADDR] [--json]
//	meshagent log-level [LEVEL] [--api ADDR] [--json]
//	meshagent config show [node flags] [--json]
//	meshagent version [--json]
//	meshagent completion bash|zsh|fish
//
// Every command also takes --config, --data, --log-level (debug, info,
// warn, error; default info) and --log-format (text, json; default text).
// Logs go to stderr; results go to stdout. Flags may follow a command's
// arguments (`meshagent call ID echo --params '{}'`); "--" ends the flags.
// A mistyped command or flag is a usage error that suggests the nearest
// name when one is close (Jaro-Winkler similarity at least 0.8).
//
// `meshagent node` prints one line on stdout once it is running, so that
// scripts can read its agent id and addresses:
//
//	node <agent id> addrs <multiaddr>[,<multiaddr>...] api <host:port|off>
//
// or with --json: {"agentId","publicKey","addrs":[...],"api":"host:port"}
// ("api" is "" when the API is off). Port 0 in --listen or --api picks a
// free port; the line says which. Without --listen a node listens on TCP
// and QUIC port 4001 on all IPv4 interfaces, as kubo does, or on random
// ports with a warning when 4001 is taken (a plain bind of 0.0.0.0:4001,
// TCP and UDP, is tried first). When stdout is a terminal and --json is
// off, a few "Next steps" lines follow the start line, with the
// --bootstrap command for another node. Under systemd (NOTIFY_SOCKET set)
// the node sends READY=1 once its listeners serve (just before the start
// line), WATCHDOG=1 every half WatchdogSec when WATCHDOG_USEC is set, and
// STOPPING=1 when a shutdown begins. SIGINT or SIGTERM stops the node: the
// local API closes first, then the node, within --shutdown-timeout (exit 0
// when clean, 1 when it times out); a second signal ends the process at
// once. SIGHUP reloads --capabilities and announces the new set with a
// fresh hello; a file that fails to load is logged and the old set kept.
// A relay rereads --tokens the same way (and when it changes) and closes
// the connections of tokens it no longer lists. --metrics ADDR serves
// only /metrics, /healthz and /readyz on a listener of its own, for
// scraping from elsewhere while --api stays on loopback (the local API
// serves the same paths).
//
// `meshagent relay` serves one bus on its public --ws (and the lobby) and,
// with --api, on the loopback local API: one subscription list, one outbox
// and retry loop. On --ws anonymous clients get the bus methods only;
// --tokens requires a token per connection (401 without) granting topics
// and methods; --tls-cert/--tls-key serve wss. A non-loopback --ws without
// --tokens is logged as a warning.
//
// `meshagent call` prints the final result as indented JSON; in-progress
// results go to stderr. With --json every response payload is one line on
// stdout (in-progress ones first, the final one last, exactly as the agent
// sent it), and a failure also prints the AgentProtocol error object
// {"code","message","details"} as one line on stdout before exiting with
// the code's status. --receipt adds the provider's signed final response
// (a delivery receipt) on one line after the result, or as the final
// JSON line's "receipt"; --receipt-out FILE writes it to FILE.
//
// `meshagent publish` prints "published to TOPIC (N peers)" (--json:
// {"topic","peers"}). When no agent subscribes to the topic within
// --timeout nothing is sent and it exits 1. The filter flags build a seed
// 004 broadcast filter; agent ids may be peer IDs or base64 public keys.
// `meshagent subscribe` prints each message as one JSON line
// {"topic","from","payload","time","id"} and nothing else on stdout; it
// runs until SIGINT or SIGTERM (exit 0) or --count messages (exit 0), and
// exits 1 if the local API goes away. An invalid PATTERN is a usage error.
// With --durable NAME it first prints what was published since NAME's
// last run, fetched from history keepers (a node with --keep-history; a
// relay keeps every family its peers subscribe to unless given
// --keep-history off), in order, then the live messages; it answers the
// node for each message once its line is written, and the node moves
// NAME on only then, so a run killed just after printing a message may
// see it printed again (same id) by the next run, and none is lost; it
// exits 1 when no keeper answers. Keepers keep messages for
// --keep-history-age (7 days) within --keep-history-bytes (128 MiB),
// the oldest going first.
//
// The operator's commands ask the node at --api through methods its
// loopback local API serves and a relay's public listener does not:
// `meshagent status` (mesh.status: identity, addresses, log level, its
// capabilities, the agents it knows, bus clients and their topic
// patterns), `meshagent connect` (mesh.connect: a bad address exits 2, an
// unreachable peer 5), `meshagent log-level` (mesh.logLevel: the level of
// meshagent's logs, and whether libp2p logs at debug unless
// GOLOG_LOG_LEVEL chose), and `meshagent id --api` (mesh.id with the
// addresses). `meshagent config show` resolves the node's settings as the
// node would and names each one's source: flag, env (the variable), file
// (the path) or default; it creates nothing. `meshagent version` reads the
// build information (module version, vcs commit, Go version) and lists
// the wire protocol ids. `meshagent completion` prints a bash, zsh or fish
// script; bash and zsh ask the binary (--generate-bash-completion).
//
// `meshagent sign` sets from.agentId to the key's agent id (refusing an
// envelope whose from.agentId names another agent) and fills protocol, id
// and timestamp when they are absent. `meshagent verify` checks the
// signature, that from.agentId is the signing key, and the envelope's
// shape; it does not check the timestamp against the clock. With
// --provider or --correlation-id it checks a delivery receipt instead: a
// final response envelope signed by that provider (exit 4 otherwise)
// answering that request (exit 3 otherwise), given alone or inside the
// JSON line of `call --receipt --json`.
//
// # Configuration
//
// Each flag can be set, from highest precedence to lowest, by:
//
//  1. the flag itself: --api 127.0.0.1:7893
//  2. an environment variable MESHAGENT_<FLAG>, upper case with dashes as
//     underscores: MESHAGENT_API, MESHAGENT_DATA, MESHAGENT_KEY,
//     MESHAGENT_NO_MDNS=true, MESHAGENT_LISTEN=/ip4/0.0.0.0/tcp/4001,/ip4/0.0.0.0/udp/4001/quic-v1
//     (lists are comma-separated);
//  3. the config file: --config PATH, by default DIR/config.json when it
//     exists, a JSON object whose keys are flag names:
//     {"api": "127.0.0.1:7893", "listen": ["/ip4/127.0.0.1/tcp/4001"], "no-mdns": true,
//     "shutdown-timeout": "5s"}. Relative paths in it (key, data,
//     capabilities) are relative to the file's directory. A key that is no
//     flag of any command is an error; keys of other commands' flags are
//     ignored, so one file serves all commands;
//  4. the default.
//
// DIR is --data, by default ~/.meshagent; the identity key defaults to
// DIR/identity.key, so nodes with different --data directories run side by
// side. Invalid values are usage errors that name the flag, where its value
// came from, and what to do.
//
// The local API (--api) listens on 127.0.0.1:7892 by default. A node
// refuses a non-loopback address unless --api-public is given, since
// anyone who reaches the API can act as the agent. --api off (or "")
// disables it. Beside the WebSocket API at "/" it serves /metrics,
// /healthz, /readyz and the status page at /ui (package ui), which the
// API admits as a browser client because it comes from the API's own
// loopback address (rpc.WithLoopbackPages); a relay serves the page on
// its --api only, not on --ws.
//
// libp2p's own logs go to the same stderr in the same format. They are
// quiet (errors only) unless --log-level is debug; GOLOG_LOG_LEVEL
// (e.g. "error,swarm2=debug") overrides that per subsystem.
//
// # Exit status
//
// Each AgentProtocol error code has its own exit status, so scripts can
// branch without parsing messages:
//
//	| status | meaning                                                        |
//	|--------|----------------------------------------------------------------|
//	| 0      | success                                                        |
//	| 1      | any other failure (no node listening, bad key file, I/O error) |
//	| 2      | usage: unknown command or flag, missing argument, invalid flag |
//	| 3      | INVALID_MESSAGE: malformed message, or params failing a schema |
//	| 4      | INVALID_SIGNATURE: bad signature, or agent id/key mismatch     |
//	| 5      | UNKNOWN_AGENT: the agent is unknown or unreachable             |
//	| 6      | CAPABILITY_NOT_SUPPORTED: the agent lacks the capability       |
//	| 7      | TIMEOUT: no final answer in time                               |
//	| 8      | RATE_LIMITED: the agent is rate-limiting the caller            |
//	| 9      | INTERNAL_ERROR: the capability or the node failed              |
//	| 10     | UNAUTHORIZED: the caller is not in authorized_requester_ids    |
//	| 130    | interrupted (SIGINT or SIGTERM) before a client command ended  |
//
// ExitCodeFor returns the status for a code; ExitError carries a status
// through a command's error.
package cli
