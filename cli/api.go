package cli

import (
	"context"
	"time"

	"github.com/meshagent/meshagent/rpc"
)

// dialAPI connects to the local API of a running node at addr (host:port)
// and initializes (as a fresh meshagent-go-… client id). If nothing
// listens there the error wraps rpc.ErrNoServer.
func dialAPI(ctx context.Context, addr string) (*rpc.Client, error) {
	// A bare host:port means ws://host:port/.
	return rpc.Dial(ctx, addr, rpc.WithClientInfo(rpc.ClientInfo{Name: "meshagent", Version: "cli"}))
}

// localTimeout bounds the commands that only ask the local node (peers,
// status, connect's own round trip, log-level, id --api, task).
const localTimeout = 10 * time.Second
