package store

import (
	"context"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// A recipient's bound in a named queue can be reached with messages it
// has already seen and could not take: a mailbox's agent fetched them and
// found no handler for them. Those are kept for a late handler while
// there is room, and lose their place first when there is none
// (EnqueueDisplacing): MarkLeft records when the recipient first left
// each one.

// MarkLeft records that the recipient to fetched the messages ids of the
// named queue and left them for later, at at, unless an earlier time is
// recorded (Message.Left keeps the first). Ids not in the queue, or
// addressed to another recipient, are skipped: an agent marks only its
// own messages, and a message acknowledged meanwhile is gone. It returns
// how many it marked.
func (s *Store) MarkLeft(ctx context.Context, queue, to string, at time.Time, ids ...string) (int, error) {
	if queue == "" || to == "" {
		return 0, invalidf("mark left needs a named queue and a recipient")
	}
	if err := checkTime("left", at); err != nil {
		return 0, err
	}
	var n int
	err := s.update(ctx, func(tx *bolt.Tx) error {
		n = 0
		ob := bucket(tx, bucketOutbox)
		for _, id := range ids {
			r, ok, err := getOutbox(tx, id)
			if err != nil {
				return err
			}
			if !ok || r.Queue != queue || r.To != to || r.Left != 0 {
				continue
			}
			r.Left = at.UnixNano()
			v, err := encode(r)
			if err != nil {
				return err
			}
			if err := ob.Put(seqKey(r.Seq), v); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("store: mark left: %w", err)
	}
	return n, nil
}

// displace chooses messages of queue addressed to to, left at or before
// leftBefore (Unix nanoseconds), whose deletion makes fits true of what
// the recipient then holds (all, before). One at a time, each from the
// sender that holds the most messages for to at that point (the earliest
// left message breaks a tie), its earliest in enqueue order: a sender
// spread over many identities loses its place before one that sent a
// few. It returns nil when all of them together are not enough.
func displace(tx *bolt.Tx, queue, to string, all usage, leftBefore int64, fits func(usage) bool) ([]msgRecord, error) {
	held := map[string]int{}
	left := map[string][]msgRecord{}
	err := scanTo(tx, queue, to, nil, func(r msgRecord) bool {
		held[r.From]++
		if r.Left != 0 && r.Left <= leftBefore {
			left[r.From] = append(left[r.From], r)
		}
		return true
	})
	if err != nil || len(left) == 0 {
		return nil, err
	}
	var victims []msgRecord
	for !fits(all) {
		from := ""
		for f, rs := range left {
			if len(rs) == 0 {
				continue
			}
			if from == "" || held[f] > held[from] || held[f] == held[from] && earlier(rs[0], left[from][0]) {
				from = f
			}
		}
		if from == "" {
			return nil, nil
		}
		r := left[from][0]
		left[from] = left[from][1:]
		held[from]--
		all.n--
		all.bytes -= int64(len(r.Payload) + len(r.Metadata))
		victims = append(victims, r)
	}
	return victims, nil
}

// earlier reports whether a was left before b (then enqueued before it).
func earlier(a, b msgRecord) bool {
	if a.Left != b.Left {
		return a.Left < b.Left
	}
	return a.Seq < b.Seq
}
