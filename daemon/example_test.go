package daemon_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	ma "github.com/multiformats/go-multiaddr"

	"github.com/meshagent/meshagent/daemon"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/sign"
)

// A process with a node on loopback, its store in a data directory and a
// local API on a free port; cli does the same from its flags.
func ExampleStart() {
	dir, err := os.MkdirTemp("", "daemon-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	key, err := sign.GenerateKey()
	if err != nil {
		fmt.Println(err)
		return
	}
	cfg := daemon.DefaultConfig()
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.DataDir, cfg.API = dir, "127.0.0.1:0"
	cfg.NodeOptions = []node.Option{node.WithIdentity(key), node.WithListenAddrs(ma.StringCast("/ip4/127.0.0.1/tcp/0")), node.WithMDNS(false), node.WithDHT(false)}
	d, err := daemon.Start(context.Background(), daemon.WithConfig(cfg))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("local API serving:", d.APIAddr() != "")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fmt.Println("closed:", d.Close(ctx) == nil)
	// Output:
	// local API serving: true
	// closed: true
}
