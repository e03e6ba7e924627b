//go:build chaos && unix

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/meshagent/meshagent/bus"
	"github.com/meshagent/meshagent/internal/meshtest"
	"github.com/meshagent/meshagent/internal/rpctest"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/rpc"
)

const (
	// floodConns is how many idle libp2p connections, each from a fresh
	// identity, are held open to a node (issue 12 saw about 125 lock new
	// peers out).
	floodConns = 300
	// floodHold is how long a flood is held while fresh honest peers or
	// clients keep arriving, one every floodProbeEvery.
	floodHold       = 15 * time.Second
	floodProbeEvery = time.Second
	// floodServed is how soon a fresh honest peer or client must be served.
	floodServed = 2 * time.Second
	// wsMaxClients is the WebSocket server's client limit in the flood;
	// wsFlood idle connections (more than the limit) never initialize.
	wsMaxClients = 32
	wsFlood      = 3 * wsMaxClients
)

// probes runs probe every floodProbeEvery for floodHold, each within
// floodServed, and returns how many were served in time, the slowest,
// and the first failure.
func probes(ctx context.Context, probe func(ctx context.Context, i int) error) (served, total int, slowest time.Duration, first error) {
	tick := time.NewTicker(floodProbeEvery)
	defer tick.Stop()
	end := time.Now().Add(floodHold)
	for i := 0; time.Now().Before(end); i++ {
		pctx, cancel := context.WithTimeout(ctx, floodServed)
		start := time.Now()
		err := probe(pctx, i)
		took := time.Since(start)
		cancel()
		total++
		slowest = max(slowest, took)
		if err == nil && took <= floodServed {
			served++
		} else if first == nil {
			first = fmt.Errorf("probe %d (%s): %w", i, took.Round(time.Millisecond), err)
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return served, total, slowest, ctx.Err()
		}
	}
	return served, total, slowest, first
}

// TestChaosLibp2pFlood: 300 idle libp2p connections from fresh identities
// are held open to a node process; throughout, a fresh honest peer (a new
// identity) arriving every second connects, is greeted and has its call
// answered within 2 s.
func TestChaosLibp2pFlood(t *testing.T) {
	dir := t.TempDir()
	caps := filepath.Join(dir, "caps.json")
	writeFile(t, caps, `[{"name": "echo", "handler": "echo"}]`)
	tg := startNode(t, "target", "--data", filepath.Join(dir, "target"), "--capabilities", caps)
	target := addrInfo(t, tg)
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()

	// The flood: bare hosts that connect and then do nothing.
	var (
		mu      sync.Mutex
		flood   []host.Host
		refused int
	)
	defer func() {
		for _, h := range flood {
			_ = h.Close()
		}
	}()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for range floodConns {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			k, _, err := crypto.GenerateEd25519Key(nil)
			if err != nil {
				t.Error(err)
				return
			}
			h, err := libp2p.New(libp2p.Identity(k), libp2p.NoListenAddrs, libp2p.DisableRelay())
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			flood = append(flood, h)
			mu.Unlock()
			cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
			defer ccancel()
			if err := h.Connect(cctx, target); err != nil {
				mu.Lock()
				refused++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	held := 0
	for _, h := range flood {
		if len(h.Network().ConnsToPeer(target.ID)) > 0 {
			held++
		}
	}

	fresh := 1000
	served, total, slowest, first := probes(ctx, func(pctx context.Context, i int) error {
		fresh++
		n := meshtest.Node(t, fresh)
		defer n.Close()
		if err := n.Connect(pctx, target); err != nil {
			return fmt.Errorf("connect: %w", err)
		}
		if _, err := n.WaitHello(pctx, target.ID); err != nil {
			return fmt.Errorf("hello: %w", err)
		}
		resp, err := n.Call(pctx, protocol.CallRequest{To: target.ID.String(), Action: "echo", Params: json.RawMessage(`{"i":1}`)})
		if err != nil {
			return fmt.Errorf("call: %w", err)
		}
		if resp.Status != protocol.StatusSuccess {
			return fmt.Errorf("call answered %+v", resp)
		}
		return nil
	})
	figures(t, "flood", "libp2p: %d idle connections from fresh identities attempted (%d refused, %d still held after the probes), %d/%d fresh honest peers served within %s, slowest %s",
		floodConns, refused, held, served, total, floodServed, slowest.Round(time.Millisecond))
	if served != total {
		t.Errorf("%d of %d fresh honest peers served within %s; first failure: %v", served, total, floodServed, first)
	}
}

// TestChaosWebSocketFlood: a bus server with a small client limit holds
// three times that many WebSocket connections that never send initialize;
// throughout, a fresh honest client arriving every second connects,
// initializes and has a message delivered within 2 s.
func TestChaosWebSocketFlood(t *testing.T) {
	mesh := meshtest.Node(t, 1100)
	limits := rpc.DefaultLimits()
	limits.MaxClients = wsMaxClients
	url := rpctest.Start(t, mesh, rpctest.WithBus(bus.WithTopics(mesh)), rpctest.WithRPC(rpc.WithLimits(limits))).URL
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()

	// A subscriber holding one slot, honest and initialized.
	sub := &busSession{url: url, id: "honest-sub", topics: []string{"probe:*"}, handler: func(context.Context, string, json.RawMessage) (any, error) {
		return map[string]any{"processed": true}, nil
	}}
	if _, err := sub.client(ctx); err != nil {
		t.Fatal(err)
	}
	defer sub.drop()

	var idle []*websocket.Conn
	defer func() {
		for _, c := range idle {
			_ = c.CloseNow()
		}
	}()
	refused := 0
	for range wsFlood {
		dctx, dcancel := context.WithTimeout(ctx, 5*time.Second)
		c, _, err := websocket.Dial(dctx, url, nil)
		dcancel()
		if err != nil {
			refused++
			continue
		}
		idle = append(idle, c)
	}

	served, total, slowest, first := probes(ctx, func(pctx context.Context, i int) error {
		cl, err := rpc.Dial(pctx, url, rpc.WithoutInitialize())
		if err != nil {
			return err
		}
		defer cl.Close()
		if err := cl.Call(pctx, "initialize", map[string]any{"clientId": fmt.Sprintf("fresh-%d", i), "clientInfo": map[string]string{"name": "probe"}}, nil); err != nil {
			return fmt.Errorf("initialize: %w", err)
		}
		var res bus.SendResult
		if err := cl.Call(pctx, "sendMessage", map[string]any{"topic": fmt.Sprintf("probe:%d", i), "payload": map[string]any{"type": "probe", "i": i}}, &res); err != nil {
			return fmt.Errorf("sendMessage: %w", err)
		}
		if !slices.ContainsFunc(res.Acks, func(a bus.Ack) bool { return a.ClientID == "honest-sub" && a.Processed }) {
			return fmt.Errorf("not delivered: %+v", res)
		}
		return nil
	})
	figures(t, "flood", "websocket: %d never-initializing connections against a limit of %d (%d refused at once), %d/%d fresh honest clients served within %s, slowest %s",
		wsFlood, wsMaxClients, refused, served, total, floodServed, slowest.Round(time.Millisecond))
	if served != total {
		t.Errorf("%d of %d fresh honest clients served within %s; first failure: %v", served, total, floodServed, first)
	}
	// The honest subscriber that was there first is still served.
	if _, err := sub.client(ctx); err != nil || sub.connections() != 1 {
		t.Errorf("the first subscriber lost its connection (%d connections, %v)", sub.connections(), err)
	}
}

// addrInfo returns a node process's peer id and addresses.
func addrInfo(t *testing.T, p *nodeProc) peer.AddrInfo {
	t.Helper()
	id, err := peer.Decode(p.started.AgentID)
	if err != nil {
		t.Fatal(err)
	}
	ai := peer.AddrInfo{ID: id}
	for _, a := range p.started.Addrs {
		info, err := peer.AddrInfoFromP2pAddr(ma.StringCast(a))
		if err != nil {
			t.Fatal(err)
		}
		ai.Addrs = append(ai.Addrs, info.Addrs...)
	}
	return ai
}
