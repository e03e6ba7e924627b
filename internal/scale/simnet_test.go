package scale

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/p2p/net/connmgr"
	"github.com/libp2p/go-libp2p/p2p/protocol/ping"
	"github.com/libp2p/go-libp2p/x/simlibp2p"
	"github.com/marcopolo/simnet"

	"github.com/meshagent/meshagent/node"
)

// defaultSimBandwidth is an agent's access link on the simulated network
// when -scale.bw is empty: 100 Mbit/s each way. simnet needs a rate (it
// paces packets by it); unlimited is not one of its settings.
const defaultSimBandwidth = 12.5e6

// simNet is go-libp2p's simulated packet network (x/simlibp2p over
// marcopolo/simnet): every agent is a QUIC endpoint with its own access
// link (uplink and downlink of the bandwidth given, queued with fq_codel
// as a router would) and every packet takes the one-way latency given.
// Unlike mocknet, whose streams hold a write until the one before it has
// arrived, QUIC pipelines writes under its congestion window as TCP does
// across a WAN, so the figures with latency are a WAN's, not a window of
// one's. Transport security is QUIC's TLS, as on a real network.
type simNet struct {
	t        testing.TB
	sn       *simnet.Simnet
	settings simnet.NodeBiDiLinkSettings
	// conns bounds every host's connections (both kinds alike); nil:
	// go-libp2p's default connection manager (160 low, 192 high, one
	// minute's grace), which at N below 192 never trims.
	conns *node.ConnLimits
}

// newSimNet returns a started simulated network with the latency and the
// per-agent bandwidth (bytes/s; 0: defaultSimBandwidth) given, closed at
// the end of the test after every agent on it. With conns every host it
// hands out has a connection manager with conns' watermarks, grace period
// and trim interval.
func newSimNet(t testing.TB, latency time.Duration, bandwidth float64, conns *node.ConnLimits) *simNet {
	if bandwidth <= 0 {
		bandwidth = defaultSimBandwidth
	}
	link := simnet.LinkSettings{BitsPerSecond: int(bandwidth * 8)}
	sn := &simnet.Simnet{LatencyFunc: simnet.StaticLatency(latency)}
	sn.Start()
	t.Cleanup(sn.Close)
	return &simNet{t: t, sn: sn, settings: simnet.NodeBiDiLinkSettings{Uplink: link, Downlink: link}, conns: conns}
}

// host starts agent i's host with key k on the simulated network, at a
// public IPv4 address derived from i. The host is closed at the end of
// the test, after the agent on it (a node does not close a host it was
// given) and before the network.
func (s *simNet) host(k crypto.PrivKey, i int) (host.Host, error) {
	addr := fmt.Sprintf("/ip4/%s/udp/8000/quic-v1", simnet.IntToPublicIPv4(i))
	opts := []libp2p.Option{
		libp2p.Identity(k),
		libp2p.ListenAddrStrings(addr),
		simlibp2p.QUICSimnet(s.sn, s.settings),
		libp2p.DisableIdentifyAddressDiscovery(),
		libp2p.ResourceManager(&network.NullResourceManager{}),
	}
	if l := s.conns; l != nil {
		// The same manager the node builds for a host of its own
		// (node/host.go), for the raw baseline's hosts too.
		cm, err := connmgr.NewConnManager(l.LowWater, l.HighWater, connmgr.WithGracePeriod(l.GracePeriod), connmgr.WithSilencePeriod(l.TrimInterval))
		if err != nil {
			return nil, fmt.Errorf("simnet: agent %d: connection manager: %w", i, err)
		}
		opts = append(opts, libp2p.ConnectionManager(cm))
	}
	h, err := libp2p.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("simnet: agent %d: %w", i, err)
	}
	s.t.Cleanup(func() { _ = h.Close() })
	return h, nil
}

// meshOptions gives a mesh node on this network the same limits as its
// host's connection manager, so that the node's own inbound trim (at
// HighWater) agrees with it.
func (s *simNet) meshOptions() []node.Option {
	if s.conns == nil {
		return nil
	}
	return []node.Option{node.WithConnLimits(*s.conns)}
}

// Two agents on the simulated network see its latency: a ping's round
// trip is two one-way latencies, never less (loopback or a network that
// ignored the setting would answer in microseconds).
func TestSimNetLatency(t *testing.T) {
	const oneWay = 25 * time.Millisecond
	sn := newSimNet(t, oneWay, 0, nil)
	var hosts [2]host.Host
	for i := range hosts {
		k, _, err := crypto.GenerateEd25519Key(nil)
		if err != nil {
			t.Fatal(err)
		}
		if hosts[i], err = sn.host(k, i); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := hosts[0].Connect(ctx, peerInfo(hosts[1])); err != nil {
		t.Fatalf("connect over the simulated network: %v", err)
	}
	ping.NewPingService(hosts[1])
	res := <-ping.Ping(ctx, hosts[0], hosts[1].ID())
	if res.Error != nil {
		t.Fatalf("ping: %v", res.Error)
	}
	if res.RTT < 2*oneWay || res.RTT > 2*oneWay+5*time.Second {
		t.Fatalf("round trip %s over links of %s one way, want at least %s", res.RTT, oneWay, 2*oneWay)
	}
}

// An agent on the simulated network with -scale.conns' bound keeps no
// more than HIGH connections once their grace period is over: one host
// dialled by five others with watermarks 1:2 is trimmed to at most 2 on
// virtual time. With go-libp2p's default manager (160:192) all five stay.
func TestSimNetConnBound(t *testing.T) {
	for _, tc := range []struct {
		conns string
		max   int
	}{
		{"1:2", 2},
		{"libp2p", 5},
	} {
		t.Run(tc.conns, func(t *testing.T) {
			bound, err := parseConns(tc.conns)
			if err != nil {
				t.Fatal(err)
			}
			synctest.Test(t, func(t *testing.T) {
				sn := newSimNet(t, 5*time.Millisecond, 0, bound)
				hub := simHost(t, sn, 0)
				for i := 1; i <= 5; i++ {
					h := simHost(t, sn, i)
					if err := h.Connect(t.Context(), peerInfo(hub)); err != nil {
						t.Fatalf("connect %d: %v", i, err)
					}
				}
				if got := len(hub.Network().Peers()); got != 5 {
					t.Fatalf("%d peers connected, want 5", got)
				}
				// Not a wait for the network: inside the synctest bubble this
				// sleep takes no real time. It moves the bubble's clock past
				// the grace period and five trim intervals, the time the
				// bound is defined by; synctest.Wait then lets every trim
				// due by then finish before the count is read.
				time.Sleep(node.DefaultConnLimits().GracePeriod + 5*time.Second)
				synctest.Wait()
				if got := len(hub.Network().Peers()); got > tc.max || (tc.conns == "libp2p" && got != 5) {
					t.Fatalf("%d peers connected after the grace period with -scale.conns %s, want at most %d", got, tc.conns, tc.max)
				}
			})
		})
	}
}

// simHost starts agent i on sn with a fresh key.
func simHost(t *testing.T, sn *simNet, i int) host.Host {
	t.Helper()
	k, _, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	h, err := sn.host(k, i)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// parseConns takes libp2p or LOW:HIGH within the node's limits, and
// refuses anything else with an error.
func TestParseConns(t *testing.T) {
	for _, tc := range []struct {
		in        string
		lo, hi    int
		nil_, bad bool
	}{
		{in: "libp2p", nil_: true},
		{in: "32:64", lo: 32, hi: 64},
		{in: "1:2", lo: 1, hi: 2},
		{in: "", bad: true},
		{in: "64", bad: true},
		{in: "0:10", bad: true},
		{in: "10:10", bad: true},
		{in: "20:10", bad: true},
		{in: "10:256", bad: true},
		{in: "a:10", bad: true},
		{in: "10:b", bad: true},
		{in: "-1:10", bad: true},
	} {
		l, err := parseConns(tc.in)
		switch {
		case tc.bad:
			if err == nil {
				t.Errorf("parseConns(%q) = %+v, want an error", tc.in, l)
			}
		case err != nil:
			t.Errorf("parseConns(%q): %v", tc.in, err)
		case tc.nil_ != (l == nil):
			t.Errorf("parseConns(%q) = %+v, nil want %v", tc.in, l, tc.nil_)
		case l != nil && (l.LowWater != tc.lo || l.HighWater != tc.hi || l.GracePeriod != node.DefaultConnLimits().GracePeriod):
			t.Errorf("parseConns(%q) = %+v, want %d:%d with the node's grace period", tc.in, l, tc.lo, tc.hi)
		}
	}
}
