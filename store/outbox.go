package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Enqueue puts m in the outbox. It returns only after the transaction has
// been fsync'd to disk, so a caller may acknowledge m as soon as Enqueue
// returns nil. A missing ID and Time are filled in (Enqueue works on a copy;
// read the id back with Pending or Due, or set it yourself). m's next
// attempt is now unless m.NextAttempt is set (a delivery that already
// failed once and waits for its retry). An id already in the outbox or the dead-letter queue is
// refused with ErrExists.
func (s *Store) Enqueue(ctx context.Context, m Message) error {
	_, err := s.enqueue(ctx, m)
	return err
}

// EnqueueID is Enqueue returning the message's id, generated when m.ID is
// empty.
func (s *Store) EnqueueID(ctx context.Context, m Message) (string, error) {
	return s.enqueue(ctx, m)
}

func (s *Store) enqueue(ctx context.Context, m Message) (string, error) {
	id, _, err := s.enqueueWithin(ctx, m, Bounds{}, time.Time{})
	return id, err
}

// putOutbox writes m under a new sequence number with its indexes.
func putOutbox(tx *bolt.Tx, m Message) error {
	ob := bucket(tx, bucketOutbox)
	seq, err := ob.NextSequence()
	if err != nil {
		return err
	}
	r := toRecord(m)
	r.Seq = seq
	v, err := encode(r)
	if err != nil {
		return err
	}
	sk := seqKey(seq)
	if err := ob.Put(sk, v); err != nil {
		return err
	}
	if err := bucket(tx, bucketOutboxIDs).Put([]byte(m.ID), sk); err != nil {
		return err
	}
	if m.To != "" {
		if err := bucket(tx, bucketOutboxTo).Put(toKey(m.To, sk), nil); err != nil {
			return err
		}
	}
	if err := addQueueBytes(tx, r, 1); err != nil {
		return err
	}
	return dueBucket(tx, r.Queue).Put(dueKey(r.Queue, r.Next, sk), nil)
}

// toKey is the outbox_to key of an entry addressed to to.
func toKey(to string, sk []byte) []byte { return concat([]byte(to), []byte{0}, sk) }

// indexOutboxTo fills outbox_to from the outbox (the upgrade from schema 1).
func indexOutboxTo(tx *bolt.Tx) error {
	idx := bucket(tx, bucketOutboxTo)
	c := bucket(tx, bucketOutbox).Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		r, err := decodeMessage(bucketOutbox, k, v)
		if err != nil {
			return err
		}
		if r.To != "" {
			if err := idx.Put(toKey(r.To, k), nil); err != nil {
				return err
			}
		}
	}
	return nil
}

// getOutbox loads the outbox entry of id.
func getOutbox(tx *bolt.Tx, id string) (msgRecord, bool, error) {
	sk := bucket(tx, bucketOutboxIDs).Get([]byte(id))
	if sk == nil {
		return msgRecord{}, false, nil
	}
	v := bucket(tx, bucketOutbox).Get(sk)
	if v == nil {
		return msgRecord{}, false, &CorruptError{Bucket: bucketOutboxIDs, Key: []byte(id), Err: fmt.Errorf("points at missing outbox entry %x", sk)}
	}
	r, err := decodeMessage(bucketOutbox, sk, v)
	return r, err == nil, err
}

// deleteOutbox removes r and its indexes.
func deleteOutbox(tx *bolt.Tx, r msgRecord) error {
	sk := seqKey(r.Seq)
	if err := bucket(tx, bucketOutbox).Delete(sk); err != nil {
		return err
	}
	if err := bucket(tx, bucketOutboxIDs).Delete([]byte(r.ID)); err != nil {
		return err
	}
	if r.To != "" {
		if err := bucket(tx, bucketOutboxTo).Delete(toKey(r.To, sk)); err != nil {
			return err
		}
	}
	if err := addQueueBytes(tx, r, -1); err != nil {
		return err
	}
	return dueBucket(tx, r.Queue).Delete(dueKey(r.Queue, r.Next, sk))
}

// Pending returns up to limit messages of the bus's outbox in enqueue
// order, whatever their next attempt time. limit <= 0 means all.
func (s *Store) Pending(ctx context.Context, limit int) ([]Message, error) {
	return s.PendingIn(ctx, "", limit)
}

// PendingIn is Pending for the named queue.
func (s *Store) PendingIn(ctx context.Context, queue string, limit int) ([]Message, error) {
	var out []Message
	err := s.view(ctx, func(tx *bolt.Tx) error {
		c := bucket(tx, bucketOutbox).Cursor()
		for k, v := c.First(); k != nil && (limit <= 0 || len(out) < limit); k, v = c.Next() {
			r, err := decodeMessage(bucketOutbox, k, v)
			if err != nil {
				return err
			}
			if r.Queue == queue {
				out = append(out, r.message())
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: pending: %w", err)
	}
	return out, nil
}

// Due returns up to limit messages of the bus's outbox whose next attempt
// time is not after now, earliest first (enqueue order among equal times).
// limit <= 0 means all.
func (s *Store) Due(ctx context.Context, now time.Time, limit int) ([]Message, error) {
	return s.DueIn(ctx, "", now, limit)
}

// DueIn is Due for the named queue.
func (s *Store) DueIn(ctx context.Context, queue string, now time.Time, limit int) ([]Message, error) {
	if err := checkTime("now", now); err != nil {
		return nil, err
	}
	end := now.UnixNano()
	var out []Message
	err := s.view(ctx, func(tx *bolt.Tx) error {
		ob := bucket(tx, bucketOutbox)
		return scanDue(tx, queue, func(next int64, sk []byte) (bool, error) {
			if next > end || (limit > 0 && len(out) >= limit) {
				return false, nil
			}
			v := ob.Get(sk)
			if v == nil {
				return false, &CorruptError{Bucket: dueBucketName(queue), Key: sk, Err: fmt.Errorf("points at missing outbox entry")}
			}
			r, err := decodeMessage(bucketOutbox, sk, v)
			if err != nil {
				return false, err
			}
			out = append(out, r.message())
			return true, nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("store: due: %w", err)
	}
	return out, nil
}

// Delivered removes message id from the outbox, and records nothing else
// (call Record for history). It returns ErrNotFound when id is not in the
// outbox, which a caller delivering at least once may ignore.
func (s *Store) Delivered(ctx context.Context, id string) error {
	err := s.update(ctx, func(tx *bolt.Tx) error {
		r, ok, err := getOutbox(tx, id)
		if err != nil {
			return err
		}
		if !ok {
			return ErrNotFound
		}
		return deleteOutbox(tx, r)
	})
	if err != nil {
		return fmt.Errorf("store: delivered %s: %w", id, err)
	}
	return nil
}

// Retry records a failed delivery of message id: it bumps Attempts, keeps
// errText as LastError (cut to MaxErrorText bytes) and sets the next attempt time to next. It returns
// ErrNotFound when id is not in the outbox.
func (s *Store) Retry(ctx context.Context, id, errText string, next time.Time) error {
	return s.reschedule(ctx, "retry", id, errText, next, 1, time.Time{})
}

// Postpone moves message id's next attempt to next without counting a
// failed delivery: Attempts is kept, errText (cut to MaxErrorText bytes)
// becomes LastError, and a non-zero expires replaces Expires. The bus
// postpones a message whose subscriber is away, since an attempt that
// found nobody to deliver to is not a delivery. It returns ErrNotFound
// when id is not in the outbox.
func (s *Store) Postpone(ctx context.Context, id, errText string, next, expires time.Time) error {
	if !expires.IsZero() {
		if err := checkTime("expiry", expires); err != nil {
			return err
		}
	}
	return s.reschedule(ctx, "postpone", id, errText, next, 0, expires)
}

func (s *Store) reschedule(ctx context.Context, op, id, errText string, next time.Time, bump int, expires time.Time) error {
	if err := checkTime("next attempt", next); err != nil {
		return err
	}
	err := s.update(ctx, func(tx *bolt.Tx) error {
		r, ok, err := getOutbox(tx, id)
		if err != nil {
			return err
		}
		if !ok {
			return ErrNotFound
		}
		r.Attempts += bump
		r.LastError = clip(errText)
		if !expires.IsZero() {
			r.Expires = expires.UnixNano()
		}
		return moveDue(tx, r, next.UnixNano())
	})
	if err != nil {
		return fmt.Errorf("store: %s %s: %w", op, id, err)
	}
	return nil
}

// moveDue rewrites outbox entry r with its next attempt at next.
func moveDue(tx *bolt.Tx, r msgRecord, next int64) error {
	sk := seqKey(r.Seq)
	due := dueBucket(tx, r.Queue)
	if err := due.Delete(dueKey(r.Queue, r.Next, sk)); err != nil {
		return err
	}
	r.Next = next
	v, err := encode(r)
	if err != nil {
		return err
	}
	if err := bucket(tx, bucketOutbox).Put(sk, v); err != nil {
		return err
	}
	return due.Put(dueKey(r.Queue, r.Next, sk), nil)
}

// Wake makes every message of the bus's outbox addressed to to
// (Message.To) whose next attempt is after now due at now, and returns how
// many it moved. The bus calls it when a client subscribes, so that what
// waits for that client is delivered at once. It reads through an index on
// To: its cost grows with the messages addressed to to, not with the
// outbox.
func (s *Store) Wake(ctx context.Context, to string, now time.Time) (int, error) {
	return s.WakeIn(ctx, "", to, now)
}

// WakeIn is Wake for the named queue.
func (s *Store) WakeIn(ctx context.Context, queue, to string, now time.Time) (int, error) {
	if to == "" {
		return 0, invalidf("wake without an addressee")
	}
	if err := checkTime("now", now); err != nil {
		return 0, err
	}
	n := now.UnixNano()
	var late []msgRecord
	find := func(tx *bolt.Tx) error {
		late = late[:0]
		prefix := concat([]byte(to), []byte{0})
		ob := bucket(tx, bucketOutbox)
		c := bucket(tx, bucketOutboxTo).Cursor()
		for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
			sk := k[len(prefix):]
			v := ob.Get(sk)
			if len(sk) != 8 || v == nil {
				return &CorruptError{Bucket: bucketOutboxTo, Key: k, Err: fmt.Errorf("points at no outbox entry")}
			}
			r, err := decodeMessage(bucketOutbox, sk, v)
			if err != nil {
				return err
			}
			if r.Queue == queue && r.Next > n {
				late = append(late, r)
			}
		}
		return nil
	}
	// A read first: most subscribes find nothing waiting and need no
	// commit.
	if err := s.view(ctx, find); err != nil {
		return 0, fmt.Errorf("store: wake %s: %w", to, err)
	}
	if len(late) == 0 {
		return 0, nil
	}
	err := s.update(ctx, func(tx *bolt.Tx) error {
		if err := find(tx); err != nil {
			return err
		}
		for _, r := range late {
			if err := moveDue(tx, r, n); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("store: wake %s: %w", to, err)
	}
	return len(late), nil
}

// NextDue returns the earliest next attempt time in the bus's outbox, and
// false when it is empty.
func (s *Store) NextDue(ctx context.Context) (time.Time, bool, error) {
	return s.NextDueIn(ctx, "")
}

// NextDueIn is NextDue for the named queue.
func (s *Store) NextDueIn(ctx context.Context, queue string) (time.Time, bool, error) {
	var next time.Time
	var ok bool
	err := s.view(ctx, func(tx *bolt.Tx) error {
		return scanDue(tx, queue, func(n int64, _ []byte) (bool, error) {
			next, ok = time.Unix(0, n).UTC(), true
			return false, nil
		})
	})
	if err != nil {
		return time.Time{}, false, fmt.Errorf("store: next due: %w", err)
	}
	return next, ok, nil
}

// PostponeFor moves the next attempt of every message of the named queue
// addressed to to to next (or its expiry, when sooner), with errText as
// its last error, without counting an attempt, in one commit: a sender
// that found an agent away waits for it once, not once per message. A
// message without an expiry (replayed) gets expires. It returns how many
// it moved.
func (s *Store) PostponeFor(ctx context.Context, queue, to, errText string, next, expires time.Time) (int, error) {
	if to == "" {
		return 0, invalidf("postpone without an addressee")
	}
	if err := errors.Join(checkTime("next attempt", next), checkTime("expiry", expires)); err != nil {
		return 0, err
	}
	moved := 0
	err := s.update(ctx, func(tx *bolt.Tx) error {
		moved = 0
		var rs []msgRecord
		if err := scanTo(tx, queue, to, nil, func(r msgRecord) bool { rs = append(rs, r); return true }); err != nil {
			return err
		}
		for _, r := range rs {
			same := r.Expires != 0 || expires.IsZero()
			if r.Expires == 0 && !expires.IsZero() {
				r.Expires = expires.UnixNano()
			}
			at := next.UnixNano()
			if r.Expires != 0 {
				at = min(at, r.Expires)
			}
			if same && r.Next == at && r.LastError == clip(errText) {
				continue // nothing to write
			}
			r.LastError = clip(errText)
			if err := moveDue(tx, r, at); err != nil {
				return err
			}
			moved++
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("store: postpone for %s: %w", to, err)
	}
	return moved, nil
}
