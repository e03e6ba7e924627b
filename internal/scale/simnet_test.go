package scale

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/p2p/protocol/ping"
	"github.com/libp2p/go-libp2p/x/simlibp2p"
	"github.com/marcopolo/simnet"
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
}

// newSimNet returns a started simulated network with the latency and the
// per-agent bandwidth (bytes/s; 0: defaultSimBandwidth) given, closed at
// the end of the test after every agent on it.
func newSimNet(t testing.TB, latency time.Duration, bandwidth float64) *simNet {
	if bandwidth <= 0 {
		bandwidth = defaultSimBandwidth
	}
	link := simnet.LinkSettings{BitsPerSecond: int(bandwidth * 8)}
	sn := &simnet.Simnet{LatencyFunc: simnet.StaticLatency(latency)}
	sn.Start()
	t.Cleanup(sn.Close)
	return &simNet{t: t, sn: sn, settings: simnet.NodeBiDiLinkSettings{Uplink: link, Downlink: link}}
}

// host starts agent i's host with key k on the simulated network, at a
// public IPv4 address derived from i. The host is closed at the end of
// the test, after the agent on it (a node does not close a host it was
// given) and before the network.
func (s *simNet) host(k crypto.PrivKey, i int) (host.Host, error) {
	addr := fmt.Sprintf("/ip4/%s/udp/8000/quic-v1", simnet.IntToPublicIPv4(i))
	h, err := libp2p.New(
		libp2p.Identity(k),
		libp2p.ListenAddrStrings(addr),
		simlibp2p.QUICSimnet(s.sn, s.settings),
		libp2p.DisableIdentifyAddressDiscovery(),
		libp2p.ResourceManager(&network.NullResourceManager{}),
	)
	if err != nil {
		return nil, fmt.Errorf("simnet: agent %d: %w", i, err)
	}
	s.t.Cleanup(func() { _ = h.Close() })
	return h, nil
}

// Two agents on the simulated network see its latency: a ping's round
// trip is two one-way latencies, never less (loopback or a network that
// ignored the setting would answer in microseconds).
func TestSimNetLatency(t *testing.T) {
	const oneWay = 25 * time.Millisecond
	sn := newSimNet(t, oneWay, 0)
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
