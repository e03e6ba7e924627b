package cli

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	ucli "github.com/urfave/cli/v2"

	"github.com/meshagent/meshagent/mcp"
)

const (
	// flagHTTP is mcp's --http: serve Streamable HTTP instead of stdio.
	flagHTTP = "http"
	// flagPoll is mcp's --poll: how often the tool list is refreshed.
	flagPoll = "poll"
)

func (r *runState) mcpCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "mcp",
		Usage: "serve the mesh's capabilities as MCP tools (stdio by default) over a node's local API",
		Description: "An MCP server for MCP hosts (IDEs, desktop assistants): one tool per capability the " +
			"node serves or knows on the mesh, run on any provider as `call --any` does. On stdio " +
			"(the default) stdout carries MCP only and logs go to stderr; no MESHAGENT_* variable is " +
			"needed. --http HOST:PORT serves Streamable HTTP at /mcp instead (sessions with ids; on " +
			"loopback a Host or Origin that is not local gets 403). The tool list follows the mesh " +
			"(refreshed every --poll) and clients are told when it changes.",
		Flags: []ucli.Flag{
			apiFlag(),
			stringFlag(flagHTTP, "", "serve Streamable HTTP on `HOST:PORT` (path /mcp) instead of stdio"),
			durationFlag(flagPoll, mcp.DefaultPollInterval, "how often to refresh the tool list from the node"),
			boolFlag(flagPublic, "allow --http on a non-loopback address (the MCP endpoint has no authentication: anyone who reaches it calls the mesh as this node)"),
		},
		Action: r.runMCP,
	}
}

func (r *runState) runMCP(c *ucli.Context) error {
	if err := r.noArgs(c); err != nil {
		return err
	}
	ls, err := r.parseLogSettings(c)
	if err != nil {
		return err
	}
	poll := c.Duration(flagPoll)
	if poll < mcp.MinPollInterval {
		return r.flagError(c, flagPoll, "%v is below %v", poll, mcp.MinPollInterval)
	}
	httpAddr := strings.TrimSpace(c.String(flagHTTP))
	if httpAddr != "" {
		if err := r.unauthenticatedListenAddr(c, flagHTTP, "the MCP endpoint", httpAddr); err != nil {
			return err
		}
	}
	log := ls.newLogger(r.stderr)
	ctx, cancel := context.WithTimeout(c.Context, localTimeout)
	cl, addr, err := r.connectAPI(ctx, c)
	cancel()
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel = context.WithTimeout(c.Context, localTimeout)
	srv, err := mcp.New(ctx, cl, mcp.WithLogger(log), mcp.WithPollInterval(poll), mcp.WithVersion(version()))
	cancel()
	if err != nil {
		return r.apiError(c, addr, err)
	}
	defer srv.Close()

	// The session ends with the command, or when the node goes away.
	ctx, cancel = context.WithCancel(c.Context)
	defer cancel()
	go func() {
		select {
		case <-cl.Done():
			log.Error("the node's local API closed the connection", "api", addr, "err", cl.Err())
			cancel()
		case <-ctx.Done():
		}
	}()

	if httpAddr == "" {
		log.Info("MCP server on stdio", "api", addr)
		t := &sdk.IOTransport{Reader: io.NopCloser(c.App.Reader), Writer: nopWriteCloser{r.stdout}}
		err := srv.MCP().Run(ctx, t)
		switch {
		case err == nil, errors.Is(err, io.EOF), c.Context.Err() != nil:
			return nil
		case cl.Err() != nil:
			return exitErrorf(ExitFailure, "mcp: the node at %s went away: %v", addr, cl.Err())
		}
		return exitErrorf(ExitFailure, "mcp: %v", err)
	}

	ln, err := net.Listen("tcp", httpAddr)
	if err != nil {
		return r.flagError(c, flagHTTP, "cannot listen on %s: %v", httpAddr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", srv.HTTPHandler())
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	log.Info("MCP server on Streamable HTTP", "url", "http://"+ln.Addr().String()+"/mcp", "api", addr)
	// Tests and scripts read the address from the first stdout line.
	r.stdout.Write([]byte("http://" + ln.Addr().String() + "/mcp\n"))
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return exitErrorf(ExitFailure, "mcp: %v", err)
	case <-ctx.Done():
	}
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	_ = hs.Shutdown(sctx)
	if c.Context.Err() == nil && cl.Err() != nil {
		return exitErrorf(ExitFailure, "mcp: the node at %s went away: %v", addr, cl.Err())
	}
	return nil
}

// nopWriteCloser keeps the command's stdout open when the MCP session
// closes its writer.
type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
