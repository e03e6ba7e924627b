package bus

import (
	"sync"
	"time"

	"github.com/meshagent/meshagent/rpc"
	"github.com/meshagent/meshagent/store"
)

// storeGate refuses sendMessage while the bus's store cannot write (a
// full disk): a message is refused before it is acknowledged, never
// acknowledged and then lost. A failed write (history, outbox, dead
// letter) closes the gate for gateHold; the history writer, which keeps
// a batch it could not write and tries it again every gateHold, keeps it
// closed until that batch is written, and then opens it. A failure of the
// outbox alone lets one sendMessage try again after gateHold, so the bus
// resumes by itself once space returns. The gate also refuses while the
// store's disk is full and its reserve is spent (store.WithReserve):
// history is written after the acknowledgement, so a message accepted
// then might find no room for it. check is the one place that decides.
type storeGate struct {
	store *store.Store // nil: no store, the gate never closes

	mu    sync.Mutex
	until time.Time // refuse until then
	err   error     // the write that failed
}

// gateHold is how long one failed write closes the gate, and how often
// the history writer tries a batch it could not write again.
const gateHold = time.Second

// fail closes the gate after err, a failed store write, until now+gateHold.
func (g *storeGate) fail(now time.Time, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.until, g.err = now.Add(gateHold), err
}

// open opens the gate: a write succeeded. It reports whether it was
// closed.
func (g *storeGate) open() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	was := g.err != nil
	g.until, g.err = time.Time{}, nil
	return was
}

// check returns the error sendMessage answers while the gate is closed
// or the store's reserve is spent (store.Store.SpaceLow), or nil.
func (g *storeGate) check(now time.Time) error {
	if err := g.failed(now); err != nil {
		return refuse(err)
	}
	if g.store == nil {
		return nil
	}
	if err := g.store.SpaceLow(); err != nil {
		return refuse(err)
	}
	return nil
}

// failed returns the write that closed the gate while it is closed, or
// nil.
func (g *storeGate) failed(now time.Time) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.err == nil || !now.Before(g.until) {
		return nil
	}
	return g.err
}

// refuse is sendMessage's answer while the store cannot write because of
// err.
func refuse(err error) error {
	return rpc.Errorf(rpc.CodeServerBusy, "server busy: the bus's store cannot write (%v); message not accepted, send it again later", err)
}
