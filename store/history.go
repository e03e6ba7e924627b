package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
)

// DefaultHistoryLimit is how many messages History returns when the query
// sets no limit; MaxHistoryLimit is the most it returns.
const (
	DefaultHistoryLimit = 100
	MaxHistoryLimit     = 10000
)

// HistoryQuery selects recorded messages. Fields left zero do not filter.
type HistoryQuery struct {
	// Agent keeps messages whose From or To is this agent.
	Agent string
	// Topic keeps messages of exactly this topic, or, when it ends in '*',
	// of every topic starting with what precedes the '*' ("inbound:*").
	// No other '*' is allowed; "*" alone matches every topic.
	Topic string
	// ConversationID keeps messages of this conversation.
	ConversationID string
	// Since keeps messages at or after it (inclusive).
	Since time.Time
	// Until keeps messages before it (exclusive).
	Until time.Time
	// Limit bounds the page; <= 0 means DefaultHistoryLimit, and it is
	// capped at MaxHistoryLimit.
	Limit int
	// Before is a paging cursor: the ID of the last message of the previous
	// page. Only messages older than it (by time, then id) are returned.
	// A cursor whose message has been pruned yields ErrNotFound.
	Before string
}

// Record adds m to the history, with its indexes, and returns after the
// transaction is fsync'd. It is idempotent on m.ID: recording an id that is
// already in the history keeps the first entry and returns nil, so a
// message delivered more than once is recorded once. A missing ID and Time
// are filled in on a copy.
func (s *Store) Record(ctx context.Context, m Message) error {
	put, id, err := s.recordPut(m)
	if err != nil {
		return err
	}
	if err := s.update(ctx, put); err != nil {
		return fmt.Errorf("store: record %s: %w", id, err)
	}
	return nil
}

// RecordAll records each of ms as Record does, all in one transaction, and
// returns after it is fsync'd: a writer with many messages at hand pays for
// one write instead of one each. A message that Record would refuse is
// left out and its error joined into the result; the others are recorded.
func (s *Store) RecordAll(ctx context.Context, ms []Message) error {
	var errs []error
	puts := make([]func(*bolt.Tx) error, 0, len(ms))
	for _, m := range ms {
		put, _, err := s.recordPut(m)
		if err != nil {
			errs = append(errs, fmt.Errorf("store: record %s: %w", m.ID, err))
			continue
		}
		puts = append(puts, put)
	}
	if len(puts) > 0 {
		err := s.update(ctx, func(tx *bolt.Tx) error {
			for _, put := range puts {
				if err := put(tx); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("store: record %d messages: %w", len(puts), err))
		}
	}
	return errors.Join(errs...)
}

// recordPut validates and encodes m (on a copy) and returns the write that
// adds it to the history in a transaction, and its id (filled in if m had
// none).
func (s *Store) recordPut(m Message) (func(*bolt.Tx) error, string, error) {
	if err := s.prepare(&m); err != nil {
		return nil, "", err
	}
	m.NextAttempt = time.Time{}
	r := toRecord(m)
	v, err := encode(r)
	if err != nil {
		return nil, "", err
	}
	pk := concat(nanoKey(r.Time), []byte(m.ID))
	id := pk[8:] // bbolt keeps keys until the commit: pk is never reused
	return func(tx *bolt.Tx) error {
		ids := appendBucket(tx, bucketHistoryIDs)
		if ids.Get(id) != nil {
			return nil
		}
		if err := appendBucket(tx, bucketHistory).Put(pk, v); err != nil {
			return err
		}
		if err := ids.Put(id, pk); err != nil {
			return err
		}
		if err := forIndexes(r, pk, func(b string, key []byte) error {
			return appendBucket(tx, b).Put(key, nil)
		}); err != nil {
			return err
		}
		return s.capHistory(tx, pk, historyBytesOf(r, pk, v))
	}, m.ID, nil
}

// appendFill is the fill percent of buckets that grow at their right edge
// (or at the right edge of each indexed value's range): their keys start
// with a time or a time-ordered id, so a page that splits is not written
// into again and is best left nearly full. Not 1.0: records written by
// concurrent senders arrive a little out of time order.
const appendFill = 0.9

// appendBucket is bucket(tx, name) for a bucket that grows in key order.
func appendBucket(tx *bolt.Tx, name string) *bolt.Bucket {
	b := bucket(tx, name)
	b.FillPercent = appendFill
	return b
}

// forIndexes calls fn with each index bucket and key of history record r
// stored at primary key pk.
func forIndexes(r msgRecord, pk []byte, fn func(bucket string, key []byte) error) error {
	return forIndexValues(r, func(b, value string) error {
		return fn(b, indexKey(value, pk))
	})
}

// forIndexValues calls fn with each index bucket and indexed value of
// history record r: its topic, its From and To agents (To once when it is
// From), and its conversation.
func forIndexValues(r msgRecord, fn func(bucket, value string) error) error {
	if err := fn(bucketIdxTopic, r.Topic); err != nil {
		return err
	}
	if r.From != "" {
		if err := fn(bucketIdxAgent, r.From); err != nil {
			return err
		}
	}
	if r.To != "" && r.To != r.From {
		if err := fn(bucketIdxAgent, r.To); err != nil {
			return err
		}
	}
	if r.ConversationID != "" {
		if err := fn(bucketIdxConv, r.ConversationID); err != nil {
			return err
		}
	}
	return nil
}

// History returns recorded messages matching q, newest first (by time,
// then by id). It reads through one secondary index, chosen in the order
// conversation, agent, exact topic, topic prefix, and checks the other
// fields on the records it reads; with none of those fields set it reads
// the history itself, newest first.
func (s *Store) History(ctx context.Context, q HistoryQuery) ([]Message, error) {
	limit := q.Limit
	if limit <= 0 {
		limit = DefaultHistoryLimit
	}
	limit = min(limit, MaxHistoryLimit)

	topic, topicPrefix := q.Topic, false
	if strings.HasSuffix(topic, "*") {
		topic, topicPrefix = strings.TrimSuffix(topic, "*"), true
	}
	if strings.Contains(topic, "*") {
		return nil, invalidf("topic pattern %q: only a trailing '*' is supported", q.Topic)
	}
	if topicPrefix && topic == "" {
		topicPrefix = false // "*" matches everything
	}
	for _, f := range []struct{ name, v string }{{"agent", q.Agent}, {"topic", topic}, {"conversation id", q.ConversationID}} {
		if err := checkKeyString(f.name, f.v); err != nil {
			return nil, err
		}
	}

	// Bounds on the 8-byte time ‖ id suffix: [lo, hi).
	var lo, hi []byte
	if !q.Since.IsZero() {
		if err := checkTime("since", q.Since); err != nil {
			return nil, err
		}
		lo = timeKey(q.Since)
	}
	if !q.Until.IsZero() {
		if err := checkTime("until", q.Until); err != nil {
			return nil, err
		}
		hi = timeKey(q.Until)
	}

	match := func(r msgRecord) bool {
		switch {
		case q.Agent != "" && r.From != q.Agent && r.To != q.Agent:
			return false
		case q.ConversationID != "" && r.ConversationID != q.ConversationID:
			return false
		case topicPrefix && !strings.HasPrefix(r.Topic, topic):
			return false
		case !topicPrefix && topic != "" && r.Topic != topic:
			return false
		}
		return true
	}

	var out []Message
	err := s.view(ctx, func(tx *bolt.Tx) error {
		if q.Before != "" {
			pk := bucket(tx, bucketHistoryIDs).Get([]byte(q.Before))
			if pk == nil {
				return fmt.Errorf("%w: cursor message %s is not in the history", ErrNotFound, q.Before)
			}
			if hi == nil || bytes.Compare(pk, hi) < 0 {
				hi = bytes.Clone(pk)
			}
		}
		hist := bucket(tx, bucketHistory)
		// emit fetches the primary record pk and appends it if it
		// matches; it reports whether the page is full.
		emit := func(pk []byte) (bool, error) {
			v := hist.Get(pk)
			if v == nil {
				return false, nil // index entry of a record being pruned
			}
			r, err := decodeMessage(bucketHistory, pk, v)
			if err != nil {
				return false, err
			}
			if match(r) {
				out = append(out, r.message())
			}
			return len(out) >= limit, nil
		}
		switch {
		case q.ConversationID != "":
			return scanBackward(ctx, bucketIdxConv, bucket(tx, bucketIdxConv), []byte(q.ConversationID+"\x00"), lo, hi, emit)
		case q.Agent != "":
			return scanBackward(ctx, bucketIdxAgent, bucket(tx, bucketIdxAgent), []byte(q.Agent+"\x00"), lo, hi, emit)
		case topic != "" && !topicPrefix:
			return scanBackward(ctx, bucketIdxTopic, bucket(tx, bucketIdxTopic), []byte(topic+"\x00"), lo, hi, emit)
		case topicPrefix:
			return scanPrefix(ctx, bucket(tx, bucketIdxTopic), []byte(topic), lo, hi, emit)
		default:
			return scanBackward(ctx, bucketHistory, hist, nil, lo, hi, emit)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("store: history: %w", err)
	}
	return out, nil
}

// ctxCheckEvery is how many entries a scan reads between context checks.
const ctxCheckEvery = 256

// scanBackward walks the keys prefix ‖ s of b with lo <= s < hi from the
// newest down, calling emit with each s (a history primary key) until it
// reports done.
func scanBackward(ctx context.Context, name string, b *bolt.Bucket, prefix, lo, hi []byte, emit func([]byte) (bool, error)) error {
	c := b.Cursor()
	var k []byte
	var end []byte // the first key after the range, or nil for the bucket's end
	if hi != nil {
		end = concat(prefix, hi)
	} else {
		end = successor(prefix)
	}
	if end != nil {
		k, _ = c.Seek(end)
	}
	if k == nil {
		k, _ = c.Last()
	} else {
		k, _ = c.Prev()
	}
	for n := 0; k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Prev() {
		if n++; n%ctxCheckEvery == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		pk := k[len(prefix):]
		if len(pk) < 8 {
			return &CorruptError{Bucket: name, Key: bytes.Clone(k), Err: errors.New("key too short")}
		}
		if hi != nil && bytes.Compare(pk, hi) >= 0 {
			continue
		}
		if lo != nil && bytes.Compare(pk, lo) < 0 {
			return nil
		}
		done, err := emit(pk)
		if err != nil || done {
			return err
		}
	}
	return nil
}

// scanPrefix collects the history keys of every index entry whose value
// starts with prefix and whose suffix is in [lo, hi), then emits them
// newest first. It reads every entry of the matching topics (not the whole
// history), because their keys are ordered by topic before time.
func scanPrefix(ctx context.Context, b *bolt.Bucket, prefix, lo, hi []byte, emit func([]byte) (bool, error)) error {
	var pks [][]byte
	c := b.Cursor()
	n := 0
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		if n++; n%ctxCheckEvery == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		i := bytes.IndexByte(k[len(prefix):], 0)
		if i < 0 || len(k)-(len(prefix)+i+1) < 8 {
			return &CorruptError{Bucket: bucketIdxTopic, Key: bytes.Clone(k), Err: errors.New("no value terminator or key too short")}
		}
		pk := k[len(prefix)+i+1:]
		if (lo != nil && bytes.Compare(pk, lo) < 0) || (hi != nil && bytes.Compare(pk, hi) >= 0) {
			continue
		}
		pks = append(pks, bytes.Clone(pk))
	}
	slices.SortFunc(pks, func(a, b []byte) int { return bytes.Compare(b, a) })
	for _, pk := range pks {
		done, err := emit(pk)
		if err != nil || done {
			return err
		}
	}
	return nil
}

// successor returns the smallest key greater than every key starting with
// prefix, or nil when there is none (an empty or all-0xff prefix).
func successor(prefix []byte) []byte {
	out := bytes.Clone(prefix)
	for i := len(out) - 1; i >= 0; i-- {
		if out[i] < 0xff {
			out[i]++
			return out[:i+1]
		}
	}
	return nil
}

// Prune deletes history recorded before now minus the retention, with its
// index entries, and returns how many messages it deleted. It works in
// transactions of a bounded size so that it never holds the writer for
// long. A record that cannot be decoded is deleted too (see
// deleteHistory) and logged. (The size cap, WithMaxHistoryBytes, is kept
// by Record itself.)
func (s *Store) Prune(ctx context.Context, now time.Time) (int, error) {
	cutoff := now.Add(-s.cfg.retention)
	if err := checkTime("prune cutoff", cutoff); err != nil {
		return 0, err
	}
	total, err := s.pruneBefore(ctx, timeKey(cutoff), func(tx *bolt.Tx, end []byte, limit int) (int, error) {
		hist, ids := bucket(tx, bucketHistory), bucket(tx, bucketHistoryIDs)
		c := hist.Cursor()
		var keys, vals [][]byte
		for k, v := c.First(); k != nil && len(keys) < limit && bytes.Compare(k, end) < 0; k, v = c.Next() {
			keys, vals = append(keys, bytes.Clone(k)), append(vals, bytes.Clone(v))
		}
		size, _, err := historySize(tx)
		if err != nil {
			return 0, err
		}
		for i, k := range keys {
			n, err := s.deleteHistory(tx, hist, ids, k, vals[i])
			if err != nil {
				return 0, err
			}
			size -= n
		}
		return len(keys), setHistorySize(tx, size)
	})
	if err != nil {
		return total, fmt.Errorf("store: prune: %w", err)
	}
	return total, nil
}

// pruneBefore runs del in transactions of at most pruneChunk deletions
// each, so that pruning never holds the writer for long, until a
// transaction deletes fewer than that; del deletes up to limit entries
// keyed before end (the cutoff's timeKey) and says how many.
func (s *Store) pruneBefore(ctx context.Context, end []byte, del func(tx *bolt.Tx, end []byte, limit int) (int, error)) (int, error) {
	const pruneChunk = 512
	total := 0
	for {
		n := 0
		err := s.update(ctx, func(tx *bolt.Tx) error {
			var err error
			n, err = del(tx, end, pruneChunk)
			return err
		})
		if err != nil {
			return total, err
		}
		total += n
		if n < pruneChunk {
			return total, nil
		}
	}
}

// deleteHistory deletes the history record at key k (value v) with its
// id and index entries, and returns the bytes it counted for. A record
// that cannot be decoded is deleted too (its index entries cannot be
// found; History skips index entries whose record is gone) and logged.
func (s *Store) deleteHistory(tx *bolt.Tx, hist, ids *bolt.Bucket, k, v []byte) (int64, error) {
	if err := hist.Delete(k); err != nil {
		return 0, err
	}
	if len(k) > 8 {
		if err := ids.Delete(k[8:]); err != nil {
			return 0, err
		}
	}
	r, err := decodeMessage(bucketHistory, k, v)
	if err != nil {
		s.cfg.logger.Warn("store: deleting an undecodable history record", "err", err)
		return int64(2*len(k) - 8 + len(v)), nil
	}
	if err := forIndexes(r, k, func(b string, key []byte) error {
		return bucket(tx, b).Delete(key)
	}); err != nil {
		return 0, err
	}
	return historyBytesOf(r, k, v), nil
}

// historyBytesOf is what one history record counts for against
// WithMaxHistoryBytes: its key and value, its id entry, its index keys.
func historyBytesOf(r msgRecord, pk, v []byte) int64 {
	n := int64(len(pk) + len(v) + len(pk) - 8 + len(pk))
	_ = forIndexValues(r, func(_, value string) error {
		n += int64(len(value) + 1 + len(pk)) // the length of its indexKey
		return nil
	})
	return n
}

// metaHistoryBytes is the meta key holding the history's size (8 bytes,
// big-endian), kept in step by every transaction that adds or deletes
// history. A file written before it existed gets it counted once.
var metaHistoryBytes = []byte("history_bytes")

// historySize reads the history's size, counting it if it is not stored
// (stored is then false).
func historySize(tx *bolt.Tx) (size int64, stored bool, err error) {
	if v := bucket(tx, bucketMeta).Get(metaHistoryBytes); v != nil {
		if len(v) != 8 {
			return 0, false, &CorruptError{Bucket: bucketMeta, Key: metaHistoryBytes, Err: errors.New("not 8 bytes")}
		}
		return int64(binary.BigEndian.Uint64(v)), true, nil
	}
	var n int64
	err = bucket(tx, bucketHistory).ForEach(func(k, v []byte) error {
		r, err := decodeMessage(bucketHistory, k, v)
		if err != nil {
			n += int64(2*len(k) - 8 + len(v))
			return nil
		}
		n += historyBytesOf(r, k, v)
		return nil
	})
	return n, false, err
}

func setHistorySize(tx *bolt.Tx, n int64) error {
	return bucket(tx, bucketMeta).Put(metaHistoryBytes, binary.BigEndian.AppendUint64(nil, uint64(max(n, 0))))
}

// capHistory counts a record of added bytes just written at pk, then
// deletes the oldest records until the history is within
// WithMaxHistoryBytes, never the one at pk.
func (s *Store) capHistory(tx *bolt.Tx, pk []byte, added int64) error {
	size, stored, err := historySize(tx)
	if err != nil {
		return err
	}
	if stored { // else the count included the new record
		size += added
	}
	hist, ids := bucket(tx, bucketHistory), bucket(tx, bucketHistoryIDs)
	for size > s.cfg.maxHistory {
		k, v := hist.Cursor().First()
		if k == nil || bytes.Equal(k, pk) {
			break
		}
		k, v = bytes.Clone(k), bytes.Clone(v)
		n, err := s.deleteHistory(tx, hist, ids, k, v)
		if err != nil {
			return err
		}
		size -= n
	}
	return setHistorySize(tx, size)
}
