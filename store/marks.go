package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Marks are small facts that expire: a key set in a scope until a time.
// A mailbox relay keeps in them the agents that named it as their
// mailbox and the senders each agent took items from. A scope holds at
// most the limit its Mark calls give; its count is kept in the meta
// bucket, so that the bound costs no scan.

// Mark sets key in scope until until (renewing it when it is set). A key
// new to a scope that holds limit keys already is refused with an error
// wrapping ErrFull, after dropping the scope's expired keys (limit <= 0:
// no limit).
func (s *Store) Mark(ctx context.Context, scope, key string, until time.Time, limit int) error {
	if scope == "" || key == "" {
		return invalidf("a mark needs a scope and a key")
	}
	if err := errors.Join(checkKeyString("scope", scope), checkKeyString("mark key", key)); err != nil {
		return err
	}
	if err := checkTime("mark expiry", until); err != nil {
		return err
	}
	k := concat([]byte(scope), []byte{0}, []byte(key))
	v := binary.BigEndian.AppendUint64(nil, uint64(until.UnixNano()))
	now := s.cfg.clock().UnixNano()
	err := s.update(ctx, func(tx *bolt.Tx) error {
		b := bucket(tx, bucketMarks)
		if b.Get(k) != nil {
			return b.Put(k, v)
		}
		n, err := metaCount(tx, metaMarks(scope))
		if err != nil {
			return err
		}
		if limit > 0 && n >= int64(limit) {
			if n, err = pruneMarks(tx, scope, now); err != nil {
				return err
			}
			if n >= int64(limit) {
				return fmt.Errorf("%w: %d marks in %s, the limit", ErrFull, n, scope)
			}
		}
		if err := b.Put(k, v); err != nil {
			return err
		}
		return putMetaCount(tx, metaMarks(scope), n+1)
	})
	if err != nil {
		return fmt.Errorf("store: mark %s: %w", scope, err)
	}
	return nil
}

// Marked returns when key expires in scope, and whether it is set and
// not expired at now.
func (s *Store) Marked(ctx context.Context, scope, key string, now time.Time) (time.Time, bool, error) {
	k := concat([]byte(scope), []byte{0}, []byte(key))
	var until int64
	err := s.view(ctx, func(tx *bolt.Tx) error {
		v := bucket(tx, bucketMarks).Get(k)
		if v == nil {
			return nil
		}
		if len(v) != 8 {
			return &CorruptError{Bucket: bucketMarks, Key: bytes.Clone(k), Err: errors.New("not 8 bytes")}
		}
		until = int64(binary.BigEndian.Uint64(v))
		return nil
	})
	if err != nil || until == 0 {
		return time.Time{}, false, err
	}
	t := time.Unix(0, until)
	return t, t.After(now), nil
}

// PruneMarks deletes scope's keys expired at now and returns how many
// remain.
func (s *Store) PruneMarks(ctx context.Context, scope string, now time.Time) (int, error) {
	var n int64
	err := s.update(ctx, func(tx *bolt.Tx) error {
		var err error
		n, err = pruneMarks(tx, scope, now.UnixNano())
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("store: prune marks of %s: %w", scope, err)
	}
	return int(n), nil
}

// pruneMarks deletes scope's keys expired at now (Unix ns), updates its
// count and returns it.
func pruneMarks(tx *bolt.Tx, scope string, now int64) (int64, error) {
	prefix := concat([]byte(scope), []byte{0})
	b := bucket(tx, bucketMarks)
	c := b.Cursor()
	var n int64
	var expired [][]byte
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		if len(v) == 8 && int64(binary.BigEndian.Uint64(v)) > now {
			n++
		} else {
			expired = append(expired, bytes.Clone(k))
		}
	}
	for _, k := range expired {
		if err := b.Delete(k); err != nil {
			return 0, err
		}
	}
	return n, putMetaCount(tx, metaMarks(scope), n)
}

// metaMarks is the meta key of a scope's count of marks.
func metaMarks(scope string) []byte {
	return concat([]byte("marks"), []byte{0}, []byte(scope))
}

// metaCount reads a count of the meta bucket (0 when absent).
func metaCount(tx *bolt.Tx, key []byte) (int64, error) {
	v := bucket(tx, bucketMeta).Get(key)
	if v == nil {
		return 0, nil
	}
	if len(v) != 8 {
		return 0, &CorruptError{Bucket: bucketMeta, Key: bytes.Clone(key), Err: errors.New("not 8 bytes")}
	}
	return int64(binary.BigEndian.Uint64(v)), nil
}

// putMetaCount writes a count of the meta bucket, deleting it at zero.
func putMetaCount(tx *bolt.Tx, key []byte, n int64) error {
	if n <= 0 {
		return bucket(tx, bucketMeta).Delete(key)
	}
	return bucket(tx, bucketMeta).Put(key, binary.BigEndian.AppendUint64(nil, uint64(n)))
}
