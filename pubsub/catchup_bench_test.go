package pubsub

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/meshagent/meshagent/store"
)

// storeArchive is node's adapter of the store, for the benchmark.
type storeArchive struct{ st *store.Store }

func (a storeArchive) Keep(ctx context.Context, m KeptMessage) error {
	_, err := a.st.Keep(ctx, store.KeptMessage{Stream: m.Family, Topic: m.Topic, Key: m.Key, Time: m.Time, Data: m.Data})
	return err
}

func (a storeArchive) Page(ctx context.Context, q ArchiveQuery) (ArchivePage, error) {
	p, err := a.st.Kept(ctx, store.KeptQuery{Stream: q.Family, Since: q.Since, Until: q.Until, After: q.After, Limit: q.Limit, MaxBytes: q.MaxBytes, Match: q.Match})
	if err != nil {
		return ArchivePage{}, err
	}
	out := ArchivePage{Next: p.Next, Messages: make([]KeptMessage, len(p.Messages))}
	for i, m := range p.Messages {
		out.Messages[i] = KeptMessage{Family: m.Stream, Topic: m.Topic, Key: m.Key, Time: m.Time, Data: m.Data}
	}
	return out, nil
}

// BenchmarkCatchup measures a durable subscriber's catch-up: fetching
// and verifying 10,000 kept messages (about 200 bytes each) from a keeper
// on another host over the store protocol, the keeper reading them from
// its bbolt store. msgs/s is messages fetched and verified per second.
func BenchmarkCatchup(b *testing.B) {
	const n = 10_000
	st, err := store.Open(filepath.Join(b.TempDir(), "keeper.db"), store.WithPruneInterval(0))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	archive := storeArchive{st}
	signer := newSigner(b)
	start := time.Now().Add(-time.Hour)
	msgs := make(chan KeptMessage, n)
	for i := range n {
		msgs <- keptAt(b, signer, "news:1", start.Add(time.Duration(i)*time.Millisecond), i)
	}
	close(msgs)
	var wg sync.WaitGroup
	for range 64 { // writers share the store's group commits
		wg.Go(func() {
			for m := range msgs {
				if err := archive.Keep(context.Background(), m); err != nil {
					b.Error(err)
				}
			}
		})
	}
	wg.Wait()
	kh, fh := newHost(b), newHost(b)
	newBus(b, kh, WithArchive(archive))
	fetcher := newBus(b, fh)
	connect(b, fh, kh)
	b.ResetTimer()
	begin := time.Now()
	for b.Loop() {
		got, st, err := fetcher.FetchHistory(context.Background(), "news:*", time.Time{})
		if err != nil || len(got) != n || st.Keepers != 1 {
			b.Fatalf("fetched %d of %d from %d keepers: %v", len(got), n, st.Keepers, err)
		}
	}
	b.ReportMetric(float64(n*b.N)/time.Since(begin).Seconds(), "msgs/s")
}
