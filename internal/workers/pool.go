package workers

import (
	"sync"
	"time"
)

// DefaultIdle is how long a goroutine waits for another job: long
// enough to span the gaps between the messages of a busy connection even
// when the process gets the CPU only now and then (at 10 ms a loaded
// machine let most goroutines lapse, and with them their grown stacks),
// short enough that an idle connection soon holds no goroutine for its
// jobs.
const DefaultIdle = 100 * time.Millisecond

// Pool starts jobs on goroutines counted in its owner's WaitGroup. The
// zero Pool is not usable; make one with New.
type Pool struct {
	wg   *sync.WaitGroup
	done <-chan struct{}
	idle time.Duration
	work chan func() // unbuffered: a send succeeds only into a waiting goroutine
}

// New returns a Pool whose goroutines are counted in wg and stop waiting
// for jobs once done is closed or after idle without one (DefaultIdle if
// idle <= 0). The owner calls Go only where it could call wg.Go: before
// it waits for wg, or from a job.
func New(wg *sync.WaitGroup, done <-chan struct{}, idle time.Duration) *Pool {
	if idle <= 0 {
		idle = DefaultIdle
	}
	return &Pool{wg: wg, done: done, idle: idle, work: make(chan func())}
}

// Go runs f on a goroutine of its own: a waiting one if there is one,
// else a new one. It does not block.
func (p *Pool) Go(f func()) {
	select {
	case p.work <- f:
	default:
		p.wg.Go(func() { p.serve(f) })
	}
}

// serve runs f, then each job handed to it while it waits, until it has
// waited idle or done is closed.
func (p *Pool) serve(f func()) {
	var t *time.Timer
	for {
		f()
		if t == nil {
			t = time.NewTimer(p.idle)
		} else {
			t.Reset(p.idle)
		}
		select {
		case f = <-p.work:
		case <-t.C:
			return
		case <-p.done:
			t.Stop()
			return
		}
	}
}
