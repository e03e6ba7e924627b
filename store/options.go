package store

import (
	"errors"
	"io"
	"log/slog"
	"time"
)

// DefaultRetention is how long history is kept: seven days, as seed 004's
// "message history pruning (> 7 days)" asks.
const DefaultRetention = 7 * 24 * time.Hour

// DefaultPruneInterval is how often the background pruner runs.
const DefaultPruneInterval = time.Hour

// DefaultMaxRecordSize bounds a record's payload plus metadata: 1 MiB.
const DefaultMaxRecordSize = 1 << 20

// DefaultBatchDelay is how long a write that joins a group commit waits for
// others to join it (see doc.go, "Durability and throughput").
const DefaultBatchDelay = 2 * time.Millisecond

type config struct {
	retention     time.Duration
	pruneInterval time.Duration
	maxRecordSize int
	batchDelay    time.Duration
	clock         func() time.Time
	logger        *slog.Logger
	openTimeout   time.Duration
}

func defaults() config {
	return config{
		retention:     DefaultRetention,
		pruneInterval: DefaultPruneInterval,
		maxRecordSize: DefaultMaxRecordSize,
		batchDelay:    DefaultBatchDelay,
		clock:         time.Now,
		logger:        slog.New(slog.NewTextHandler(io.Discard, nil)),
		openTimeout:   5 * time.Second,
	}
}

// Option configures a Store.
type Option func(*config) error

// WithRetention sets how long history is kept before Prune deletes it. The
// default is DefaultRetention.
func WithRetention(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return errors.New("store: retention must be positive")
		}
		c.retention = d
		return nil
	}
}

// WithPruneInterval sets how often the background pruner calls Prune. Zero
// turns the background pruner off (Prune can still be called). The default
// is DefaultPruneInterval.
func WithPruneInterval(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return errors.New("store: prune interval must not be negative")
		}
		c.pruneInterval = d
		return nil
	}
}

// WithMaxRecordSize sets the largest payload plus metadata, in bytes, that
// a record may carry. The default is DefaultMaxRecordSize.
func WithMaxRecordSize(n int) Option {
	return func(c *config) error {
		if n <= 0 {
			return errors.New("store: max record size must be positive")
		}
		c.maxRecordSize = n
		return nil
	}
}

// WithBatchDelay sets how long a concurrent write waits for others to join
// its group commit. Zero makes every write commit (and fsync) on its own.
// The default is DefaultBatchDelay.
func WithBatchDelay(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return errors.New("store: batch delay must not be negative")
		}
		c.batchDelay = d
		return nil
	}
}

// WithClock sets the clock used for default message times, next-attempt
// times, dead-letter times and the background pruner. The default is
// time.Now.
func WithClock(now func() time.Time) Option {
	return func(c *config) error {
		if now == nil {
			return errors.New("store: clock must not be nil")
		}
		c.clock = now
		return nil
	}
}

// WithLogger sets the logger; the default discards.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return errors.New("store: logger must not be nil")
		}
		c.logger = l
		return nil
	}
}

// WithOpenTimeout bounds how long Open waits for the file lock held by
// another process that has the same file open. The default is 5s.
func WithOpenTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return errors.New("store: open timeout must be positive")
		}
		c.openTimeout = d
		return nil
	}
}
