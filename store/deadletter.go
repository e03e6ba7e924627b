package store

import (
	"context"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// DLQFilter selects dead letters.
type DLQFilter struct {
	// Topic, when set, keeps only dead letters of exactly this topic.
	Topic string
	// Since, when set, keeps only letters dead-lettered at or after it.
	Since time.Time
	// Limit bounds the number returned; <= 0 means all.
	Limit int
}

// DeadLetter moves m to the dead-letter queue in one transaction: the
// outbox entry with m's id, if there is one, is deleted and the dead letter
// written together, so a message is never in both places nor in neither.
// The dead letter is m as given (with the caller's final Attempts and
// LastError), with reason (cut to MaxErrorText bytes) and the store's
// clock as DeadAt. A message that
// was never enqueued may be dead-lettered too. Dead-lettering an id that is
// already in the queue replaces that entry.
func (s *Store) DeadLetter(ctx context.Context, m Message, reason string) error {
	if m.ID == "" {
		return invalidf("dead letter without an id")
	}
	if err := s.prepare(&m); err != nil {
		return err
	}
	deadAt := s.cfg.clock()
	if err := checkTime("dead-letter time", deadAt); err != nil {
		return err
	}
	err := s.update(ctx, func(tx *bolt.Tx) error {
		r, ok, err := getOutbox(tx, m.ID)
		if err != nil {
			return err
		}
		if ok {
			if err := deleteOutbox(tx, r); err != nil {
				return err
			}
		}
		if err := deleteDLQ(tx, m.ID); err != nil {
			return err
		}
		m.NextAttempt = time.Time{}
		dr := toRecord(m)
		dr.Reason = clip(reason)
		dr.DeadAt = deadAt.UnixNano()
		v, err := encode(dr)
		if err != nil {
			return err
		}
		key := concat(nanoKey(dr.DeadAt), []byte(m.ID))
		if err := bucket(tx, bucketDLQ).Put(key, v); err != nil {
			return err
		}
		return bucket(tx, bucketDLQIDs).Put([]byte(m.ID), key)
	})
	if err != nil {
		return fmt.Errorf("store: dead-letter %s: %w", m.ID, err)
	}
	return nil
}

// deleteDLQ removes id from the dead-letter queue if it is there.
func deleteDLQ(tx *bolt.Tx, id string) error {
	ids := bucket(tx, bucketDLQIDs)
	key := ids.Get([]byte(id))
	if key == nil {
		return nil
	}
	if err := bucket(tx, bucketDLQ).Delete(key); err != nil {
		return err
	}
	return ids.Delete([]byte(id))
}

// getDLQ loads the dead letter id.
func getDLQ(tx *bolt.Tx, id string) (msgRecord, bool, error) {
	key := bucket(tx, bucketDLQIDs).Get([]byte(id))
	if key == nil {
		return msgRecord{}, false, nil
	}
	v := bucket(tx, bucketDLQ).Get(key)
	if v == nil {
		return msgRecord{}, false, &CorruptError{Bucket: bucketDLQIDs, Key: []byte(id), Err: fmt.Errorf("points at missing dead letter %x", key)}
	}
	r, err := decodeMessage(bucketDLQ, key, v)
	return r, err == nil, err
}

// DeadLetters lists dead letters, oldest first.
func (s *Store) DeadLetters(ctx context.Context, f DLQFilter) ([]DeadLetter, error) {
	var out []DeadLetter
	err := s.view(ctx, func(tx *bolt.Tx) error {
		c := bucket(tx, bucketDLQ).Cursor()
		var k, v []byte
		if f.Since.IsZero() {
			k, v = c.First()
		} else {
			if err := checkTime("since", f.Since); err != nil {
				return err
			}
			k, v = c.Seek(timeKey(f.Since))
		}
		for ; k != nil && (f.Limit <= 0 || len(out) < f.Limit); k, v = c.Next() {
			r, err := decodeMessage(bucketDLQ, k, v)
			if err != nil {
				return err
			}
			if f.Topic != "" && r.Topic != f.Topic {
				continue
			}
			out = append(out, r.deadLetter())
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: dead letters: %w", err)
	}
	return out, nil
}

// Replay moves dead letter id back to the outbox queue it came from
// (Message.Queue) in one transaction, with
// Attempts, LastError, Expires and Left reset and its next attempt now, and returns it as
// enqueued. It returns ErrNotFound when id is not in the dead-letter queue.
func (s *Store) Replay(ctx context.Context, id string) (Message, error) {
	var m Message
	now := s.cfg.clock()
	if err := checkTime("now", now); err != nil {
		return Message{}, err
	}
	err := s.update(ctx, func(tx *bolt.Tx) error {
		r, ok, err := getDLQ(tx, id)
		if err != nil {
			return err
		}
		if !ok {
			return ErrNotFound
		}
		if bucket(tx, bucketOutboxIDs).Get([]byte(id)) != nil {
			return fmt.Errorf("%w: message %s is already in the outbox", ErrExists, id)
		}
		if err := deleteDLQ(tx, id); err != nil {
			return err
		}
		m = r.message()
		m.Attempts = 0
		m.LastError = ""
		m.NextAttempt = now
		m.Expires = time.Time{}
		m.Left = time.Time{}
		return putOutbox(tx, m)
	})
	if err != nil {
		return Message{}, fmt.Errorf("store: replay %s: %w", id, err)
	}
	s.signals.fire(m.Queue)
	m.NextAttempt = m.NextAttempt.UTC()
	return m, nil
}

// DropDeadLetter deletes dead letter id. It returns ErrNotFound when id is
// not in the dead-letter queue.
func (s *Store) DropDeadLetter(ctx context.Context, id string) error {
	err := s.update(ctx, func(tx *bolt.Tx) error {
		if bucket(tx, bucketDLQIDs).Get([]byte(id)) == nil {
			return ErrNotFound
		}
		return deleteDLQ(tx, id)
	})
	if err != nil {
		return fmt.Errorf("store: drop dead letter %s: %w", id, err)
	}
	return nil
}
