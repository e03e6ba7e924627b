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

// DefaultMaxHistoryBytes bounds the history's size: 256 MiB.
const DefaultMaxHistoryBytes = 256 << 20

type config struct {
	retention     time.Duration
	pruneInterval time.Duration
	maxRecordSize int
	maxHistory    int64
	batchDelay    time.Duration
	soloCommits   bool // every write its own commit (benchmarks)
	clock         func() time.Time
	logger        *slog.Logger
	openTimeout   time.Duration
}

func defaults() config {
	return config{
		retention:     DefaultRetention,
		pruneInterval: DefaultPruneInterval,
		maxRecordSize: DefaultMaxRecordSize,
		maxHistory:    DefaultMaxHistoryBytes,
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

// WithPruneInterval sets how often the background pruner calls Prune with
// the store's clock: once as the store opens, then every d. Zero turns the
// background pruner off (Prune can still be called). The default is
// DefaultPruneInterval.
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

// WithMaxHistoryBytes bounds the history's size, as well as its age
// (WithRetention): when a Record takes the history past n bytes, the
// oldest records are deleted, with their index entries, in the same
// transaction, until it is back under n (the record just written is
// always kept). The size counted is that of the history's keys, values
// and index entries; the file is larger by bbolt's page overhead, and
// does not shrink (deleted pages are reused). The default is
// DefaultMaxHistoryBytes.
func WithMaxHistoryBytes(n int64) Option {
	return func(c *config) error {
		if n <= 0 {
			return errors.New("store: max history bytes must be positive")
		}
		c.maxHistory = n
		return nil
	}
}

// WithBatchDelay switches concurrent writes from the store's own group
// commit, which never waits for a timer, to bbolt's DB.Batch, which waits
// up to d for writes to join a batch. Zero, the default, keeps the group
// commit. It exists to compare the two (see BenchmarkEnqueue); with this
// machine's fsync latency, DB.Batch was slower at every delay measured.
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
