package store

import (
	"bytes"
	"context"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// MaxDurableSize bounds a durable subscription's saved position.
const MaxDurableSize = 1 << 20

// DefaultMaxDurables bounds the durable subscription names whose position
// a store keeps (WithMaxDurables): with MaxDurableSize, at most 256 MiB.
const DefaultMaxDurables = 256

// SaveDurable records the position of the durable subscription name (an
// opaque value its owner encodes), replacing the one saved before, and
// returns once it is fsync'd. A name not saved before, when the store
// keeps positions for as many names as it may (WithMaxDurables), fails
// with an error wrapping ErrFull: DeleteDurable makes room.
func (s *Store) SaveDurable(ctx context.Context, name string, v []byte) error {
	if name == "" {
		return invalidf("empty durable name")
	}
	if err := checkKeyString("durable name", name); err != nil {
		return err
	}
	if len(v) > MaxDurableSize {
		return fmt.Errorf("%w: durable position of %d bytes, the limit is %d", ErrTooLarge, len(v), MaxDurableSize)
	}
	val := append([]byte{formatVersion}, v...)
	err := s.update(ctx, func(tx *bolt.Tx) error {
		b := bucket(tx, bucketDurables)
		if b.Get([]byte(name)) == nil {
			if n := b.Stats().KeyN; n >= s.cfg.maxDurables {
				return fmt.Errorf("%w: positions of %d durable names are kept, the limit", ErrFull, n)
			}
		}
		return b.Put([]byte(name), val)
	})
	if err != nil {
		return fmt.Errorf("store: save durable %s: %w", name, err)
	}
	return nil
}

// DeleteDurable forgets the position saved for the durable subscription
// name, or returns an error wrapping ErrNotFound when there is none.
func (s *Store) DeleteDurable(ctx context.Context, name string) error {
	err := s.update(ctx, func(tx *bolt.Tx) error {
		b := bucket(tx, bucketDurables)
		if b.Get([]byte(name)) == nil {
			return fmt.Errorf("%w: durable %s", ErrNotFound, name)
		}
		return b.Delete([]byte(name))
	})
	if err != nil {
		return fmt.Errorf("store: delete durable %s: %w", name, err)
	}
	return nil
}

// Durable returns the position saved for the durable subscription name,
// or an error wrapping ErrNotFound.
func (s *Store) Durable(ctx context.Context, name string) ([]byte, error) {
	var out []byte
	err := s.view(ctx, func(tx *bolt.Tx) error {
		v := bucket(tx, bucketDurables).Get([]byte(name))
		switch {
		case v == nil:
			return fmt.Errorf("%w: durable %s", ErrNotFound, name)
		case len(v) == 0 || v[0] != formatVersion:
			return &CorruptError{Bucket: bucketDurables, Key: []byte(name), Err: fmt.Errorf("unknown format version")}
		}
		out = bytes.Clone(v[1:])
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// DurableInfo describes a durable subscription name whose position the
// store keeps (Durables).
type DurableInfo struct {
	// Name is the durable subscription's name.
	Name string
	// Bytes is the size of its saved position, as its owner encoded it.
	Bytes int
}

// Durables lists the durable subscription names whose position the store
// keeps, sorted by name: at most WithMaxDurables of them (more only when
// the store was reopened with a lower bound), so the list is bounded. It
// reads no position's content, so a name whose value is
// damaged is still listed and can be deleted (DeleteDurable).
func (s *Store) Durables(ctx context.Context) ([]DurableInfo, error) {
	var out []DurableInfo
	err := s.view(ctx, func(tx *bolt.Tx) error {
		// Keys come in byte order, which is the sort by name.
		return bucket(tx, bucketDurables).ForEach(func(k, v []byte) error {
			out = append(out, DurableInfo{Name: string(k), Bytes: max(len(v)-1, 0)})
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("store: durables: %w", err)
	}
	return out, nil
}

// MaxDurables returns how many durable subscription names the store keeps
// a position for at most (WithMaxDurables).
func (s *Store) MaxDurables() int { return s.cfg.maxDurables }
