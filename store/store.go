package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// Bucket names. They are part of the on-disk format.
const (
	bucketMeta       = "meta"
	bucketOutbox     = "outbox"      // seq → message
	bucketOutboxIDs  = "outbox_ids"  // id → seq
	bucketOutboxDue  = "outbox_due"  // time(next) ‖ seq → nil
	bucketOutboxTo   = "outbox_to"   // to ‖ 0 ‖ seq → nil (schema 2)
	bucketOutboxQDue = "outbox_qdue" // queue ‖ 0 ‖ time(next) ‖ seq → nil (schema 3)
	bucketDLQ        = "dlq"         // time(deadAt) ‖ id → dead letter
	bucketDLQIDs     = "dlq_ids"     // id → dlq key
	bucketHistory    = "history"     // time ‖ id → message
	bucketHistoryIDs = "history_ids" // id → history key
	bucketIdxAgent   = "hidx_agent"  // agent ‖ 0 ‖ time ‖ id → nil (From and To)
	bucketIdxTopic   = "hidx_topic"  // topic ‖ 0 ‖ time ‖ id → nil
	bucketIdxConv    = "hidx_conv"   // conversation ‖ 0 ‖ time ‖ id → nil
	bucketRegs       = "registrations"
	bucketRegTokens  = "registration_tokens" // sha256(token) → agent id
	bucketKept       = "kept"                // stream ‖ 0 ‖ time ‖ key → kept message
	bucketKeptAge    = "kept_age"            // time ‖ stream ‖ 0 ‖ key → kept key
	bucketDurables   = "durables"            // durable subscription name → position
	bucketMarks      = "marks"               // scope ‖ 0 ‖ key → expiry (Unix ns, 8 bytes)
	bucketTasks      = "tasks"               // task id → task record
	bucketTaskReqs   = "task_reqs"           // requester ‖ 0 ‖ request id → task id
	bucketTaskExp    = "task_exp"            // time(expires) ‖ task id → nil
)

var allBuckets = []string{
	bucketMeta, bucketOutbox, bucketOutboxIDs, bucketOutboxDue, bucketOutboxTo, bucketOutboxQDue, bucketDLQ, bucketDLQIDs,
	bucketHistory, bucketHistoryIDs, bucketIdxAgent, bucketIdxTopic, bucketIdxConv,
	bucketRegs, bucketRegTokens, bucketKept, bucketKeptAge, bucketDurables, bucketMarks,
	bucketTasks, bucketTaskReqs, bucketTaskExp,
}

// schemaVersion is stored in the meta bucket; Open refuses a file written by
// a newer version and upgrades an older one. Version 2 added the outbox_to
// index; a build that reads only version 1 would write outbox entries
// without it, so it must not open a version 2 file. Version 3 added named
// queues (Message.Queue, indexed in outbox_qdue), which an older build's
// bus would not see as due and would deliver as its own when woken.
// Version 4 added Message.Left ("left" in outbox entries), which an older
// build's strict decoder would take for corruption.
const schemaVersion byte = 4

// Store is the relay's and node's embedded persistence: outbox, dead-letter
// queue, message history and lobby registrations in one bbolt file. Its
// methods are safe for concurrent use.
type Store struct {
	db  *bolt.DB
	cfg config

	// mu guards closed: methods hold it for reading while they use db,
	// Close holds it for writing while it closes db.
	mu     sync.RWMutex
	closed bool

	// inflight counts writes in progress; with WithBatchDelay a write
	// joins a db.Batch only when another is in flight.
	inflight atomic.Int64
	group    committer

	stop      context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error

	// signals wakes the consumers of named queues (see Signal).
	signals queueSignals

	met *storeMetrics // nil: none

	// The reserve (WithReserve): spent while the disk is full; reserveMu
	// guards the attempts to write it again.
	spent         atomic.Bool
	reserveMu     sync.Mutex
	reserveBusy   bool
	reserveClosed bool // Close began: no new attempt
	reserveTried  time.Time
	path          string
}

// Open opens, or creates, the store at path. A new file gets mode 0600 and
// a missing parent directory 0700; an existing file that other users may
// access is used, with a warning logged. Every write is fsync'd before it
// returns. If another process has the file open, Open waits for it up to
// WithOpenTimeout. Open starts the background pruner unless
// WithPruneInterval(0) is given; Close stops it.
func Open(path string, opts ...Option) (*Store, error) {
	cfg := defaultConfig()
	if err := cfg.apply(opts...); err != nil {
		return nil, err
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("store: creating directory for %s: %w", path, err)
	}
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 {
		cfg.logger.Warn("store: file is accessible to other users; run chmod 600 on it",
			"path", path, "mode", fmt.Sprintf("%04o", fi.Mode().Perm()))
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: cfg.openTimeout, NoSync: false})
	if err != nil {
		return nil, fmt.Errorf("store: opening %s: %w", path, err)
	}
	db.MaxBatchDelay = cfg.batchDelay
	if err := db.Update(initBuckets); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("store: initialising %s: %w", path, err)
	}
	s := &Store{db: db, cfg: cfg, path: path}
	if cfg.reserve > 0 {
		if err := s.writeReserve(); err != nil {
			// Opened on a full disk: spent until it can be written.
			s.spent.Store(true)
			s.reserveTried = time.Now()
			cfg.logger.Warn("store: no room for its reserve: new queue entries are refused until there is", "reserve_bytes", cfg.reserve, "err", err)
		}
	}
	if cfg.reg != nil {
		if s.met, err = newStoreMetrics(cfg.reg, s); err != nil {
			_ = db.Close()
			return nil, fmt.Errorf("store: %w", err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.stop = cancel
	if cfg.pruneInterval > 0 {
		s.wg.Add(1)
		go s.pruner(ctx)
	}
	return s, nil
}

func initBuckets(tx *bolt.Tx) error {
	for _, name := range allBuckets {
		if _, err := tx.CreateBucketIfNotExists([]byte(name)); err != nil {
			return fmt.Errorf("bucket %s: %w", name, err)
		}
	}
	meta := tx.Bucket([]byte(bucketMeta))
	switch v := meta.Get([]byte("schema")); {
	case v == nil:
		return meta.Put([]byte("schema"), []byte{schemaVersion})
	case len(v) != 1:
		return &CorruptError{Bucket: bucketMeta, Key: []byte("schema"), Err: errors.New("schema version is not one byte")}
	case v[0] > schemaVersion:
		return fmt.Errorf("file has schema version %d, this build reads up to %d", v[0], schemaVersion)
	case v[0] < schemaVersion:
		if v[0] < 2 {
			if err := indexOutboxTo(tx); err != nil {
				return fmt.Errorf("upgrading to schema 2: %w", err)
			}
		}
		// Schema 3 only adds the outbox_qdue bucket, created above, and
		// schema 4 a member older entries lack.
		return meta.Put([]byte("schema"), []byte{schemaVersion})
	}
	return nil
}

// Close stops the background pruner and closes the file. It is safe to call
// more than once; later calls return the first call's result.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.stop()
		s.reserveMu.Lock()
		s.reserveClosed = true
		s.reserveMu.Unlock()
		s.wg.Wait()
		s.mu.Lock()
		defer s.mu.Unlock()
		s.closed = true
		s.closeErr = s.db.Close()
	})
	return s.closeErr
}

// Path returns the file the store is kept in.
func (s *Store) Path() string { return s.db.Path() }

// enter checks ctx and that the store is open, and holds the store open
// until the returned function is called.
func (s *Store) enter(ctx context.Context) (func(), error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return nil, ErrClosed
	}
	return s.mu.RUnlock, nil
}

// view runs fn in a read transaction.
func (s *Store) view(ctx context.Context, fn func(*bolt.Tx) error) error {
	leave, err := s.enter(ctx)
	if err != nil {
		return err
	}
	defer leave()
	return mapErr(s.db.View(fn))
}

// update runs fn in a write transaction that is fsync'd before update
// returns. Concurrent writes share commits (see committer, or bbolt's
// DB.Batch when WithBatchDelay is set), so fn may run more than once and
// must only touch tx and variables it overwrites on every run.
func (s *Store) update(ctx context.Context, fn func(*bolt.Tx) error) error {
	leave, err := s.enter(ctx)
	if err != nil {
		return err
	}
	defer leave()
	defer s.met.observeCommit(time.Now())
	err = s.commit(fn)
	if errors.Is(err, ErrWrite) && s.spendReserve(err) {
		// The reserve's room takes this write.
		err = s.commit(fn)
	}
	return err
}

// commit runs fn in one write transaction (update's body): see update.
func (s *Store) commit(fn func(*bolt.Tx) error) error {
	var err error
	// fnFailed tells fn's own refusal (full, exists, invalid) from a
	// commit that could not be written. It is set on every run of fn (the
	// last run decides) and read after the commit's result came back,
	// which orders it after that run.
	fnFailed := false
	run := func(tx *bolt.Tx) error {
		fnFailed = true // stays set should fn panic
		err := fn(tx)
		fnFailed = err != nil
		return err
	}
	switch {
	case s.cfg.soloCommits:
		err = s.db.Update(run)
	case s.cfg.batchDelay > 0:
		n := s.inflight.Add(1)
		defer s.inflight.Add(-1)
		if n > 1 {
			err = s.db.Batch(run)
		} else {
			err = s.db.Update(run)
		}
	default:
		err = s.groupCommit(run)
	}
	return writeErr(mapErr(err), fnFailed)
}

// writeErr marks err, the result of a write transaction, with ErrWrite
// when the transaction failed other than by its own function's refusal:
// the commit could not be written (no space left on device, an I/O
// error).
func writeErr(err error, fnFailed bool) error {
	if err == nil || fnFailed || errors.Is(err, ErrClosed) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrWrite, err)
}

func mapErr(err error) error {
	if errors.Is(err, berrors.ErrDatabaseNotOpen) {
		return ErrClosed
	}
	return err
}

func (s *Store) pruner(ctx context.Context) {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.pruneInterval)
	defer t.Stop()
	for {
		n, err := s.Prune(ctx, s.cfg.clock())
		if err == nil {
			var k int
			k, err = s.PruneKept(ctx, s.cfg.clock())
			n += k
		}
		if err == nil {
			var k int
			k, err = s.PruneTasks(ctx, s.cfg.clock())
			n += k
		}
		switch {
		case err != nil && ctx.Err() == nil:
			s.cfg.logger.Warn("store: pruning history", "err", err)
		case n > 0:
			s.cfg.logger.Info("store: pruned history", "deleted", n)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// bucket returns a bucket that initBuckets created.
func bucket(tx *bolt.Tx, name string) *bolt.Bucket {
	return tx.Bucket([]byte(name))
}
