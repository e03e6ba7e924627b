package workers

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshagent/meshagent/internal/wait"
)

// A job blocked on its goroutine does not delay the next: each runs on
// a goroutine of its own.
func TestBlockedJobDoesNotDelayAnother(t *testing.T) {
	var wg sync.WaitGroup
	done := make(chan struct{})
	p := New(&wg, done, time.Minute)
	release := make(chan struct{})
	p.Go(func() { <-release })
	ran := make(chan struct{})
	p.Go(func() { close(ran) })
	wait.Receive(t, 10*time.Second, ran, "the second job")
	close(release)
	close(done)
	wg.Wait()
}

// A goroutine whose job has ended takes the next one handed to it, and
// the WaitGroup counts it until done closes.
func TestWaitingGoroutineServesTheNextJob(t *testing.T) {
	var wg sync.WaitGroup
	done := make(chan struct{})
	p := New(&wg, done, time.Minute)
	var started atomic.Int32
	p.Go(func() { started.Add(1) })
	wait.ForTrue(t, 10*time.Second, "the first job", func() bool { return started.Load() == 1 })
	var ran atomic.Int32
	for range 100 {
		// Wait until the goroutine is back waiting, then hand it a job.
		wait.ForTrue(t, 10*time.Second, "a waiting goroutine", func() bool {
			select {
			case p.work <- func() { ran.Add(1) }:
				return true
			default:
				return false
			}
		})
	}
	wait.ForTrue(t, 10*time.Second, "100 jobs", func() bool { return ran.Load() == 100 })
	close(done)
	wg.Wait()
}

// A goroutine with nothing to do ends after idle.
func TestIdleGoroutineEnds(t *testing.T) {
	var wg sync.WaitGroup
	p := New(&wg, make(chan struct{}), time.Millisecond)
	for range 5 {
		p.Go(func() {})
	}
	ended := make(chan struct{})
	go func() { wg.Wait(); close(ended) }()
	wait.Receive(t, 10*time.Second, ended, "the idle goroutines' end")
}

// TestLongJobKeepsItsGoroutine: the idle interval counts from the end of
// a job, not from its start. A goroutine whose job ran past idle still
// waits for the next one afterwards.
func TestLongJobKeepsItsGoroutine(t *testing.T) {
	var wg sync.WaitGroup
	done := make(chan struct{})
	const idle = 500 * time.Millisecond
	p := New(&wg, done, idle)
	p.Go(func() {})
	ended := make(chan struct{})
	// The long job goes to the goroutine that ran the first, now waiting.
	wait.ForTrue(t, 10*time.Second, "a waiting goroutine", func() bool {
		select {
		case p.work <- func() {
			<-time.After(3 * idle) // the job's own length, past several checks
			close(ended)
		}:
			return true
		default:
			return false
		}
	})
	wait.Receive(t, 30*time.Second, ended, "the long job")
	var ran atomic.Int32
	wait.ForTrue(t, 10*time.Second, "the long job's goroutine waiting", func() bool {
		select {
		case p.work <- func() { ran.Add(1) }:
			return true
		default:
			return false
		}
	})
	wait.ForTrue(t, 10*time.Second, "the next job", func() bool { return ran.Load() == 1 })
	close(done)
	wg.Wait()
}
