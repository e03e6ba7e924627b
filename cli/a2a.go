package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/meshagent/meshagent/a2a"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
)

const flagA2AListen = "listen"

// a2aParseOptions let capabilities files name the "a2a" handler kind: an
// external A2A agent's skill served as a mesh capability.
func a2aParseOptions() []node.ParseOption {
	return []node.ParseOption{node.WithHandlerKind("a2a", func(_ *protocol.Capability, spec json.RawMessage) (node.Handler, error) {
		h, err := a2a.NewHandler(spec)
		if err != nil {
			return nil, err
		}
		return node.HandlerFunc(func(ctx context.Context, c *node.Call) (json.RawMessage, error) {
			return h.Call(ctx, c.Request.Params)
		}), nil
	})}
}

// a2aCard answers the a2a.card built-in with the node's signed card.
func a2aCard(s node.JWSSigner, agentID, name string, caps []protocol.Capability, params json.RawMessage) (json.RawMessage, error) {
	return a2a.OwnCard(s, agentID, name, caps, params)
}

func (r *runState) a2aCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "a2a",
		Usage: "serve the mesh's agents to A2A v1.0 clients (JSON-RPC binding)",
		Description: "Connects to a running node's local API (--api) and serves, on --listen, each mesh " +
			"agent the node knows as an A2A agent: its Agent Card at /agents/AGENT_ID/.well-known/agent-card.json " +
			"(the node's own also at /.well-known/agent-card.json) and its JSON-RPC endpoint at /agents/AGENT_ID/; " +
			"GET /agents lists them. Each card is signed by its own agent. A skill is a capability: send its " +
			"params as a data part with the skill in message.metadata.skill. Runs until SIGINT or SIGTERM.",
		Flags: []ucli.Flag{
			&ucli.StringFlag{Name: flagA2AListen, EnvVars: []string{"MESHAGENT_A2A_LISTEN"}, Usage: "`HOST:PORT` to serve A2A on (required; port 0 picks one, printed on stderr)"},
			apiFlag(),
			boolFlag(flagPublic, "allow --listen on a non-loopback address (the gateway has no authentication: anyone who reaches it calls the mesh as this node)"),
		},
		Action: r.runA2A,
	}
}

func (r *runState) runA2A(c *ucli.Context) error {
	if len(r.positional) != 0 {
		return usageErrorf("a2a takes no arguments; set the address with --listen HOST:PORT")
	}
	ls, err := r.parseLogSettings(c)
	if err != nil {
		return err
	}
	log := ls.newLogger(r.stderr)
	addr := c.String(flagA2AListen)
	if addr == "" {
		return usageErrorf("a2a needs --listen HOST:PORT, the address to serve A2A on, e.g. --listen 127.0.0.1:8080")
	}
	if err := r.unauthenticatedListenAddr(c, flagA2AListen, "the A2A gateway", addr); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(c.Context, localTimeout)
	cl, _, err := r.connectAPI(ctx, c)
	cancel()
	if err != nil {
		return err
	}
	defer cl.Close()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return exitErrorf(ExitFailure, "a2a cannot listen on %s: %v; pass --listen with another address", addr, err)
	}
	base := "http://" + ln.Addr().String()
	ctx, cancel = context.WithTimeout(c.Context, localTimeout)
	gw, err := a2a.New(ctx, cl, a2a.WithBaseURL(base), a2a.WithLogger(log))
	cancel()
	if err != nil {
		_ = ln.Close()
		return exitErrorf(ExitFailure, "a2a: %v", err)
	}
	defer gw.Close()
	srv := &http.Server{
		Handler:           gw,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	log.Info("serving A2A", "url", base, "card", base+"/.well-known/agent-card.json")
	select {
	case <-c.Context.Done():
	case <-cl.Done():
		log.Error("the node's local API went away", "err", cl.Err())
	case err := <-done:
		return exitErrorf(ExitFailure, "a2a listener: %v", err)
	}
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	_ = gw.Close() // ends the streams, so that Shutdown does not wait for them
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("a2a: shut down: %w", err)
	}
	if err := cl.Err(); err != nil && c.Context.Err() == nil {
		return exitErrorf(ExitFailure, "the node's local API went away: %v", err)
	}
	return nil
}
