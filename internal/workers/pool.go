package workers

import (
	"sync"
	"sync/atomic"
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
// for jobs once done is closed or after idle to twice idle without one (DefaultIdle if
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
// waited idle (at most twice that) or done is closed.
func (p *Pool) serve(f func()) {
	w := newWaiter(p.idle)
	defer w.stop()
	for {
		w.state.Add(1) // odd: running a job
		f()
		w.state.Add(1) // even: waiting
		select {
		case f = <-p.work:
		case <-w.quit:
			return
		case <-p.done:
			return
		}
	}
}

// waiter ends a pool goroutine's wait once it has lasted an idle interval.
// The wait has no timer of its own: a goroutine blocked in a select on a
// timer's channel puts the timer in the runtime's heap and takes it out
// again when a job arrives, and the wait needed a Reset per job as well.
// Nor does a job read the clock (time.Now per job was 1.6% of the bus's
// CPU in a profile of BusCPUPerTrip). A job counts itself in state, and a
// timer that fires once per idle interval closes quit when the goroutine
// is waiting and has run no job since the timer last fired: it has waited
// between one and two intervals. Measured with BusCPUPerTrip/nostore
// (40,000 round trips, five runs each, interleaved, medians): 91 → 88 µs
// of CPU per round trip against the timer in the select.
type waiter struct {
	idle  time.Duration
	state atomic.Uint64 // twice the jobs begun, plus one while one runs
	seen  uint64        // state when the timer last fired; the timer's own
	gone  atomic.Bool   // the goroutine has returned
	quit  chan struct{}
	timer atomic.Pointer[time.Timer]
}

func newWaiter(idle time.Duration) *waiter {
	w := &waiter{idle: idle, quit: make(chan struct{})}
	// Armed once stored, so that check always finds it.
	t := time.AfterFunc(time.Hour, w.check)
	w.timer.Store(t)
	t.Reset(idle)
	return w
}

// check runs on the timer, one call at a time (each re-arms it for the
// next).
func (w *waiter) check() {
	if w.gone.Load() {
		return
	}
	s := w.state.Load()
	if s%2 == 0 && s == w.seen {
		close(w.quit) // never re-armed after this: closed once
		return
	}
	w.seen = s
	w.timer.Load().Reset(w.idle)
}

func (w *waiter) stop() {
	w.gone.Store(true)
	w.timer.Load().Stop()
}
