package node

import (
	"context"
	"encoding/json"
	"github.com/libp2p/go-libp2p/core/event"
	"slices"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshagent/meshagent/protocol"
)

// maxHelloFrame bounds a hello: capability objects with schemas are small.
const maxHelloFrame = 256 << 10

func (n *Node) helloPayload() *protocol.Hello {
	return &protocol.Hello{
		Version:      protocol.HelloVersion,
		Features:     protocol.Features,
		Capabilities: n.Capabilities(),
		Seq:          n.services.version(),
		Mailboxes:    n.mailboxes.addrs,
	}
}

// identifyLoop starts a hello exchange with every peer that completes
// identify and speaks the hello protocol.
func (n *Node) identifyLoop() {
	for {
		select {
		case <-n.ctx.Done():
			return
		case ev, ok := <-n.events.Out():
			if !ok {
				return
			}
			e := ev.(event.EvtPeerIdentificationCompleted)
			n.mailboxConnected(e.Peer)
			if !slices.Contains(e.Protocols, protocol.HelloProtocol) {
				continue
			}
			p := e.Peer
			n.goTracked(func() { n.sayHello(p) })
		}
	}
}

// sayHello opens a hello stream to p, sends this agent's hello and reads
// the peer's. It measures the round trip as the peer's latency.
func (n *Node) sayHello(p peer.ID) {
	ctx, cancel := context.WithTimeout(n.ctx, n.cfg.Limits.IOTimeout)
	defer cancel()
	s, err := n.host.NewStream(ctx, p, protocol.HelloProtocol)
	if err != nil {
		n.log.Debug("hello: open stream", "remote_peer", p, "err", err)
		return
	}
	defer s.Close()
	_ = s.SetDeadline(time.Now().Add(n.cfg.Limits.IOTimeout))
	frame, err := n.sealFrame(protocol.TypeHello, p.String(), n.helloPayload())
	if err != nil {
		n.log.Error("hello: seal", "err", err)
		_ = s.Reset()
		return
	}
	start := time.Now()
	if _, err := s.Write(frame); err != nil {
		n.log.Debug("hello: write", "remote_peer", p, "err", err)
		_ = s.Reset()
		return
	}
	_ = s.CloseWrite()
	body, err := protocol.NewFrameReader(s, maxHelloFrame).Next()
	if err != nil {
		n.log.Debug("hello: read", "remote_peer", p, "err", err)
		_ = s.Reset()
		return
	}
	n.host.Peerstore().RecordLatency(p, time.Since(start))
	n.receiveHello(body, p)
}

// handleHello answers a peer's hello with this agent's.
func (n *Node) handleHello(s network.Stream) {
	if !n.track() {
		_ = s.Reset()
		return
	}
	defer n.wg.Done()
	defer s.Close()
	p := s.Conn().RemotePeer()
	// Each hello costs a signature verification: a peer gets a small
	// budget of them (helloRate), separate from its request budget.
	if !n.helloLimiter.allow(p) {
		n.log.Warn("hello rejected", "remote_peer", p, "err", "rate limited")
		_ = s.Reset()
		return
	}
	_ = s.SetDeadline(time.Now().Add(n.cfg.Limits.IOTimeout))
	body, err := protocol.NewFrameReader(s, maxHelloFrame).Next()
	if err != nil {
		n.log.Debug("hello: read", "remote_peer", p, "err", err)
		_ = s.Reset()
		return
	}
	if !n.receiveHello(body, p) {
		_ = s.Reset()
		return
	}
	frame, err := n.sealFrame(protocol.TypeHello, p.String(), n.helloPayload())
	if err != nil {
		_ = s.Reset()
		return
	}
	if _, err := s.Write(frame); err != nil {
		_ = s.Reset()
	}
}

// receiveHello verifies a hello and records what it says. It logs the hello
// when it is new or changed.
func (n *Node) receiveHello(frame []byte, p peer.ID) bool {
	e, err := n.openFrame(frame, p)
	if err != nil {
		n.log.Warn("hello rejected", "remote_peer", p, "err", err)
		return false
	}
	if e.Type != protocol.TypeHello {
		n.log.Warn("hello rejected", "remote_peer", p, "err", "not a hello: "+string(e.Type))
		return false
	}
	var h protocol.Hello
	if err := protocol.DecodePayload(e.Payload, "hello payload", &h); err != nil {
		n.log.Warn("hello rejected", "remote_peer", p, "err", err)
		return false
	}
	if err := h.CheckMailboxes(); err != nil {
		n.log.Warn("hello rejected", "remote_peer", p, "err", err)
		return false
	}
	valid := h.Capabilities[:0:0]
	for _, c := range h.Capabilities {
		if c.Validate() == nil {
			valid = append(valid, c)
		}
	}
	applied, changed, have := n.peers.apply(p, &peerState{name: e.From.Name, capabilities: valid, features: h.Features, lastHello: n.cfg.Now(), seq: h.Seq})
	if !applied {
		n.log.Debug("stale hello ignored", "remote_peer", p, "seq", h.Seq, "have", have)
		return true
	}
	n.noteMailboxes(p, h.Mailboxes)
	n.seen(p)
	if changed {
		names := make([]string, len(valid))
		for i, c := range valid {
			names[i] = c.Name
		}
		n.log.Info("hello", "remote_peer", p, "name", e.From.Name, "capabilities", names, "features", h.Features)
	}
	return true
}

func sameCapabilities(a, b []protocol.Capability) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		ja, _ := json.Marshal(a[i])
		jb, _ := json.Marshal(b[i])
		if string(ja) != string(jb) {
			return false
		}
	}
	return true
}
