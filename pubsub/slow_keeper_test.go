package pubsub

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"

	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/protocol"
)

// TestSlowKeeperHoldsNoResume (issue 23, defect 5): a keeper that trickles
// valid messages, one a page with a fresh cursor, never ending, holds a
// durable resume only until its own deadline, half the catch-up's window,
// and the honest keeper's messages are all caught up (it used to hold the
// resume for the whole window).
func TestSlowKeeperHoldsNoResume(t *testing.T) {
	archive := newMemArchive()
	kh, ph := newHost(t), newHost(t)
	_ = newBus(t, kh, WithArchive(archive, "news:*"))
	pub := newBus(t, ph)
	connect(t, ph, kh)
	_ = collect(t, pub, "news:*")
	// A saved position from before the messages: the subscription below
	// resumes.
	floor := time.Now().Add(-time.Second)
	positions := &memPositions{}
	raw, err := (&position{pattern: "news:*", floor: floor, seen: map[seenKey]time.Time{}}).encode()
	if err != nil {
		t.Fatal(err)
	}
	if err := positions.SavePosition(context.Background(), "reader", raw); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, func() error {
		if len(pub.Peers("news:0")) < 1 {
			return errors.New("the publisher does not see the keeper yet")
		}
		return nil
	})
	publishN(t, pub, archive, 0, 5)
	archive.mu.Lock()
	kept := make([][]byte, len(archive.msgs))
	for i, m := range archive.msgs {
		kept[i] = m.Data
	}
	archive.mu.Unlock()

	// The slow keeper: valid messages, one a tick of 200 ms, for ever
	// (until the test ends).
	slow := newHost(t)
	var sent atomic.Int64
	trickle := time.NewTicker(200 * time.Millisecond)
	done := make(chan struct{})
	t.Cleanup(func() { trickle.Stop(); close(done) })
	slow.SetStreamHandler(protocol.StoreProtocol, func(s network.Stream) {
		defer s.Close()
		fr := protocol.NewFrameReader(s, MaxQueryBytes)
		for {
			if _, err := fr.Next(); err != nil {
				return
			}
			select {
			case <-trickle.C:
			case <-done:
				return
			}
			n := sent.Add(1)
			page := protocol.AppendFrame(nil, fmt.Appendf(nil, `{"count":1,"next":"c%d"}`, n))
			page = protocol.AppendFrame(page, kept[int(n)%len(kept)])
			if _, err := s.Write(page); err != nil {
				return
			}
		}
	})

	sh := newHost(t)
	sub := newBus(t, sh, WithPositions(positions))
	connect(t, sh, kh)
	connect(t, sh, slow)
	const window = 8 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), window)
	defer cancel()
	r := &durableReader{}
	start := time.Now()
	d, err := sub.SubscribeDurable(ctx, "news:*", "reader", r.take)
	took := time.Since(start)
	if err != nil {
		t.Fatalf("resume with a slow keeper: %v", err)
	}
	defer d.Cancel()
	t.Logf("resumed in %s (window %s); the slow keeper sent %d pages", took, window, sent.Load())
	if took > window*3/4 {
		t.Fatalf("the slow keeper held the resume for %s of its %s window", took, window)
	}
	if sent.Load() < 2 {
		t.Fatalf("the slow keeper was asked %d times: it was not read", sent.Load())
	}
	r.waitFor(t, 5)
	if got := fmt.Sprint(r.numbers()); got != "[0 1 2 3 4]" {
		t.Fatalf("caught up %s, want 0 to 4 in order", got)
	}
}
