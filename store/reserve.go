package store

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
)

// ErrSpaceLow is matched by the error of a new queue entry (Enqueue,
// EnqueueID, EnqueueWithin, EnqueueDisplacing) refused because the disk
// filled up and the store spent its reserve (WithReserve) on writes of
// what was already acknowledged. The error matches ErrWrite as well: the
// same write may succeed once space returns.
var ErrSpaceLow = errors.New("store: no space left on device (the store's reserve is spent)")

// reserveRetry is how often a store whose reserve is spent tries to write
// it again (in the background, when SpaceLow is asked), by the wall clock
// (not WithClock's: the disk's space returns in real time).
const reserveRetry = time.Second

// reservePath is the file holding the reserve of the store at path.
func reservePath(path string) string { return path + ".reserve" }

// writeReserve writes the reserve file: size bytes on disk (written, not
// a sparse file, so that they are really taken), fsync'd, then renamed
// into place. A reserve of the right size already there is kept.
func (s *Store) writeReserve() error {
	path := reservePath(s.path)
	if fi, err := os.Stat(path); err == nil && fi.Size() == s.cfg.reserve {
		return nil
	}
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("store: writing its reserve: %w", err)
	}
	err = func() error {
		buf := make([]byte, 64<<10)
		for left := s.cfg.reserve; left > 0; left -= int64(len(buf)) {
			if _, err := f.Write(buf[:min(left, int64(len(buf)))]); err != nil {
				return err
			}
		}
		return f.Sync()
	}()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("store: writing its reserve: %w", err)
	}
	return nil
}

// spendReserve deletes the reserve after a commit failed for want of
// space, so that the commit can be tried again in its room. It reports
// whether there was a reserve to spend.
func (s *Store) spendReserve(cause error) bool {
	if s.cfg.reserve == 0 || !errors.Is(cause, syscall.ENOSPC) {
		return false
	}
	s.reserveMu.Lock()
	defer s.reserveMu.Unlock()
	if s.spent.Load() {
		return false
	}
	if err := os.Remove(reservePath(s.path)); err != nil && !errors.Is(err, os.ErrNotExist) {
		s.cfg.logger.Error("store: the disk is full and the reserve cannot be deleted", "err", err)
		return false
	}
	s.spent.Store(true)
	s.reserveTried = time.Now()
	s.cfg.logger.Warn("store: the disk is full: its reserve is spent on what was already acknowledged, and new queue entries are refused until space returns",
		"reserve_bytes", s.cfg.reserve, "err", cause)
	return true
}

// SpaceLow returns an error matching ErrSpaceLow and ErrWrite while the
// store's reserve is spent (the disk filled up; see WithReserve), else
// nil. Callers that acknowledge what they write only later (the bus's
// history) refuse new messages while it is not nil. While the reserve is
// spent, SpaceLow tries to write it again in the background, at most once
// every second; once that succeeds SpaceLow returns nil again.
func (s *Store) SpaceLow() error {
	if !s.spent.Load() {
		return nil
	}
	s.retryReserve()
	return fmt.Errorf("%w: %w", ErrWrite, ErrSpaceLow)
}

// retryReserve starts a background attempt to write the reserve again,
// unless one ran within reserveRetry or the store is closing.
func (s *Store) retryReserve() {
	s.reserveMu.Lock()
	if s.reserveBusy || time.Since(s.reserveTried) < reserveRetry {
		s.reserveMu.Unlock()
		return
	}
	if s.reserveClosed {
		s.reserveMu.Unlock()
		return
	}
	s.wg.Add(1)
	s.reserveBusy = true
	s.reserveMu.Unlock()
	go func() {
		defer s.wg.Done()
		err := s.writeReserve()
		s.reserveMu.Lock()
		defer s.reserveMu.Unlock()
		s.reserveBusy, s.reserveTried = false, time.Now()
		if err != nil {
			return
		}
		s.spent.Store(false)
		s.cfg.logger.Info("store: space returned: its reserve is written again, new queue entries accepted")
	}()
}
