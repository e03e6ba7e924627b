package store

import (
	"encoding/json"
	"fmt"
	bolt "go.etcd.io/bbolt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkEnqueue measures fsync'd Enqueue. Serially every call is its own
// commit and fsync, so the disk's fsync latency bounds it; in parallel,
// concurrent calls share group commits (db.Batch). "unbatched-parallel"
// turns group commit off (WithBatchDelay(0)) to show what it buys. Each
// reports ops/s.
//
//	go test ./store -run '^$' -bench Enqueue -benchtime 2s
func BenchmarkEnqueue(b *testing.B) {
	payload := json.RawMessage(`{"text":"hello from the bench","n":12345,"tags":["a","b","c"]}`)
	run := func(b *testing.B, parallel bool, opts ...Option) {
		s, err := Open(filepath.Join(b.TempDir(), "bench.db"), append([]Option{WithPruneInterval(0)}, opts...)...)
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		var n atomic.Int64
		b.ReportAllocs()
		start := time.Now()
		b.ResetTimer()
		if parallel {
			b.SetParallelism(16) // 16 × GOMAXPROCS writers, as a busy bus has
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					m := Message{ID: fmt.Sprint("m", n.Add(1)), Topic: "inbound:bench", From: "agent", Payload: payload}
					if err := s.Enqueue(ctx, m); err != nil {
						b.Error(err)
						return
					}
				}
			})
		} else {
			for b.Loop() {
				m := Message{ID: fmt.Sprint("m", n.Add(1)), Topic: "inbound:bench", From: "agent", Payload: payload}
				if err := s.Enqueue(ctx, m); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.StopTimer()
		b.ReportMetric(float64(n.Load())/time.Since(start).Seconds(), "ops/s")
	}
	b.Run("serial", func(b *testing.B) { run(b, false) })
	b.Run("parallel", func(b *testing.B) { run(b, true) })
	b.Run("unbatched-parallel", func(b *testing.B) { run(b, true, WithBatchDelay(0)) })
}

// BenchmarkHistoryByAgent measures a page of 50 by agent out of 20,000
// recorded messages from 100 agents.
func BenchmarkHistoryByAgent(b *testing.B) {
	s, err := Open(filepath.Join(b.TempDir(), "bench.db"), WithPruneInterval(0))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ms := make([]Message, 0, 20000)
	for i := range 20000 {
		ms = append(ms, Message{ID: fmt.Sprint("h", i), Topic: fmt.Sprint("inbound:", i%10), From: fmt.Sprint("agent-", i%100),
			Payload: json.RawMessage(`{"n":1}`), Time: t0.Add(time.Duration(i) * time.Millisecond)})
	}
	if err := s.recordAll(ms); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		got, err := s.History(ctx, HistoryQuery{Agent: "agent-7", Limit: 50})
		if err != nil || len(got) != 50 {
			b.Fatal(len(got), err)
		}
	}
}

// recordAll records ms in one transaction (a bench fixture).
func (s *Store) recordAll(ms []Message) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		for _, m := range ms {
			if err := s.prepare(&m); err != nil {
				return err
			}
			r := toRecord(m)
			v, err := encode(r)
			if err != nil {
				return err
			}
			pk := concat(nanoKey(r.Time), []byte(m.ID))
			if err := tx.Bucket([]byte(bucketHistory)).Put(pk, v); err != nil {
				return err
			}
			if err := tx.Bucket([]byte(bucketHistoryIDs)).Put([]byte(m.ID), pk); err != nil {
				return err
			}
			if err := forIndexes(r, pk, func(b string, k []byte) error { return tx.Bucket([]byte(b)).Put(k, nil) }); err != nil {
				return err
			}
		}
		return nil
	})
}
