package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	libp2pprotocol "github.com/libp2p/go-libp2p/core/protocol"

	"github.com/meshagent/meshagent/protocol"
)

// wireTap is a libp2p host that records every frame of the hello and
// request streams it opens, both ways, in the order they cross it. A frame
// is uvarint(length) ‖ signature ‖ canonical envelope: exactly what was
// signed and sent. node.WithHost takes it in place of the host it wraps.
type wireTap struct {
	host.Host

	mu        sync.Mutex
	envelopes []json.RawMessage // in signed JSON form, in wire order
}

// NewStream opens a stream and taps it when it is a direct meshagent stream.
func (t *wireTap) NewStream(ctx context.Context, p peer.ID, pids ...libp2pprotocol.ID) (network.Stream, error) {
	s, err := t.Host.NewStream(ctx, p, pids...)
	if err != nil || len(pids) != 1 || pids[0] != protocol.HelloProtocol && pids[0] != protocol.RequestProtocol {
		return s, err
	}
	return &tappedStream{Stream: s, tap: t}, nil
}

// Envelopes returns the recorded envelopes in their signed JSON form (the
// envelope with its signature member), in wire order.
func (t *wireTap) Envelopes() []json.RawMessage {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]json.RawMessage(nil), t.envelopes...)
}

// tappedStream cuts the bytes going each way into frames: in and out hold
// the bytes of a frame not yet complete.
type tappedStream struct {
	network.Stream
	tap     *wireTap
	in, out []byte
}

func (s *tappedStream) Read(p []byte) (int, error) {
	n, err := s.Stream.Read(p)
	s.in = s.tap.feed(s.in, p[:n])
	return n, err
}

func (s *tappedStream) Write(p []byte) (int, error) {
	n, err := s.Stream.Write(p)
	s.out = s.tap.feed(s.out, p[:n])
	return n, err
}

// feed appends b to buf, records each envelope it completes and returns
// what is left. A stream is read by one goroutine and written by one, so
// each buffer has one user; the tap's lock orders the envelopes.
func (t *wireTap) feed(buf, b []byte) []byte {
	buf = append(buf, b...)
	t.mu.Lock()
	defer t.mu.Unlock()
	for {
		size, k := binary.Uvarint(buf)
		if k <= 0 || uint64(len(buf)-k) < size {
			return buf
		}
		sig, env, err := protocol.SplitSigned(buf[k : k+int(size)])
		if err == nil {
			if doc, err := protocol.SignedJSON(env, sig); err == nil {
				t.envelopes = append(t.envelopes, doc)
			}
		}
		buf = buf[k+int(size):]
	}
}

// writeTranscript writes envelopes to dir, one file per envelope in seed
// 002's file-exchange naming (colons dropped) and all in wire order in
// transcript.jsonl, and prints each with the names of its agents once it
// has verified.
func writeTranscript(out io.Writer, dir string, envelopes []json.RawMessage, names map[string]string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	fmt.Fprintf(out, "transcript: %d signed envelopes in %s\n", len(envelopes), dir)
	var all []byte
	for _, doc := range envelopes {
		e, _, err := protocol.OpenJSON(doc)
		if err != nil {
			return fmt.Errorf("an envelope of the transcript does not verify: %w", err)
		}
		to := "" // every envelope of a direct stream names its recipient
		if e.To != nil {
			to = e.To.AgentID
		}
		name := fmt.Sprintf("%s-%s-%s-%s.json", e.From.AgentID, to, strings.ReplaceAll(e.Timestamp, ":", ""), e.ID)
		if err := os.WriteFile(filepath.Join(dir, name), append(doc, '\n'), 0o644); err != nil {
			return err
		}
		all = append(append(all, doc...), '\n')
		var p struct{ Action, Status, Code string }
		_ = json.Unmarshal(e.Payload, &p)
		line := fmt.Sprintf("  %-8s %-9s -> %-9s verified %s", e.Type, names[e.From.AgentID], names[to], p.Action+p.Status+p.Code)
		fmt.Fprintln(out, strings.TrimRight(line, " "))
	}
	return os.WriteFile(filepath.Join(dir, "transcript.jsonl"), all, 0o644)
}
