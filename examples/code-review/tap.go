package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"sync"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	libp2pprotocol "github.com/libp2p/go-libp2p/core/protocol"

	"github.com/meshagent/meshagent/protocol"
)

// wireTap is a libp2p host that records every frame written to or read
// from the direct meshagent streams it opens (a hello and the answering
// hello; a request and its responses), in the order they cross it. A frame is uvarint(length) ‖ signature ‖ canonical
// envelope, so what it records is exactly what was signed and sent.
type wireTap struct {
	host.Host

	mu     sync.Mutex
	frames [][]byte // frame bodies: signature ‖ canonical envelope
}

// newWireTap wraps h.
func newWireTap(h host.Host) *wireTap { return &wireTap{Host: h} }

// tapped reports whether frames of protocol pid are recorded.
func tapped(pid libp2pprotocol.ID) bool {
	return pid == protocol.HelloProtocol || pid == protocol.RequestProtocol
}

// NewStream opens a stream and taps it when it is a direct meshagent stream.
func (t *wireTap) NewStream(ctx context.Context, p peer.ID, pids ...libp2pprotocol.ID) (network.Stream, error) {
	s, err := t.Host.NewStream(ctx, p, pids...)
	if err != nil || len(pids) != 1 || !tapped(pids[0]) {
		return s, err
	}
	return &tappedStream{Stream: s, tap: t}, nil
}

// record keeps one frame body.
func (t *wireTap) record(body []byte) {
	t.mu.Lock()
	t.frames = append(t.frames, body)
	t.mu.Unlock()
}

// Envelopes returns the recorded envelopes in their signed JSON form (the
// envelope with its "signature" member), in wire order.
func (t *wireTap) Envelopes() []json.RawMessage {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []json.RawMessage
	for _, body := range t.frames {
		sig, env, err := protocol.SplitSigned(body)
		if err != nil {
			continue
		}
		doc, err := protocol.SignedJSON(env, sig)
		if err != nil {
			continue
		}
		out = append(out, doc)
	}
	return out
}

// tappedStream cuts the bytes going each way into frames.
type tappedStream struct {
	network.Stream
	tap *wireTap

	rmu, wmu sync.Mutex
	in, out  []byte // bytes of a frame not yet complete
}

// Read reads from the stream and records the frames completed.
func (s *tappedStream) Read(p []byte) (int, error) {
	n, err := s.Stream.Read(p)
	if n > 0 {
		s.rmu.Lock()
		s.in = s.feed(s.in, p[:n])
		s.rmu.Unlock()
	}
	return n, err
}

// Write writes to the stream and records the frames completed.
func (s *tappedStream) Write(p []byte) (int, error) {
	n, err := s.Stream.Write(p)
	if n > 0 {
		s.wmu.Lock()
		s.out = s.feed(s.out, p[:n])
		s.wmu.Unlock()
	}
	return n, err
}

// feed appends b to the pending bytes buf, records each complete frame and
// returns what is left.
func (s *tappedStream) feed(buf, b []byte) []byte {
	buf = append(buf, b...)
	for {
		size, k := binary.Uvarint(buf)
		if k <= 0 || uint64(len(buf)-k) < size {
			return buf
		}
		s.tap.record(append([]byte(nil), buf[k:k+int(size)]...))
		buf = buf[k+int(size):]
	}
}
