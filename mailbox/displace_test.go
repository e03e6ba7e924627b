package mailbox_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshagent/meshagent/mailbox"
)

// logBuffer collects a Server's log lines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestSybilFloodHonestStillDeposits is the attack on a mailbox: throwaway
// identities, each within its share, fill an agent's mailbox with requests
// for a capability it never serves. Once the agent has fetched them and
// deferred them (no handler) for DisplaceAfter, an honest sender's deposit
// takes the place of one of them; the one displaced leaves a log line and
// the count behind. Before that, and for items the agent never saw, the
// mailbox stays full, and a deposit refused as full leaves the message
// with its sender.
func TestSybilFloodHonestStillDeposits(t *testing.T) {
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	logs := &logBuffer{}
	const capacity, sybils = 10, 10
	r, srv, _ := relay(t, mailbox.WithBounds(capacity, 1<<20, 1<<20), mailbox.WithSenderBounds(capacity/10, 1<<20), mailbox.WithReserve(0, 0),
		mailbox.WithClock(clock), mailbox.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
	b, bc := agent(t, r)
	for i := range sybils {
		s, sc := agent(t, r)
		if err := sc.Deposit(ctx(t), r.ID(), b.ID(), call(t, s, b.ID(), "never-served", fmt.Sprint("x", i), nil)); err != nil {
			t.Fatalf("sybil %d: %v", i, err)
		}
	}
	h, hc := agent(t, r)
	if err := hc.Deposit(ctx(t), r.ID(), b.ID(), message(t, h, b.ID(), "honest0")); !errors.Is(err, mailbox.ErrFull) {
		t.Fatalf("a deposit to a mailbox its agent has not read: %v, want ErrFull", err)
	}

	// The agent fetches everything and has no handler for any of it.
	p, err := bc.Fetch(ctx(t), r.ID(), "", 0)
	if err != nil || len(p.Items) != capacity {
		t.Fatalf("page %+v %v", p, err)
	}
	var all []string
	for _, it := range p.Items {
		if it.Deferred {
			t.Fatalf("item %s deferred before the agent said so", it.ID)
		}
		all = append(all, it.ID)
	}
	if err := bc.Defer(ctx(t), r.ID(), all); err != nil {
		t.Fatal(err)
	}
	if err := hc.Deposit(ctx(t), r.ID(), b.ID(), message(t, h, b.ID(), "honest0")); !errors.Is(err, mailbox.ErrFull) {
		t.Fatalf("a deposit before the deferred items' time is up: %v, want ErrFull", err)
	}
	now.Add(int64(mailbox.DefaultDisplaceAfter + time.Second))
	if err := hc.Deposit(ctx(t), r.ID(), b.ID(), message(t, h, b.ID(), "honest0")); err != nil {
		t.Fatalf("the honest deposit after the flood was deferred: %v", err)
	}
	if n := srv.Displaced(); n != 1 {
		t.Fatalf("displaced %d, want 1", n)
	}
	if l := logs.String(); !strings.Contains(l, "deferred item displaced") || !strings.Contains(l, all[0]) {
		t.Fatalf("no log line names the displaced item %s:\n%s", all[0], l)
	}

	// The agent finds the honest message, not yet deferred, and the rest of
	// the flood, still marked.
	p, err = bc.Fetch(ctx(t), r.ID(), "", 0)
	if err != nil || len(p.Items) != capacity {
		t.Fatalf("page %+v %v", p, err)
	}
	for i, it := range p.Items {
		honest := strings.HasPrefix(it.ID, b.ID().String()+"/"+h.ID().String()+"/")
		if honest != (i == capacity-1) || it.Deferred == honest || it.ID == all[0] {
			t.Fatalf("item %d %s deferred %v: want the flood but its first, deferred, then the honest message", i, it.ID, it.Deferred)
		}
	}
}

// TestDeferOwnOnly: an agent defers items of its own mailbox only.
func TestDeferOwnOnly(t *testing.T) {
	r, _, _ := relay(t)
	a, ac := agent(t, r)
	b, _ := agent(t, r)
	if err := ac.Deposit(ctx(t), r.ID(), b.ID(), message(t, a, b.ID(), "m0")); err != nil {
		t.Fatal(err)
	}
	id := fmt.Sprintf("%s/%s/m0", b.ID(), a.ID())
	if err := ac.Defer(ctx(t), r.ID(), []string{id}); !errors.Is(err, mailbox.ErrRefused) {
		t.Fatalf("a defers b's item: %v, want ErrRefused", err)
	}
}
