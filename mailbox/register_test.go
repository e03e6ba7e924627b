package mailbox_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/meshagent/meshagent/mailbox"
)

// TestDepositForStrangerRefused: a relay holds mail only for agents that
// named it as their mailbox (a fetch of theirs, or Register after their
// signed hello); a deposit for another agent is refused, saying why.
func TestDepositForStrangerRefused(t *testing.T) {
	r, srv, _ := relay(t)
	a, ac := agent(t, r)
	b, _ := stranger(t, r)
	err := ac.Deposit(ctx(t), r.ID(), b.ID(), message(t, a, b.ID(), "m0"))
	if !errors.Is(err, mailbox.ErrRefused) || !strings.Contains(err.Error(), "has not named this relay as its mailbox") {
		t.Fatalf("a deposit for an agent that never named the relay: %v, want refused, saying why", err)
	}
	if err := srv.Register(b.ID()); err != nil {
		t.Fatal(err)
	}
	if err := ac.Deposit(ctx(t), r.ID(), b.ID(), message(t, a, b.ID(), "m0")); err != nil {
		t.Fatalf("after its hello named the relay: %v", err)
	}
}

// TestThrowawayFloodKeepsReserveForKnownSender: 10 throwaway identities ×
// 20 deposits (each within its tenth of a mailbox of 20) fill only the
// part of the mailbox open to senders the agent never took mail from; a
// sender it took mail from before still deposits. A new sender meanwhile
// is refused as full, and keeps its message.
func TestThrowawayFloodKeepsReserveForKnownSender(t *testing.T) {
	const capacity = 20
	r, _, _ := relay(t, mailbox.WithBounds(capacity, 16<<20, 256<<20), mailbox.WithSenderBounds(capacity/10, 16<<20))
	b, bc := agent(t, r)
	h, hc := agent(t, r)
	if err := hc.Deposit(ctx(t), r.ID(), b.ID(), message(t, h, b.ID(), "before")); err != nil {
		t.Fatal(err)
	}
	p, err := bc.Fetch(ctx(t), r.ID(), "", 0)
	if err != nil || len(p.Items) != 1 {
		t.Fatalf("fetch %+v %v", p, err)
	}
	if err := bc.Ack(ctx(t), r.ID(), []string{p.Items[0].ID}); err != nil {
		t.Fatal(err)
	}

	const identities, each = 10, capacity
	var mu sync.Mutex
	kept, full := 0, 0
	var wg sync.WaitGroup
	for i := range identities {
		s, sc := stranger(t, r)
		wg.Go(func() {
			for j := range each {
				err := sc.Deposit(ctx(t), r.ID(), b.ID(), call(t, s, b.ID(), "never-served", fmt.Sprint("x", i, "-", j), nil))
				mu.Lock()
				switch {
				case err == nil:
					kept++
				case errors.Is(err, mailbox.ErrFull):
					full++
				default:
					t.Errorf("throwaway %d deposit %d: %v", i, j, err)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	t.Logf("flood: %d kept, %d refused as full", kept, full)
	if open := capacity / 2; kept != open {
		t.Fatalf("the flood left %d items, want the %d open to unknown senders", kept, open)
	}
	if err := hc.Deposit(ctx(t), r.ID(), b.ID(), message(t, h, b.ID(), "after")); err != nil {
		t.Fatalf("the known sender's deposit during the flood: %v", err)
	}
	n, nc := agent(t, r)
	if err := nc.Deposit(ctx(t), r.ID(), b.ID(), message(t, n, b.ID(), "new")); !errors.Is(err, mailbox.ErrFull) {
		t.Fatalf("a new sender's deposit during the flood: %v, want ErrFull", err)
	}
}

// TestOneSenderCannotFillRelay: one sender depositing for many agents is
// stopped at its share of the relay (a sixteenth by default, or
// WithSenderTotal's); another sender still deposits.
func TestOneSenderCannotFillRelay(t *testing.T) {
	const total = 4 << 20
	for _, tc := range []struct {
		name  string
		opts  []mailbox.Option
		share int64 // what one sender may hold
		above int64 // what it must get past: the share is the option's, not the default's
	}{
		{"a sixteenth of the relay", nil, max(total/16, mailbox.MaxEnvelopeBytes), 0},
		{"WithSenderTotal", []mailbox.Option{mailbox.WithSenderTotal(512 << 10)}, 512 << 10, max(total/16, mailbox.MaxEnvelopeBytes)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, _, st := relay(t, append([]mailbox.Option{mailbox.WithBounds(1000, 1<<20, total)}, tc.opts...)...)
			a, ac := agent(t, r)
			params, _ := json.Marshal(map[string]string{"text": strings.Repeat("x", 60<<10)})
			deposited := 0
			for i := 0; ; i++ {
				b, _ := agent(t, r)
				err := ac.Deposit(ctx(t), r.ID(), b.ID(), call(t, a, b.ID(), "summarize", fmt.Sprint("big-", i), params))
				if errors.Is(err, mailbox.ErrFull) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				if deposited++; deposited > 100 {
					t.Fatal("no bound on one sender's share of the relay")
				}
			}
			u, err := st.QueueUsage(ctx(t), mailbox.Queue)
			if err != nil {
				t.Fatal(err)
			}
			if u.Bytes > tc.share || u.Bytes <= tc.above {
				t.Fatalf("one sender holds %d bytes, its share is %d (more than %d)", u.Bytes, tc.share, tc.above)
			}
			t.Logf("one sender: %d deposits, %d bytes of %d", deposited, u.Bytes, total)
			o, oc := agent(t, r)
			b, _ := agent(t, r)
			if err := oc.Deposit(ctx(t), r.ID(), b.ID(), call(t, o, b.ID(), "summarize", "other", params)); err != nil {
				t.Fatalf("another sender: %v", err)
			}
		})
	}
}

// TestFreshIdentitiesCannotCloseRelayToKnownSenders: throwaway
// recipients, each registered (its own fetch) and filled by a throwaway
// sender until its mailbox refuses, fill only the relay's part open to
// senders unknown to their recipients (half of it by default, or
// WithUnknownTotal's): then the relay
// refuses the flood, and an agent's known sender (one it took mail from)
// still deposits, and the agent fetches what it sent.
func TestFreshIdentitiesCannotCloseRelayToKnownSenders(t *testing.T) {
	const total = 2 << 20
	for _, tc := range []struct {
		name string
		opts []mailbox.Option
		part int64 // what senders unknown to their recipients may hold together
	}{
		{"half of the relay", nil, total / 2},
		{"WithUnknownTotal", []mailbox.Option{mailbox.WithUnknownTotal(total / 4)}, total / 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, _, st := relay(t, append([]mailbox.Option{mailbox.WithBounds(1000, 512<<10, total)}, tc.opts...)...)
			a, ac := agent(t, r)
			k, kc := agent(t, r)
			if err := kc.Deposit(ctx(t), r.ID(), a.ID(), message(t, k, a.ID(), "before")); err != nil {
				t.Fatal(err)
			}
			p, err := ac.Fetch(ctx(t), r.ID(), "", 0)
			if err != nil || len(p.Items) != 1 {
				t.Fatalf("fetch %+v %v", p, err)
			}
			if err := ac.Ack(ctx(t), r.ID(), []string{p.Items[0].ID}); err != nil {
				t.Fatal(err)
			}

			params, _ := json.Marshal(map[string]string{"text": strings.Repeat("x", 60<<10)})
			kept, closed := 0, false
			for round := 0; !closed; round++ {
				if round == 40 {
					t.Fatalf("%d throwaway recipients and senders, %d deposits kept: the relay never refused the flood", round, kept)
				}
				b, _ := agent(t, r)
				s, sc := stranger(t, r)
				for i := 0; ; i++ {
					err := sc.Deposit(ctx(t), r.ID(), b.ID(), call(t, s, b.ID(), "never-served", fmt.Sprint("flood-", round, "-", i), params))
					if errors.Is(err, mailbox.ErrFull) {
						closed = i == 0 // a fresh pair refused at once: the relay's part is full
						break
					}
					if err != nil {
						t.Fatalf("round %d deposit %d: %v", round, i, err)
					}
					kept++
				}
			}
			u, err := st.QueueUsage(ctx(t), mailbox.Queue)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("flood: %d deposits kept, %d bytes of %d, then refused", kept, u.Bytes, total)
			if err := kc.Deposit(ctx(t), r.ID(), a.ID(), call(t, k, a.ID(), "summarize", "after", params)); err != nil {
				t.Fatalf("the known sender's deposit after the flood: %v", err)
			}
			if u.Bytes > tc.part {
				t.Fatalf("unknown senders hold %d bytes, their part is %d", u.Bytes, tc.part)
			}
			p, err = ac.Fetch(ctx(t), r.ID(), "", 0)
			if err != nil || len(p.Items) != 1 || !strings.Contains(p.Items[0].ID, k.ID().String()) {
				t.Fatalf("the agent's fetch after the flood: %+v %v, want the known sender's item", p, err)
			}
		})
	}
}

// TestRelayBoundsAgents: a relay holds mail for at most MaxAgents agents
// (WithMaxAgents). Past them a new agent is not registered (its fetch is
// still answered, and Register says ErrFull), so deposits for it are
// refused, while the agents it holds still get their mail.
func TestRelayBoundsAgents(t *testing.T) {
	r, srv, _ := relay(t, mailbox.WithMaxAgents(2, 10))
	a, ac := agent(t, r)
	b, bc := agent(t, r)
	c, _ := agent(t, r) // its fetch answers, but does not register it
	if err := srv.Register(c.ID()); !errors.Is(err, mailbox.ErrFull) {
		t.Fatalf("a third agent's registration: %v, want ErrFull", err)
	}
	if err := ac.Deposit(ctx(t), r.ID(), c.ID(), message(t, a, c.ID(), "m0")); !errors.Is(err, mailbox.ErrRefused) {
		t.Fatalf("a deposit for the agent past the bound: %v, want refused", err)
	}
	if err := ac.Deposit(ctx(t), r.ID(), b.ID(), message(t, a, b.ID(), "m1")); err != nil {
		t.Fatalf("a deposit for a held agent: %v", err)
	}
	if p, err := bc.Fetch(ctx(t), r.ID(), "", 0); err != nil || len(p.Items) != 1 {
		t.Fatalf("the held agent's fetch: %+v %v", p, err)
	}
}
