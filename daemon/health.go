package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/meshagent/meshagent/metrics"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/store"
)

// readyChecks are what /readyz asks of a running node: its host listens,
// its store (if any) answers, and, when bootstrap peers were given, at least one of
// them is connected.
func readyChecks(n *node.Node, st *store.Store, bootstrap []ma.Multiaddr) map[string]metrics.Check {
	checks := map[string]metrics.Check{
		"host": func() error {
			if len(n.Host().Network().ListenAddresses()) == 0 {
				return errors.New("not listening on any address")
			}
			return nil
		},
	}
	if st != nil {
		checks["store"] = func() error {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			if _, _, err := st.NextDue(ctx); err != nil {
				return fmt.Errorf("the message store does not answer: %w", err)
			}
			return nil
		}
	}
	var peers []peer.ID
	for _, m := range bootstrap {
		if ai, err := peer.AddrInfoFromP2pAddr(m); err == nil {
			peers = append(peers, ai.ID)
		}
	}
	if len(peers) > 0 {
		checks["bootstrap"] = func() error {
			for _, p := range peers {
				if n.Host().Network().Connectedness(p) == network.Connected {
					return nil
				}
			}
			return fmt.Errorf("none of the %d bootstrap peers is connected", len(peers))
		}
	}
	return checks
}

// opsServer is the metrics listener (Config.MetricsAddr): /metrics, /healthz and /readyz
// only, so they can be scraped from elsewhere while the local API stays
// on loopback.
type opsServer struct {
	addr string // the address bound
	srv  *http.Server
	done chan struct{} // closed when Serve has returned
}

// startOps serves h on addr and returns once listening.
func startOps(ctx context.Context, addr string, h http.Handler, log *slog.Logger) (*opsServer, error) {
	ln, err := new(net.ListenConfig).Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, &ListenError{Listener: ListenerMetrics, Addr: addr, Err: err}
	}
	o := &opsServer{
		addr: ln.Addr().String(),
		srv: &http.Server{
			Handler:           h,
			ReadHeaderTimeout: 10 * time.Second,
			ReadTimeout:       10 * time.Second,
			WriteTimeout:      30 * time.Second,
			MaxHeaderBytes:    16 << 10,
			ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
		},
		done: make(chan struct{}),
	}
	go func() {
		defer close(o.done)
		if err := o.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics listener stopped", "err", err)
		}
	}()
	log.Info("serving metrics", "addr", ln.Addr().String())
	return o, nil
}

// close stops the listener and waits for its goroutine, or until ctx ends.
func (o *opsServer) close(ctx context.Context) error {
	err := o.srv.Shutdown(ctx)
	select {
	case <-o.done:
	case <-ctx.Done():
	}
	if err != nil {
		return fmt.Errorf("metrics listener: %w", err)
	}
	return nil
}
