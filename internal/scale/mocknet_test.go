package scale

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/meshagent/meshagent/node"
)

// mockNet is the in-memory network of one cluster. Every agent is
// linked to every other as it is added (mocknet dials only over a link),
// which is N²/2 links of a few hundred bytes each: about 150 MiB at
// N = 1,000, counted in the memory figures of both kinds alike.
type mockNet struct {
	mn    mocknet.Mocknet
	hosts []host.Host
}

// newMockNet returns a mocknet whose links all have the one-way latency
// and the bandwidth (bytes/s, shared by both directions of a link; 0:
// unlimited) given, closed at the end of the test, after every agent on
// it (cleanups run last-registered first).
func newMockNet(t testing.TB, latency time.Duration, bandwidth float64) *mockNet {
	mn := mocknet.New()
	mn.SetLinkDefaults(mocknet.LinkOptions{Latency: latency, Bandwidth: bandwidth})
	t.Cleanup(func() { _ = mn.Close() })
	return &mockNet{mn: mn}
}

// meshOptions is empty: mocknet's hosts have no connection manager to
// agree with.
func (m *mockNet) meshOptions() []node.Option { return nil }

// host adds agent i with key k, linked to every agent added before it.
// The address is only a name in mocknet: 10.x.y.z from i.
func (m *mockNet) host(k crypto.PrivKey, i int) (host.Host, error) {
	a, err := ma.NewMultiaddr(fmt.Sprintf("/ip4/10.%d.%d.%d/tcp/4001", (i>>16)&255, (i>>8)&255, i&255))
	if err != nil {
		return nil, err
	}
	h, err := m.mn.AddPeer(k, a)
	if err != nil {
		return nil, fmt.Errorf("mocknet: add agent %d: %w", i, err)
	}
	for _, o := range m.hosts {
		if _, err := m.mn.LinkPeers(h.ID(), o.ID()); err != nil {
			return nil, fmt.Errorf("mocknet: link agent %d: %w", i, err)
		}
	}
	m.hosts = append(m.hosts, h)
	return h, nil
}

// netLabel names a run's network for the CSV and the plots' legends:
// "loopback", "mock", or "mock 50ms" (and a bandwidth when one is set;
// "sim" likewise).
func netLabel(netw string, latency time.Duration, bandwidth float64) string {
	if netw != NetMock && netw != NetSim {
		return netw
	}
	l := netw
	if latency > 0 {
		l += " " + latency.String()
	}
	if bandwidth > 0 {
		l += " " + formatBandwidth(bandwidth)
	}
	return l
}

// parseBandwidth reads a bandwidth in bytes per second: a number with an
// optional suffix k, M or G (powers of 1000), e.g. "12.5M" (100 Mbit/s).
// Empty or "0" is unlimited.
func parseBandwidth(s string) (float64, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, nil
	}
	mult := 1.0
	switch s[len(s)-1] {
	case 'k', 'K':
		mult, s = 1e3, s[:len(s)-1]
	case 'M':
		mult, s = 1e6, s[:len(s)-1]
	case 'G':
		mult, s = 1e9, s[:len(s)-1]
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("bandwidth %q is not a non-negative number of bytes/s with an optional k, M or G", s)
	}
	return v * mult, nil
}

func formatBandwidth(b float64) string {
	switch {
	case b >= 1e9:
		return strconv.FormatFloat(b/1e9, 'g', 4, 64) + "GB/s"
	case b >= 1e6:
		return strconv.FormatFloat(b/1e6, 'g', 4, 64) + "MB/s"
	case b >= 1e3:
		return strconv.FormatFloat(b/1e3, 'g', 4, 64) + "kB/s"
	}
	return strconv.FormatFloat(b, 'g', 4, 64) + "B/s"
}

// peerInfo is h's address information, to bootstrap from.
func peerInfo(h host.Host) peer.AddrInfo { return peer.AddrInfo{ID: h.ID(), Addrs: h.Addrs()} }
