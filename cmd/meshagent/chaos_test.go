//go:build chaos && unix

package main

// Fault and abuse scenarios (make chaos). Each TestChaos* test runs one
// scenario within a bounded time, asserts what a user relies on, and prints
// its figures as one line starting "chaos: <scenario>:". They are behind
// the chaos build tag because they take tens of seconds each and load the
// machine; make test does not run them.

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshagent/meshagent/rpc"
)

// figures prints a scenario's pass figures on one line (stdout, so make
// chaos can collect them) and into the test log.
func figures(t *testing.T, scenario, format string, args ...any) {
	t.Helper()
	line := fmt.Sprintf("chaos: %s: %s", scenario, fmt.Sprintf(format, args...))
	fmt.Println(line)
	t.Log(line)
}

// busSession is a bus client that survives its server: when the
// connection ends, the next use dials again, initializes with the same
// client id and subscribes again. It is used from one goroutine at a time
// except for handler, which the client's read goroutine calls.
type busSession struct {
	url, id string
	topics  []string
	handler func(ctx context.Context, method string, params json.RawMessage) (any, error)

	mu  sync.Mutex
	cl  *rpc.Client
	ups int // successful (re)connections
}

// client returns a live, initialized client, dialling until ctx ends.
func (s *busSession) client(ctx context.Context) (*rpc.Client, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cl != nil {
		select {
		case <-s.cl.Done():
			_ = s.cl.Close()
			s.cl = nil
		default:
			return s.cl, nil
		}
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		cl, err := s.dial(ctx)
		if err == nil {
			s.cl = cl
			s.ups++
			return cl, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%s: no connection: %w (last: %v)", s.id, ctx.Err(), err)
		case <-tick.C:
		}
	}
}

func (s *busSession) dial(ctx context.Context) (*rpc.Client, error) {
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	// The session initializes itself, with its own client id.
	opts := []rpc.ClientOption{rpc.WithoutInitialize()}
	if s.handler != nil {
		opts = append(opts, rpc.WithRequestHandler(s.handler))
	}
	cl, err := rpc.Dial(dctx, s.url, opts...)
	if err != nil {
		return nil, err
	}
	if err := cl.Call(dctx, "initialize", map[string]any{"clientId": s.id, "clientInfo": map[string]string{"name": "chaos"}}, nil); err != nil {
		_ = cl.Close()
		return nil, err
	}
	for _, topic := range s.topics {
		if err := cl.Call(dctx, "subscribe", map[string]any{"topic": topic}, nil); err != nil {
			_ = cl.Close()
			return nil, err
		}
	}
	return cl, nil
}

// drop closes the current connection, if any, so the next use redials.
func (s *busSession) drop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cl != nil {
		_ = s.cl.Close()
		s.cl = nil
	}
}

// connections returns how many times the session has connected.
func (s *busSession) connections() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ups
}

// stablePort returns a free loopback TCP port below the system's range of
// ephemeral ports, for a process the scenario restarts at the same
// address. A port from that range (what ":0" gives) may be taken, while the
// process is down, by any connection's local end, a dial of its own
// address included (TCP's self-connect, when the kernel picks that very
// port for a dial to it): then the restart cannot bind it.
func stablePort(t *testing.T) int {
	t.Helper()
	low := 32768 // Linux's default first ephemeral port
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				low = n
			}
		}
	}
	for range 200 {
		port := 10000 + rand.IntN(max(low-10000, 1))
		if port >= low {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue
		}
		_ = l.Close()
		return port
	}
	t.Fatalf("no free loopback port below %d", low)
	return 0
}
