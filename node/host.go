package node

import (
	"errors"
	"fmt"
	"slices"
	"syscall"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/host/autorelay"
	"github.com/libp2p/go-libp2p/p2p/host/peerstore/pstoremem"
	rcmgr "github.com/libp2p/go-libp2p/p2p/host/resource-manager"
	"github.com/libp2p/go-libp2p/p2p/muxer/yamux"
	"github.com/libp2p/go-libp2p/p2p/net/connmgr"
	"github.com/libp2p/go-libp2p/p2p/net/swarm"
	relayv2 "github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/relay"
	"github.com/libp2p/go-libp2p/p2p/security/noise"
	quic "github.com/libp2p/go-libp2p/p2p/transport/quic"
	"github.com/libp2p/go-libp2p/p2p/transport/tcp"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/meshagent/meshagent/protocol"
)

// DefaultListenAddrs are used when no listen address is configured.
var DefaultListenAddrs = []string{"/ip4/0.0.0.0/tcp/0", "/ip4/0.0.0.0/udp/0/quic-v1"}

// Resource budget of a node's libp2p resource manager. The figures are
// explicit rather than auto-scaled from the machine, so a node behaves the
// same everywhere; connection limits come from ConnLimits.
const (
	rcmgrMemory = 1 << 30
	rcmgrFDs    = 4096
)

func newHost(cfg Config) (host.Host, error) {
	listen := cfg.ListenAddrs
	if len(listen) == 0 {
		for _, s := range DefaultListenAddrs {
			listen = append(listen, ma.StringCast(s))
		}
	}
	limits := rcmgr.DefaultLimits
	libp2p.SetDefaultServiceLimits(&limits)
	// meshagent's own protocols: many concurrent requests share a stream
	// per peer, so a handful of streams per peer is plenty; hello streams
	// are short-lived.
	limits.AddProtocolLimit(protocol.RequestProtocol,
		rcmgr.BaseLimit{StreamsInbound: 2048, StreamsOutbound: 2048, Streams: 4096, Memory: 256 << 20},
		rcmgr.BaseLimitIncrease{})
	limits.AddProtocolPeerLimit(protocol.RequestProtocol,
		rcmgr.BaseLimit{StreamsInbound: 16, StreamsOutbound: 16, Streams: 32, Memory: 64 << 20},
		rcmgr.BaseLimitIncrease{})
	limits.AddProtocolLimit(protocol.HelloProtocol,
		rcmgr.BaseLimit{StreamsInbound: 512, StreamsOutbound: 512, Streams: 1024, Memory: 16 << 20},
		rcmgr.BaseLimitIncrease{})
	limits.AddProtocolPeerLimit(protocol.HelloProtocol,
		rcmgr.BaseLimit{StreamsInbound: 4, StreamsOutbound: 4, Streams: 8, Memory: 4 << 20},
		rcmgr.BaseLimitIncrease{})
	// Connection limits are explicit (ConnLimits), not scaled: the
	// connection manager's watermarks must sit below them.
	conns := rcmgr.PartialLimitConfig{System: rcmgr.ResourceLimits{
		ConnsInbound: rcmgr.LimitVal(cfg.Conns.MaxInbound),
		Conns:        rcmgr.LimitVal(cfg.Conns.MaxConns),
	}}.Build(limits.Scale(rcmgrMemory, rcmgrFDs))
	rm, err := rcmgr.NewResourceManager(rcmgr.NewFixedLimiter(conns))
	if err != nil {
		return nil, fmt.Errorf("node: resource manager: %w", err)
	}
	if cfg.Metrics != nil {
		// The resource manager's figures (libp2p_rcmgr_…) go to the node's
		// registry too. Only those: go-libp2p's other subsystems name
		// theirs against Prometheus's conventions (promtool check metrics
		// refuses them), and keep reporting to the default registry, which
		// nothing serves. They are package-level in go-libp2p: two nodes
		// of one process share them.
		rcmgr.MustRegisterWith(cfg.Metrics.Registry)
	}
	cm, err := connmgr.NewConnManager(cfg.Conns.LowWater, cfg.Conns.HighWater,
		connmgr.WithGracePeriod(cfg.Conns.GracePeriod), connmgr.WithSilencePeriod(cfg.Conns.TrimInterval))
	if err != nil {
		return nil, fmt.Errorf("node: connection manager: %w", err)
	}
	ps, err := pstoremem.NewPeerstore()
	if err != nil {
		return nil, fmt.Errorf("node: peerstore: %w", err)
	}
	opts := []libp2p.Option{
		libp2p.Identity(cfg.Identity),
		libp2p.Peerstore(ps),
		libp2p.NoListenAddrs, // see listenOn below
		// NoListenAddrs also switches the circuit relay transport off; a
		// node must still dial and accept /p2p-circuit addresses (peers
		// behind NAT, reached through a relay), as libp2p's default has it.
		libp2p.EnableRelay(),
		// DCUtR: when a peer reaches this node through a relay, both sides
		// dial each other's observed public addresses at once, and a direct
		// connection replaces the relayed one where the NATs allow it (QUIC
		// through most home NATs; TCP rarely, as dials do not reuse the
		// listen port). It needs a public address observed by a peer, so on
		// a LAN or loopback it stays idle.
		libp2p.EnableHolePunching(),
		// No SO_REUSEPORT: with it a second node (or any process setting
		// it) binds the same TCP port silently and the kernel splits
		// incoming connections between them. QUIC's listener binds its
		// UDP port exclusively already; its reuse is in-process only.
		libp2p.Transport(tcp.NewTCPTransport, tcp.DisableReuseport()),
		libp2p.Transport(quic.NewTransport),
		libp2p.Security(noise.ID, noise.New),
		libp2p.Muxer(yamux.ID, yamux.DefaultTransport),
		libp2p.ResourceManager(rm),
		libp2p.ConnectionManager(cm),
	}
	if cfg.RelayService {
		// Relayed connections are not "limited": meshagent's streams are
		// long-lived and multiplexed, and a per-circuit byte or time cap
		// would cut them mid-call. The relay's own resource limits
		// (reservations, circuits per peer) still bound what it carries.
		// go-libp2p starts the service only once AutoNAT finds the host
		// publicly reachable; a relay is deployed to be reachable, so say so.
		// It also answers AutoNAT (v1 and v2): peers ask it to dial them
		// back to learn whether they are reachable, and which of their
		// addresses are. Every node runs the v1 client, libp2p's default.
		opts = append(opts, libp2p.EnableRelayService(relayv2.WithInfiniteLimits()), libp2p.ForceReachabilityPublic(),
			libp2p.EnableNATService(), libp2p.EnableAutoNATv2())
	}
	if len(cfg.StaticRelays) > 0 {
		relays, err := peer.AddrInfosFromP2pAddrs(cfg.StaticRelays...)
		if err != nil {
			return nil, fmt.Errorf("node: relay addresses must end in /p2p/<agent id>: %w", err)
		}
		// Advertise <relay>/p2p-circuit for every static relay: autorelay
		// derives circuit addresses only from a relay's public addresses,
		// so a relay on a LAN or loopback would otherwise give none.
		var circuits []ma.Multiaddr
		for _, r := range cfg.StaticRelays {
			circuits = append(circuits, r.Encapsulate(ma.StringCast("/p2p-circuit")))
		}
		opts = append(opts,
			libp2p.EnableRelay(),
			libp2p.EnableAutoRelayWithStaticRelays(relays, autorelay.WithBackoff(10*time.Second)),
			libp2p.ForceReachabilityPrivate(),
			libp2p.AddrsFactory(func(addrs []ma.Multiaddr) []ma.Multiaddr {
				out := slices.Clone(addrs)
				for _, c := range circuits {
					if !slices.ContainsFunc(out, c.Equal) {
						out = append(out, c)
					}
				}
				return out
			}))
	}
	opts = append(opts, cfg.HostOptions...)
	h, err := libp2p.New(opts...)
	if err != nil {
		// libp2p closes what it built, not what it was given.
		_ = cm.Close()
		_ = rm.Close()
		_ = ps.Close()
		return nil, fmt.Errorf("node: libp2p host: %w", err)
	}
	// Listen after construction, one address at a time: libp2p.New
	// succeeds when any one address binds (a node asked for an address it
	// did not get must say so, not run half-listening), flattens the bind
	// errors to text, and leaks its swarm when none binds.
	for _, a := range listen {
		if err := listenOn(h, a); err != nil {
			_ = h.Close()
			return nil, err
		}
	}
	return h, nil
}

// listenOn makes h listen on a, or returns a *ListenError naming a.
func listenOn(h host.Host, a ma.Multiaddr) error {
	var err error
	if sw, ok := h.Network().(*swarm.Swarm); ok {
		err = sw.AddListenAddr(a) // keeps the bind error's type
	} else {
		err = h.Network().Listen(a)
	}
	if err == nil {
		return nil
	}
	return &ListenError{Addr: a.String(), InUse: errors.Is(err, syscall.EADDRINUSE), Err: err}
}

// clearBackoff forgets failed dials to p, so a redial happens now rather
// than after libp2p's exponential backoff (which grows to minutes).
func clearBackoff(h host.Host, p peer.ID) {
	if sw, ok := h.Network().(*swarm.Swarm); ok {
		sw.Backoff().Clear(p)
	}
}
