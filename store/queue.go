package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Named queues share the outbox, its id and recipient indexes and the
// dead-letter queue with the bus's outbox (queue ""), and have a due index
// of their own, so that each consumer reads only its queue: the bus's in
// outbox_due (time ‖ seq), the others in outbox_qdue (queue ‖ 0 ‖ time ‖
// seq). The meta bucket keeps each named queue's size in bytes, so that a
// bound on it costs no scan.

// Bounds limits a named queue (EnqueueWithin). A zero field is no limit.
type Bounds struct {
	// PerRecipient bounds the queue's messages addressed to one Message.To.
	PerRecipient int
	// Bytes bounds the queue's payload and metadata bytes in total.
	Bytes int64
	// PerRecipientBytes bounds the queue's payload and metadata bytes
	// addressed to one Message.To.
	PerRecipientBytes int64
	// PerSender and PerSenderBytes bound the queue's messages, and their
	// payload and metadata bytes, addressed to one Message.To from one
	// Message.From: one sender's share of a recipient's bound.
	PerSender      int
	PerSenderBytes int64
	// SenderBytes bounds the queue's payload and metadata bytes from one
	// Message.From, whatever their recipients: one sender's share of the
	// whole queue. (Counted from the version that added it: what an
	// older build enqueued is not in the count.)
	SenderBytes int64
	// PoolBytes bounds the queue's payload and metadata bytes of the
	// messages in the enqueued message's Pool (Message.Pool), when it
	// names one: a part of the queue that one kind of message may fill,
	// keeping the rest for the others. (Counted from the version that
	// added it, as SenderBytes.)
	PoolBytes int64
}

// EnqueueWithin is Enqueue into m.Queue, refused with an error wrapping
// ErrFull when the message would take the queue past b. The check and the
// write are one transaction: concurrent enqueues cannot overshoot.
func (s *Store) EnqueueWithin(ctx context.Context, m Message, b Bounds) error {
	_, err := s.EnqueueDisplacing(ctx, m, b, time.Time{})
	return err
}

// EnqueueDisplacing is EnqueueWithin, except that a message its
// recipient's bounds (PerRecipient, PerRecipientBytes) refuse takes the
// place of messages addressed to the same recipient that it left for
// later (MarkLeft) at or before leftBefore, when deleting those makes it
// fit: see displace for which go first. It returns the messages it
// deleted, so that the caller can say so; none when it refuses m. A zero
// leftBefore displaces nothing.
func (s *Store) EnqueueDisplacing(ctx context.Context, m Message, b Bounds, leftBefore time.Time) ([]Message, error) {
	if m.Queue == "" && b != (Bounds{}) {
		return nil, invalidf("bounds apply to named queues only")
	}
	_, displaced, err := s.enqueueWithin(ctx, m, b, leftBefore)
	return displaced, err
}

// enqueueWithin is Enqueue and EnqueueDisplacing: b is zero for the bus's
// outbox.
func (s *Store) enqueueWithin(ctx context.Context, m Message, b Bounds, leftBefore time.Time) (string, []Message, error) {
	if err := s.prepare(&m); err != nil {
		return "", nil, err
	}
	if err := s.SpaceLow(); err != nil {
		return "", nil, err
	}
	if m.NextAttempt.IsZero() {
		m.NextAttempt = s.cfg.clock()
	}
	if err := checkTime("next attempt", m.NextAttempt); err != nil {
		return "", nil, err
	}
	if !m.Left.IsZero() {
		if err := checkTime("left", m.Left); err != nil {
			return "", nil, err
		}
	}
	size := int64(len(m.Payload) + len(m.Metadata))
	var displaced []Message
	err := s.update(ctx, func(tx *bolt.Tx) error {
		displaced = displaced[:0]
		id := []byte(m.ID)
		if bucket(tx, bucketOutboxIDs).Get(id) != nil {
			return fmt.Errorf("%w: message %s is already in the outbox", ErrExists, m.ID)
		}
		if bucket(tx, bucketDLQIDs).Get(id) != nil {
			return fmt.Errorf("%w: message %s is in the dead-letter queue", ErrExists, m.ID)
		}
		var freed int64
		if (b.PerRecipient > 0 || b.PerRecipientBytes > 0 || b.PerSender > 0 || b.PerSenderBytes > 0) && m.To != "" {
			victims, err := checkRecipient(tx, m, size, b, leftBefore)
			if err != nil {
				return err
			}
			for _, r := range victims {
				if err := deleteOutbox(tx, r); err != nil {
					return err
				}
				freed += int64(len(r.Payload) + len(r.Metadata))
				displaced = append(displaced, r.message())
			}
		}
		if b.SenderBytes > 0 && m.From != "" {
			used, err := metaCount(tx, metaSenderBytes(m.Queue, m.From))
			if err != nil {
				return err
			}
			if used+size > b.SenderBytes {
				return fmt.Errorf("%w: queue %s holds %d bytes from %s, a sender's limit in all is %d", ErrFull, m.Queue, used, m.From, b.SenderBytes)
			}
		}
		if b.PoolBytes > 0 && m.Pool != "" {
			used, err := metaCount(tx, metaPoolBytes(m.Queue, m.Pool))
			if err != nil {
				return err
			}
			if used+size > b.PoolBytes {
				return fmt.Errorf("%w: queue %s holds %d bytes in pool %s, its limit is %d", ErrFull, m.Queue, used, m.Pool, b.PoolBytes)
			}
		}
		if b.Bytes > 0 {
			used, err := queueBytes(tx, m.Queue)
			if err != nil {
				return err
			}
			if used+size > b.Bytes {
				// Rolled back, with any displacement: nothing changes.
				return fmt.Errorf("%w: queue %s holds %d bytes, the limit is %d", ErrFull, m.Queue, used+freed, b.Bytes)
			}
		}
		return putOutbox(tx, m)
	})
	if err != nil {
		return "", nil, fmt.Errorf("store: enqueue %s: %w", m.ID, err)
	}
	s.signals.fire(m.Queue)
	return m.ID, displaced, nil
}

// checkRecipient checks m, of size bytes, against the bounds of its
// recipient and its sender's share, and returns the messages it must
// displace to fit (none when it fits as it is).
func checkRecipient(tx *bolt.Tx, m Message, size int64, b Bounds, leftBefore time.Time) ([]msgRecord, error) {
	limit := b.PerRecipient
	if limit <= 0 || !leftBefore.IsZero() {
		limit = math.MaxInt // displacing needs every sender's count
	}
	all, from, err := usageTo(tx, m.Queue, m.To, m.From, limit)
	if err != nil {
		return nil, err
	}
	if b.PerSender > 0 && from.n >= b.PerSender {
		return nil, fmt.Errorf("%w: queue %s holds %d messages for %s from %s, a sender's limit", ErrFull, m.Queue, from.n, m.To, m.From)
	}
	if b.PerSenderBytes > 0 && from.bytes+size > b.PerSenderBytes {
		return nil, fmt.Errorf("%w: queue %s holds %d bytes for %s from %s, a sender's limit is %d", ErrFull, m.Queue, from.bytes, m.To, m.From, b.PerSenderBytes)
	}
	fits := func(all usage) bool {
		return (b.PerRecipient <= 0 || all.n < b.PerRecipient) && (b.PerRecipientBytes <= 0 || all.bytes+size <= b.PerRecipientBytes)
	}
	if fits(all) {
		return nil, nil
	}
	if !leftBefore.IsZero() {
		victims, err := displace(tx, m.Queue, m.To, all, leftBefore.UnixNano(), fits)
		if err != nil || victims != nil {
			return victims, err
		}
	}
	if b.PerRecipient > 0 && all.n >= b.PerRecipient {
		return nil, fmt.Errorf("%w: queue %s holds %d messages for %s, the limit", ErrFull, m.Queue, all.n, m.To)
	}
	return nil, fmt.Errorf("%w: queue %s holds %d bytes for %s, the limit is %d", ErrFull, m.Queue, all.bytes, m.To, b.PerRecipientBytes)
}

// CountFor returns how many messages of the named queue are addressed to
// to, reading through the index on To.
func (s *Store) CountFor(ctx context.Context, queue, to string) (int, error) {
	var n int
	err := s.view(ctx, func(tx *bolt.Tx) error {
		var err error
		n, err = countTo(tx, queue, to, math.MaxInt)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("store: count for %s: %w", to, err)
	}
	return n, nil
}

// Usage is what a named queue holds.
type Usage struct {
	// Bytes is the payload and metadata bytes of every message in the queue.
	Bytes int64
	// Recipients lists the distinct Message.To of the queue's messages.
	Recipients []string
}

// QueueUsage reports what the named queue holds. It reads the whole
// outbox: a consumer calls it once, when it starts.
func (s *Store) QueueUsage(ctx context.Context, queue string) (Usage, error) {
	var u Usage
	err := s.view(ctx, func(tx *bolt.Tx) error {
		u = Usage{}
		var err error
		if u.Bytes, err = queueBytes(tx, queue); err != nil {
			return err
		}
		seen := map[string]bool{}
		c := bucket(tx, bucketOutbox).Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			r, err := decodeMessage(bucketOutbox, k, v)
			if err != nil {
				return err
			}
			if r.Queue == queue && r.To != "" && !seen[r.To] {
				seen[r.To] = true
				u.Recipients = append(u.Recipients, r.To)
			}
		}
		return nil
	})
	if err != nil {
		return Usage{}, fmt.Errorf("store: queue usage %s: %w", queue, err)
	}
	return u, nil
}

// Signal returns a channel closed the next time a message is put in the
// named queue by EnqueueWithin or Replay: a consumer that sleeps until its
// next due time selects on it too, so that a replayed dead letter does not
// wait for that time.
func (s *Store) Signal(queue string) <-chan struct{} { return s.signals.get(queue) }

// queueSignals holds one channel per named queue, closed and replaced by
// fire.
type queueSignals struct {
	mu sync.Mutex
	m  map[string]chan struct{}
}

func (q *queueSignals) get(queue string) <-chan struct{} {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.m == nil {
		q.m = map[string]chan struct{}{}
	}
	c := q.m[queue]
	if c == nil {
		c = make(chan struct{})
		q.m[queue] = c
	}
	return c
}

func (q *queueSignals) fire(queue string) {
	if queue == "" {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if c := q.m[queue]; c != nil {
		close(c)
		delete(q.m, queue)
	}
}

// dueBucketName is the due index of queue.
func dueBucketName(queue string) string {
	if queue == "" {
		return bucketOutboxDue
	}
	return bucketOutboxQDue
}

func dueBucket(tx *bolt.Tx, queue string) *bolt.Bucket {
	return bucket(tx, dueBucketName(queue))
}

// dueKey is the due-index key of the entry sk of queue due at next.
func dueKey(queue string, next int64, sk []byte) []byte {
	if queue == "" {
		return concat(nanoKey(next), sk)
	}
	return concat([]byte(queue), []byte{0}, nanoKey(next), sk)
}

// scanDue calls fn with queue's due entries, earliest first, until fn
// returns false or an error.
func scanDue(tx *bolt.Tx, queue string, fn func(next int64, sk []byte) (bool, error)) error {
	name := dueBucketName(queue)
	c := bucket(tx, name).Cursor()
	var prefix []byte
	if queue != "" {
		prefix = concat([]byte(queue), []byte{0})
	}
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		rest := k[len(prefix):]
		if len(rest) != 16 {
			return &CorruptError{Bucket: name, Key: bytes.Clone(k), Err: fmt.Errorf("key is %d bytes after the queue, want 16", len(rest))}
		}
		more, err := fn(keyNano(rest[:8]), rest[8:])
		if err != nil || !more {
			return err
		}
	}
	return nil
}

// countTo counts queue's messages addressed to to, stopping at limit.
func countTo(tx *bolt.Tx, queue, to string, limit int) (int, error) {
	all, _, err := usageTo(tx, queue, to, "", limit)
	return all.n, err
}

// usage is a count of messages and their payload and metadata bytes.
type usage struct {
	n     int
	bytes int64
}

// usageTo counts queue's messages addressed to to, all of them and those
// from from, stopping at limit messages in all.
func usageTo(tx *bolt.Tx, queue, to, from string, limit int) (all, fromUsage usage, err error) {
	err = scanTo(tx, queue, to, nil, func(r msgRecord) bool {
		size := int64(len(r.Payload) + len(r.Metadata))
		all.n++
		all.bytes += size
		if from != "" && r.From == from {
			fromUsage.n++
			fromUsage.bytes += size
		}
		return all.n < limit
	})
	return all, fromUsage, err
}

// scanTo calls fn with queue's messages addressed to to in enqueue order,
// those after the entry whose sequence key is after when it is set, until
// fn returns false.
func scanTo(tx *bolt.Tx, queue, to string, after []byte, fn func(msgRecord) bool) error {
	prefix := concat([]byte(to), []byte{0})
	ob := bucket(tx, bucketOutbox)
	c := bucket(tx, bucketOutboxTo).Cursor()
	k, _ := c.Seek(prefix)
	if after != nil {
		// Past after, whether or not its entry is still there.
		start := concat(prefix, after)
		if k, _ = c.Seek(start); bytes.Equal(k, start) {
			k, _ = c.Next()
		}
	}
	for ; k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		sk := k[len(prefix):]
		v := ob.Get(sk)
		if v == nil {
			return &CorruptError{Bucket: bucketOutboxTo, Key: bytes.Clone(k), Err: errors.New("points at no outbox entry")}
		}
		r, err := decodeMessage(bucketOutbox, sk, v)
		if err != nil {
			return err
		}
		if r.Queue == queue && !fn(r) {
			return nil
		}
	}
	return nil
}

// PendingFor returns up to limit messages of the named queue addressed to
// to, in enqueue order, reading through the index on To, and a cursor:
// passed back as after, it returns the messages enqueued after the last
// one returned (whether or not that one is still there). after 0 starts
// at the first. It is how a mailbox pages through what it holds for one
// agent. limit <= 0 means all.
func (s *Store) PendingFor(ctx context.Context, queue, to string, after uint64, limit int) ([]Message, uint64, error) {
	if to == "" {
		return nil, 0, invalidf("pending without an addressee")
	}
	var out []Message
	last := after
	err := s.view(ctx, func(tx *bolt.Tx) error {
		out, last = out[:0], after
		var sk []byte
		if after > 0 {
			sk = seqKey(after)
		}
		return scanTo(tx, queue, to, sk, func(r msgRecord) bool {
			out = append(out, r.message())
			last = r.Seq
			return limit <= 0 || len(out) < limit
		})
	})
	if err != nil {
		return nil, 0, fmt.Errorf("store: pending for %s: %w", to, err)
	}
	return out, last, nil
}

// metaQueueBytes is the meta key of a named queue's size in bytes.
func metaQueueBytes(queue string) []byte {
	return concat([]byte("queue_bytes"), []byte{0}, []byte(queue))
}

func queueBytes(tx *bolt.Tx, queue string) (int64, error) {
	key := metaQueueBytes(queue)
	v := bucket(tx, bucketMeta).Get(key)
	if v == nil {
		return 0, nil
	}
	if len(v) != 8 {
		return 0, &CorruptError{Bucket: bucketMeta, Key: key, Err: errors.New("not 8 bytes")}
	}
	return int64(binary.BigEndian.Uint64(v)), nil
}

// addQueueBytes adds (sign 1) or removes (sign -1) r's size to its named
// queue's; the bus's outbox is not counted.
func addQueueBytes(tx *bolt.Tx, r msgRecord, sign int64) error {
	if r.Queue == "" {
		return nil
	}
	n, err := queueBytes(tx, r.Queue)
	if err != nil {
		return err
	}
	size := int64(len(r.Payload) + len(r.Metadata))
	n = max(n+sign*size, 0)
	if err := bucket(tx, bucketMeta).Put(metaQueueBytes(r.Queue), binary.BigEndian.AppendUint64(nil, uint64(n))); err != nil {
		return err
	}
	if r.Pool != "" {
		key := metaPoolBytes(r.Queue, r.Pool)
		pool, err := metaCount(tx, key)
		if err != nil {
			return err
		}
		if err := putMetaCount(tx, key, max(pool+sign*size, 0)); err != nil {
			return err
		}
	}
	if r.From == "" {
		return nil
	}
	key := metaSenderBytes(r.Queue, r.From)
	from, err := metaCount(tx, key)
	if err != nil {
		return err
	}
	return putMetaCount(tx, key, from+sign*size)
}

// metaPoolBytes is the meta key of the bytes a pool of a named queue
// holds (Bounds.PoolBytes).
func metaPoolBytes(queue, pool string) []byte {
	return concat([]byte("queue_pool_bytes"), []byte{0}, []byte(queue), []byte{0}, []byte(pool))
}

// metaSenderBytes is the meta key of the bytes one sender holds in a
// named queue (Bounds.SenderBytes).
func metaSenderBytes(queue, from string) []byte {
	return concat([]byte("queue_sender_bytes"), []byte{0}, []byte(queue), []byte{0}, []byte(from))
}
