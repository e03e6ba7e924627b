package pubsub

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"

	"github.com/meshagent/meshagent/protocol"
)

// TestHostileKeeperGivenUp: a keeper answering each query with one
// message that does not verify and a fresh cursor is given up after
// maxKeeperRejected messages, long before the fetch's deadline (it used
// to hold the fetch, and a durable resume, until the deadline); one
// announcing a large page of large frames is cut at MaxPageBytes.
func TestHostileKeeperGivenUp(t *testing.T) {
	for _, tc := range []struct {
		name        string
		count, size int
		maxQueries  int64
	}{
		{"garbage and a fresh cursor", 1, 64, maxKeeperRejected + 2},
		{"a huge announced page", 1000, 1 << 20, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kh, fh := newHost(t), newHost(t)
			var queries atomic.Int64
			kh.SetStreamHandler(protocol.StoreProtocol, func(s network.Stream) {
				defer s.Close()
				fr := protocol.NewFrameReader(s, MaxQueryBytes)
				garbage := make([]byte, tc.size)
				for i := range garbage {
					garbage[i] = 'x'
				}
				for {
					if _, err := fr.Next(); err != nil {
						return
					}
					n := queries.Add(1)
					buf := protocol.AppendFrame(nil, fmt.Appendf(nil, `{"count":%d,"next":"c%d"}`, tc.count, n))
					for range tc.count {
						if _, err := s.Write(buf); err != nil {
							return
						}
						buf = protocol.AppendFrame(nil, garbage)
					}
					if _, err := s.Write(buf); err != nil {
						return
					}
				}
			})
			fetcher := newBus(t, fh)
			connect(t, fh, kh)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			start := time.Now()
			_, st, err := fetcher.FetchHistory(ctx, "news:*", time.Time{})
			took := time.Since(start)
			t.Logf("%d queries, %d fetched, %d rejected, %s: %v", queries.Load(), st.Fetched, st.Rejected, took, err)
			if !errors.Is(err, ErrNoKeepers) {
				t.Fatalf("fetch from a hostile keeper only: %v, want ErrNoKeepers", err)
			}
			if took > 5*time.Second || queries.Load() > tc.maxQueries {
				t.Fatalf("gave up after %s and %d queries", took, queries.Load())
			}
		})
	}
}
