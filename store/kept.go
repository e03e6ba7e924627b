package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Bounds of kept messages and of a page of them.
const (
	// DefaultKeptRetention is how long kept messages are kept: seven days.
	DefaultKeptRetention = 7 * 24 * time.Hour
	// DefaultMaxKeptBytes bounds the kept messages' size: 128 MiB.
	DefaultMaxKeptBytes = 128 << 20
	// MaxKeptPage is the most messages one Kept call returns.
	MaxKeptPage = 1000
	// maxKeptScan bounds the entries one Kept call reads, matching or
	// not, so that a query whose pattern matches little of its stream
	// still returns promptly (with a cursor to go on from).
	maxKeptScan = 8192
)

// KeptMessage is a signed message a history keeper holds for others to
// fetch, kept byte for byte so that a fetcher verifies its signature.
type KeptMessage struct {
	// Stream partitions kept messages: a query reads one stream. It must
	// not be empty or contain NUL.
	Stream string
	// Topic is the message's topic, which a query's Match sees.
	Topic string
	// Key is unique in the stream and orders messages of equal Time. It
	// must not be empty.
	Key string
	// Time is the message's own time; messages are returned in (Time,
	// Key) order.
	Time time.Time
	// Data is the signed message, verbatim.
	Data []byte
}

// KeptQuery selects kept messages of one stream, oldest first.
type KeptQuery struct {
	// Stream is the stream read. Required.
	Stream string
	// Since keeps messages at or after it; Until, when set, before it.
	Since, Until time.Time
	// After is a cursor: the Next of the previous page.
	After string
	// Limit bounds the page; <= 0 or more than MaxKeptPage means
	// MaxKeptPage.
	Limit int
	// MaxBytes, when positive, ends the page before the message that
	// would take its Data past it (a page holds at least one message).
	MaxBytes int
	// Match, when set, keeps only messages whose topic it accepts.
	Match func(topic string) bool
}

// KeptPage is one page of kept messages.
type KeptPage struct {
	Messages []KeptMessage
	// Next is the cursor of the following page, or "" when the query is
	// done.
	Next string
}

type keptRecord struct {
	Topic string `json:"topic"`
	Data  []byte `json:"data"`
}

// metaKeptBytes is the meta key holding the kept messages' size.
var metaKeptBytes = []byte("kept_bytes")

func keptKey(stream string, t time.Time, key string) []byte {
	return concat([]byte(stream), []byte{0}, timeKey(t), []byte(key))
}

// Keep stores m unless a message of the same stream, time and key is
// already kept, and reports whether it stored it. The write is fsync'd
// before Keep returns. Kept messages past the age bound
// (WithKeptRetention) are deleted by the pruner; a Keep that takes them
// past the size bound (WithMaxKeptBytes) deletes the oldest first.
func (s *Store) Keep(ctx context.Context, m KeptMessage) (bool, error) {
	if m.Stream == "" || m.Key == "" || m.Topic == "" {
		return false, invalidf("kept message needs a stream, a topic and a key")
	}
	for _, f := range []struct{ name, v string }{{"stream", m.Stream}, {"key", m.Key}, {"topic", m.Topic}} {
		if err := checkKeyString(f.name, f.v); err != nil {
			return false, err
		}
	}
	if err := checkTime("time", m.Time); err != nil {
		return false, err
	}
	if len(m.Data) > s.cfg.maxRecordSize {
		return false, fmt.Errorf("%w: kept message of %d bytes, the limit is %d", ErrTooLarge, len(m.Data), s.cfg.maxRecordSize)
	}
	v, err := encode(keptRecord{Topic: m.Topic, Data: m.Data})
	if err != nil {
		return false, err
	}
	pk := keptKey(m.Stream, m.Time, m.Key)
	// The age index orders by time first, so that pruning and the size
	// bound read the oldest messages of every stream.
	ak := concat(timeKey(m.Time), []byte(m.Stream), []byte{0}, []byte(m.Key))
	var stored bool
	err = s.update(ctx, func(tx *bolt.Tx) error {
		stored = false
		kept := bucket(tx, bucketKept)
		if kept.Get(pk) != nil {
			return nil
		}
		if err := kept.Put(pk, v); err != nil {
			return err
		}
		if err := bucket(tx, bucketKeptAge).Put(ak, pk); err != nil {
			return err
		}
		stored = true
		return s.capKept(tx, ak, int64(len(pk)+len(v)+len(ak)+len(pk)))
	})
	if err != nil {
		return false, fmt.Errorf("store: keep %s: %w", m.Key, err)
	}
	return stored, nil
}

func keptSize(tx *bolt.Tx) (int64, error) {
	v := bucket(tx, bucketMeta).Get(metaKeptBytes)
	if v == nil {
		return 0, nil
	}
	if len(v) != 8 {
		return 0, &CorruptError{Bucket: bucketMeta, Key: metaKeptBytes, Err: errors.New("not 8 bytes")}
	}
	return int64(binary.BigEndian.Uint64(v)), nil
}

func setKeptSize(tx *bolt.Tx, n int64) error {
	return bucket(tx, bucketMeta).Put(metaKeptBytes, binary.BigEndian.AppendUint64(nil, uint64(max(n, 0))))
}

// capKept counts added bytes just written under age key ak, then deletes
// the oldest kept messages until the size bound holds, never ak's.
func (s *Store) capKept(tx *bolt.Tx, ak []byte, added int64) error {
	size, err := keptSize(tx)
	if err != nil {
		return err
	}
	size += added
	age := bucket(tx, bucketKeptAge)
	for size > s.cfg.maxKept {
		k, pk := age.Cursor().First()
		if k == nil || bytes.Equal(k, ak) {
			break
		}
		size -= deleteKept(tx, bytes.Clone(k), bytes.Clone(pk))
	}
	return setKeptSize(tx, size)
}

// deleteKept deletes the kept message at age key ak (primary key pk) and
// returns the bytes it counted for.
func deleteKept(tx *bolt.Tx, ak, pk []byte) int64 {
	kept := bucket(tx, bucketKept)
	n := int64(len(ak) + 2*len(pk) + len(kept.Get(pk)))
	_ = kept.Delete(pk)
	_ = bucket(tx, bucketKeptAge).Delete(ak)
	return n
}

// PruneKept deletes kept messages older than now minus the kept retention
// and returns how many it deleted.
func (s *Store) PruneKept(ctx context.Context, now time.Time) (int, error) {
	cutoff := now.Add(-s.cfg.keptRetention)
	if err := checkTime("prune cutoff", cutoff); err != nil {
		return 0, err
	}
	total, err := s.pruneBefore(ctx, timeKey(cutoff), func(tx *bolt.Tx, end []byte, limit int) (int, error) {
		size, err := keptSize(tx)
		if err != nil {
			return 0, err
		}
		var aks, pks [][]byte
		c := bucket(tx, bucketKeptAge).Cursor()
		for k, pk := c.First(); k != nil && len(aks) < limit && bytes.Compare(k, end) < 0; k, pk = c.Next() {
			aks, pks = append(aks, bytes.Clone(k)), append(pks, bytes.Clone(pk))
		}
		for i := range aks {
			size -= deleteKept(tx, aks[i], pks[i])
		}
		return len(aks), setKeptSize(tx, size)
	})
	if err != nil {
		return total, fmt.Errorf("store: prune kept: %w", err)
	}
	return total, nil
}

// Kept returns a page of the kept messages of q.Stream matching q, oldest
// first (by time, then key). A page may end early, with a Next to go on
// from, when its bounds are reached or it has read maxKeptScan entries.
func (s *Store) Kept(ctx context.Context, q KeptQuery) (KeptPage, error) {
	var page KeptPage
	if q.Stream == "" {
		return page, invalidf("kept query needs a stream")
	}
	if err := checkKeyString("stream", q.Stream); err != nil {
		return page, err
	}
	limit := q.Limit
	if limit <= 0 || limit > MaxKeptPage {
		limit = MaxKeptPage
	}
	prefix := append([]byte(q.Stream), 0)
	start := prefix
	if !q.Since.IsZero() {
		if err := checkTime("since", q.Since); err != nil {
			return page, err
		}
		start = concat(prefix, timeKey(q.Since))
	}
	var end []byte
	if !q.Until.IsZero() {
		if err := checkTime("until", q.Until); err != nil {
			return page, err
		}
		end = concat(prefix, timeKey(q.Until))
	}
	if q.After != "" {
		after, err := hex.DecodeString(q.After)
		if err != nil || len(after) < 8 {
			return page, invalidf("cursor %q is not one this store made", q.After)
		}
		// The smallest key after the cursor's.
		if c := concat(prefix, after, []byte{0}); bytes.Compare(c, start) > 0 {
			start = c
		}
	}
	err := s.view(ctx, func(tx *bolt.Tx) error {
		page = KeptPage{}
		c := bucket(tx, bucketKept).Cursor()
		bytesIn, scanned := 0, 0
		var last []byte
		for k, v := c.Seek(start); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			if end != nil && bytes.Compare(k, end) >= 0 {
				return nil
			}
			if len(page.Messages) >= limit || scanned >= maxKeptScan {
				page.Next = hex.EncodeToString(last)
				return nil
			}
			if scanned++; scanned%ctxCheckEvery == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			suffix := k[len(prefix):]
			if len(suffix) < 9 {
				return &CorruptError{Bucket: bucketKept, Key: bytes.Clone(k), Err: errors.New("key too short")}
			}
			var r keptRecord
			if err := decodeValue(v, &r); err != nil {
				return &CorruptError{Bucket: bucketKept, Key: bytes.Clone(k), Err: err}
			}
			if q.Match != nil && !q.Match(r.Topic) {
				last = bytes.Clone(suffix)
				continue
			}
			if q.MaxBytes > 0 && len(page.Messages) > 0 && bytesIn+len(r.Data) > q.MaxBytes {
				page.Next = hex.EncodeToString(last)
				return nil
			}
			bytesIn += len(r.Data)
			last = bytes.Clone(suffix)
			page.Messages = append(page.Messages, KeptMessage{
				Stream: q.Stream, Topic: r.Topic, Key: string(suffix[8:]),
				Time: time.Unix(0, keyNano(suffix[:8])).UTC(), Data: r.Data,
			})
		}
		return nil
	})
	if err != nil {
		return KeptPage{}, fmt.Errorf("store: kept: %w", err)
	}
	return page, nil
}
