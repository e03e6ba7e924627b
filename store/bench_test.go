package store

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	bolt "go.etcd.io/bbolt"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// withSoloCommits makes every write its own commit and fsync.
func withSoloCommits() Option {
	return func(c *config) error {
		c.soloCommits = true
		return nil
	}
}

// BenchmarkEnqueue measures fsync'd Enqueue and reports ops/s. Serially
// every call is its own commit and fsync, so the disk's fsync latency
// bounds it. In parallel (p = goroutines per GOMAXPROCS), concurrent calls
// share commits: "group" is the store's leader/follower group commit (the
// default), "bolt-batch-D" is bbolt's DB.Batch with MaxBatchDelay D
// (WithBatchDelay), "solo" is one commit per call.
//
//	go test ./store -run '^$' -bench Enqueue -benchtime 2s
func BenchmarkEnqueue(b *testing.B) {
	payload := json.RawMessage(`{"text":"hello from the bench","n":12345,"tags":["a","b","c"]}`)
	run := func(b *testing.B, parallelism int, opts ...Option) {
		s, err := Open(filepath.Join(b.TempDir(), "bench.db"), append([]Option{WithPruneInterval(0)}, opts...)...)
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		var n atomic.Int64
		enqueue := func() error {
			m := Message{ID: fmt.Sprint("m", n.Add(1)), Topic: "inbound:bench", From: "agent", Payload: payload}
			return s.Enqueue(ctx, m)
		}
		b.ReportAllocs()
		start := time.Now()
		if parallelism == 0 {
			for b.Loop() {
				if err := enqueue(); err != nil {
					b.Fatal(err)
				}
			}
		} else {
			b.SetParallelism(parallelism)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := enqueue(); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		b.ReportMetric(float64(n.Load())/time.Since(start).Seconds(), "ops/s")
	}
	b.Run("serial", func(b *testing.B) { run(b, 0) })
	for _, p := range []int{1, 16} {
		b.Run(fmt.Sprintf("parallel-p%d/group", p), func(b *testing.B) { run(b, p) })
		b.Run(fmt.Sprintf("parallel-p%d/bolt-batch-500us", p), func(b *testing.B) { run(b, p, WithBatchDelay(500*time.Microsecond)) })
		b.Run(fmt.Sprintf("parallel-p%d/bolt-batch-10ms", p), func(b *testing.B) { run(b, p, WithBatchDelay(10*time.Millisecond)) })
		b.Run(fmt.Sprintf("parallel-p%d/solo", p), func(b *testing.B) { run(b, p, withSoloCommits()) })
	}
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

// BenchmarkRecord measures fsync'd history appends: 32 writers, each
// recording one message at a time under a few topics and agents, their
// writes sharing group commits (and 4 writers recording batches). "time-ordered" ids are NewID's (the bus's);
// "random" ids are 128 random bits, which land all over the id index. It
// reports records per second and the process CPU per record, which holds
// better than throughput on a loaded machine.
//
//	go test ./store -run '^$' -bench Record -benchtime 20000x
func BenchmarkRecord(b *testing.B) {
	random := func() string {
		var id [16]byte
		_, _ = rand.Read(id[:])
		return hex.EncodeToString(id[:])
	}
	b.Run("ids=time-ordered", func(b *testing.B) { benchRecord(b, NewID, 16, 1) })
	b.Run("ids=random", func(b *testing.B) { benchRecord(b, random, 16, 1) })
	// As the bus writes history: 4 writers, each recording a batch at a
	// time with RecordAll.
	b.Run("ids=time-ordered/RecordAll-64", func(b *testing.B) { benchRecord(b, NewID, 2, 64) })
}

// benchRecord runs p writers per GOMAXPROCS, each recording batch
// messages per call (Record when batch is 1, else RecordAll).
func benchRecord(b *testing.B, newID func() string, p, batch int) {
	payload := json.RawMessage(`{"type":"plaintext_message","text":"message 12345"}`)
	s, err := Open(filepath.Join(b.TempDir(), "bench.db"), WithPruneInterval(0))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	var n atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(p)
	cpu := processCPU()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		ms := make([]Message, 0, batch)
		flush := func() bool {
			var err error
			if batch == 1 {
				err = s.Record(ctx, ms[0])
			} else {
				err = s.RecordAll(ctx, ms)
			}
			ms = ms[:0]
			if err != nil {
				b.Error(err)
			}
			return err == nil
		}
		for pb.Next() {
			i := n.Add(1)
			ms = append(ms, Message{ID: newID(), Topic: fmt.Sprint("bench:", i%4), From: fmt.Sprint("sender-", i%8), Payload: payload})
			if len(ms) == batch && !flush() {
				return
			}
		}
		if len(ms) > 0 {
			flush()
		}
	})
	elapsed := time.Since(start)
	b.ReportMetric(float64(n.Load())/elapsed.Seconds(), "records/s")
	b.ReportMetric(float64(processCPU()-cpu)/float64(n.Load())/1e3, "cpu-µs/record")
}

// processCPU is the process's user and system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
