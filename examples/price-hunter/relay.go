package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	ma "github.com/multiformats/go-multiaddr"

	"github.com/meshagent/meshagent/lobby"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/sign"
	"github.com/meshagent/meshagent/store"
)

// inProcessRelay is what `meshagent relay` runs, reduced to the lobby: a
// node in the mesh, seed 000's lobby at /lobby, and a store for the
// lobby's registrations.
type inProcessRelay struct {
	node  *node.Node
	lobby *lobby.Lobby
	st    *store.Store
	dir   string
	hs    *http.Server
	done  chan error
	url   string // ws://127.0.0.1:<port>/lobby
}

// startRelay starts a relay on loopback with a store in a temporary
// directory. Like the relay command, it offers the lobby agents'
// capabilities in the mesh as its node's own, each served by Lobby.Serve
// (through the lobby's bridge).
func startRelay(log *slog.Logger) (_ *inProcessRelay, err error) {
	r := &inProcessRelay{done: make(chan error, 1)}
	defer func() {
		if err != nil {
			err = errors.Join(err, r.close())
		}
	}()
	if r.dir, err = os.MkdirTemp("", "price-hunter-"); err != nil {
		return nil, fmt.Errorf("temporary directory: %w", err)
	}
	if r.st, err = store.Open(filepath.Join(r.dir, "relay.db"), store.WithLogger(log)); err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	key, err := sign.GenerateKey()
	if err != nil {
		return nil, fmt.Errorf("identity: %w", err)
	}
	// The directory (DHT) stays on: it is how the mesh finds the lobby's
	// capabilities and how the lobby finds the mesh's.
	r.node, err = node.New(node.WithIdentity(key), node.WithName("relay"),
		node.WithListenAddrs(ma.StringCast("/ip4/127.0.0.1/tcp/0")), node.WithMDNS(false),
		node.WithTopics(false), node.WithPresence(node.Presence{}), node.WithLogger(log))
	if err != nil {
		return nil, fmt.Errorf("start the relay's node: %w", err)
	}
	r.lobby, err = lobby.New(r.node, r.st, lobby.WithLogger(log), lobby.WithDiscoverTimeout(2*time.Second))
	if err != nil {
		return nil, fmt.Errorf("lobby: %w", err)
	}
	r.lobby.Bridge(lobby.OffererFunc(func(ss []lobby.Service) error {
		ns := make([]node.Service, 0, len(ss))
		for _, s := range ss {
			ns = append(ns, lobbyService(s))
		}
		return r.node.SetServices(ns)
	}))
	mux := http.NewServeMux()
	mux.Handle("/lobby", r.lobby)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("lobby listener: %w", err)
	}
	r.hs = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { r.done <- r.hs.Serve(l) }()
	r.url = "ws://" + l.Addr().String() + "/lobby"
	return r, nil
}

// lobbyService serves a lobby capability as one of the node's own, for
// the requester as the node verified it.
func lobbyService(s lobby.Service) node.Service {
	return node.Service{Capability: s.Capability, Handler: node.HandlerFunc(func(ctx context.Context, call *node.Call) (json.RawMessage, error) {
		return s.Serve(ctx, call.Requester(), call.Request.Params)
	})}
}

// close stops the lobby, its listener, the node and the store, and
// removes the temporary directory.
func (r *inProcessRelay) close() error {
	var errs []error
	if r.lobby != nil {
		errs = append(errs, r.lobby.Close())
	}
	if r.hs != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		errs = append(errs, r.hs.Shutdown(ctx))
		cancel()
		if err := <-r.done; !errors.Is(err, http.ErrServerClosed) {
			errs = append(errs, err)
		}
	}
	if r.node != nil {
		errs = append(errs, r.node.Close())
	}
	if r.st != nil {
		errs = append(errs, r.st.Close())
	}
	if r.dir != "" {
		errs = append(errs, os.RemoveAll(r.dir))
	}
	return errors.Join(errs...)
}
