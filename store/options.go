package store

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
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

// config is a Store's configuration. Open builds it in three steps, as
// kad-dht does: defaultConfig, then apply the options in order (they only
// set fields), then validate, which checks the whole, so every check is in
// one place.
type config struct {
	retention     time.Duration
	pruneInterval time.Duration
	maxRecordSize int
	maxHistory    int64
	keptRetention time.Duration
	maxKept       int64
	maxDurables   int
	batchDelay    time.Duration
	soloCommits   bool // every write its own commit (benchmarks)
	clock         func() time.Time
	logger        *slog.Logger
	openTimeout   time.Duration
	reg           prometheus.Registerer // nil: no metrics
	reserve       int64                 // bytes kept beside the file for a full disk; 0: none
}

func defaultConfig() config {
	return config{
		retention:     DefaultRetention,
		pruneInterval: DefaultPruneInterval,
		maxRecordSize: DefaultMaxRecordSize,
		maxHistory:    DefaultMaxHistoryBytes,
		keptRetention: DefaultKeptRetention,
		maxKept:       DefaultMaxKeptBytes,
		maxDurables:   DefaultMaxDurables,
		clock:         time.Now,
		logger:        slog.Default(),
		openTimeout:   5 * time.Second,
	}
}

// apply applies opts in order, skipping nil ones.
func (c *config) apply(opts ...Option) error {
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(c); err != nil {
			return err
		}
	}
	return nil
}

// validate checks the configuration as a whole.
func (c *config) validate() error {
	var bad string
	switch {
	case c.retention <= 0:
		bad = fmt.Sprintf("retention %v is not positive", c.retention)
	case c.pruneInterval < 0:
		bad = fmt.Sprintf("prune interval %v is negative", c.pruneInterval)
	case c.maxRecordSize <= 0:
		bad = fmt.Sprintf("max record size %d is not positive", c.maxRecordSize)
	case c.maxHistory <= 0:
		bad = fmt.Sprintf("max history bytes %d is not positive", c.maxHistory)
	case c.keptRetention <= 0:
		bad = fmt.Sprintf("kept retention %v is not positive", c.keptRetention)
	case c.maxKept <= 0:
		bad = fmt.Sprintf("max kept bytes %d is not positive", c.maxKept)
	case c.maxDurables <= 0:
		bad = fmt.Sprintf("max durables %d is not positive", c.maxDurables)
	case c.batchDelay < 0:
		bad = fmt.Sprintf("batch delay %v is negative", c.batchDelay)
	case c.openTimeout <= 0:
		bad = fmt.Sprintf("open timeout %v is not positive", c.openTimeout)
	case c.clock == nil:
		bad = "nil clock"
	case c.logger == nil:
		bad = "nil logger"
	case c.reserve < 0 || c.reserve > 1<<30:
		bad = fmt.Sprintf("reserve %d bytes is not within 0 to 1 GiB", c.reserve)
	default:
		return nil
	}
	return fmt.Errorf("%w: %s", ErrInvalidConfig, bad)
}

// Option configures a Store.
type Option func(*config) error

// WithRetention sets how long history is kept before Prune deletes it. The
// default is DefaultRetention.
func WithRetention(d time.Duration) Option {
	return func(c *config) error {
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
		c.pruneInterval = d
		return nil
	}
}

// WithMaxRecordSize sets the largest payload plus metadata, in bytes, that
// a record may carry. The default is DefaultMaxRecordSize.
func WithMaxRecordSize(n int) Option {
	return func(c *config) error {
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
		c.maxHistory = n
		return nil
	}
}

// WithMaxDurables bounds the durable subscription names whose position
// the store keeps: SaveDurable of one more name fails with ErrFull. The
// default is DefaultMaxDurables.
func WithMaxDurables(n int) Option {
	return func(c *config) error {
		c.maxDurables = n
		return nil
	}
}

// WithKeptRetention sets how long kept messages (Keep) are kept before
// the pruner deletes them. The default is DefaultKeptRetention.
func WithKeptRetention(d time.Duration) Option {
	return func(c *config) error {
		c.keptRetention = d
		return nil
	}
}

// WithMaxKeptBytes bounds the kept messages' size (keys and values):
// a Keep that takes them past n deletes the oldest first. The default is
// DefaultMaxKeptBytes.
func WithMaxKeptBytes(n int64) Option {
	return func(c *config) error {
		c.maxKept = n
		return nil
	}
}

// WithBatchDelay switches concurrent writes from the store's own group
// commit, which never waits for a timer, to bbolt's DB.Batch, which waits
// up to d for writes to join a batch. Zero, the default, keeps the group
// commit. It exists to compare the two (see BenchmarkEnqueue).
func WithBatchDelay(d time.Duration) Option {
	return func(c *config) error {
		c.batchDelay = d
		return nil
	}
}

// WithClock sets the clock used for default message times, next-attempt
// times, dead-letter times and the background pruner. The default is
// time.Now. A nil clock is refused.
func WithClock(now func() time.Time) Option {
	return func(c *config) error {
		c.clock = now
		return nil
	}
}

// WithLogger sets the logger; the default is slog.Default(). A nil logger
// is refused.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		c.logger = l
		return nil
	}
}

// WithOpenTimeout bounds how long Open waits for the file lock held by
// another process that has the same file open. The default is 5s.
func WithOpenTimeout(d time.Duration) Option {
	return func(c *config) error {
		c.openTimeout = d
		return nil
	}
}

// WithMetrics records the store's size on disk, its outbox and dead
// letters, and its write latency (meshagent_store_…) in reg. One store per
// registry.
func WithMetrics(reg prometheus.Registerer) Option {
	return func(c *config) error { c.reg = reg; return nil }
}

// WithReserve keeps n bytes of disk beside the store's file (in
// <file>.reserve) for a full disk: when a commit fails with no space left
// on device, the store deletes the reserve and tries the commit once more
// in its room, so that a write of what was already acknowledged (the
// bus's history, an outbox entry's next attempt, a dead letter) still
// lands. From then on new queue entries (Enqueue*) are refused with an
// error matching ErrSpaceLow and ErrWrite, and SpaceLow reports it, until
// the reserve could be written again (tried at most once a second). 0,
// the default, keeps none; at most 1 GiB.
func WithReserve(n int64) Option {
	return func(c *config) error {
		c.reserve = n
		return nil
	}
}
