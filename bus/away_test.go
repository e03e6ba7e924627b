package bus_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshagent/meshagent/bus"
	"github.com/meshagent/meshagent/internal/fakemesh"
	"github.com/meshagent/meshagent/internal/rpctest"
	"github.com/meshagent/meshagent/store"
)

// Retries wait for a subscriber that is away: an attempt that finds its
// client id not subscribed is not one of seed 001's three deliveries; the
// message waits until the client subscribes again, up to the TTL.

// busServerWith is busServer with a bus configuration of the test's own.
func busServerWith(t *testing.T, cfg bus.Config, st *store.Store) (*rpctest.Stack, string) {
	t.Helper()
	return busServer(t, fakemesh.New(), st, withConfig(cfg))
}

// leaveAfterRetrying sends job:1 to a subscriber "worker" that asks for a
// retry and then disconnects, and returns that worker.
func leaveAfterRetrying(t *testing.T, url string) *peer {
	t.Helper()
	worker := newPeer(t, url, "worker", func(delivery) (any, error) {
		return map[string]any{"processed": false, "should_retry": true, "message": "not now"}, nil
	})
	worker.subscribe(t, map[string]any{"topic": "job:*"})
	sender := newPeer(t, url, "sender", nil)
	res := sender.send(t, "job:1", "keep me")
	if len(res.Acks) != 1 || !res.Acks[0].Retrying {
		t.Fatalf("acks %+v, want one retrying", res.Acks)
	}
	if err := worker.Close(); err != nil {
		t.Fatal(err)
	}
	return worker
}

// waitAway waits until the outbox holds the message as waiting for its
// client, and fails if it was dead-lettered instead.
func waitAway(t *testing.T, st *store.Store) store.Message {
	t.Helper()
	var waiting store.Message
	waitFor(t, "the message waiting for its subscriber (or its dead letter)", func() bool {
		if dls, _ := st.DeadLetters(ctxT(t), store.DLQFilter{}); len(dls) > 0 {
			t.Fatalf("dead-lettered while its subscriber was away: %q", dls[0].Reason)
		}
		p, _ := st.Pending(ctxT(t), 0)
		if len(p) == 1 && strings.HasPrefix(p[0].LastError, "waiting for client worker") {
			waiting = p[0]
			return true
		}
		return false
	})
	return waiting
}

// comeBack reconnects as "worker", subscribes, and checks that the
// message is delivered exactly once.
func comeBack(t *testing.T, url string, st *store.Store) {
	t.Helper()
	worker := newPeer(t, url, "worker", nil)
	worker.subscribe(t, map[string]any{"topic": "job:*"})
	waitFor(t, "an empty outbox", func() bool {
		p, _ := st.Pending(ctxT(t), 0)
		return len(p) == 0
	})
	if got := strings.Join(worker.texts(), ","); got != "keep me" {
		t.Errorf("the returning subscriber got %q, want the message once", got)
	}
	if dls, _ := st.DeadLetters(ctxT(t), store.DLQFilter{}); len(dls) != 0 {
		t.Errorf("dead letters %+v", dls)
	}
}

// TestBusRetryWaitsForSubscriber: away for longer than the whole retry
// schedule (three attempts within about 100 ms), the subscriber still gets
// the message once when it subscribes again; it was not dead-lettered, and
// the absence did not count as attempts.
func TestBusRetryWaitsForSubscriber(t *testing.T) {
	st := openStore(t, filepath.Join(t.TempDir(), "bus.db"))
	cfg := fastConfig()
	_, url := busServerWith(t, cfg, st)
	leaveAfterRetrying(t, url)
	m := waitAway(t, st)
	if m.Attempts >= cfg.MaxAttempts {
		t.Errorf("%d attempts counted while away, want fewer than %d", m.Attempts, cfg.MaxAttempts)
	}
	if want := m.Time.Add(cfg.MessageTTL); !m.Expires.Equal(want) || !m.NextAttempt.Equal(want) {
		t.Errorf("waiting message expires %v, next attempt %v; want both at the TTL, %v", m.Expires, m.NextAttempt, want)
	}
	comeBack(t, url, st)
}

// TestBusRetryTTL: a message whose TTL passes while its subscriber is away
// is a dead letter whose reason says so.
func TestBusRetryTTL(t *testing.T) {
	st := openStore(t, filepath.Join(t.TempDir(), "bus.db"))
	cfg := fastConfig()
	if err := bus.WithMessageTTL(500 * time.Millisecond)(&cfg); err != nil {
		t.Fatal(err)
	}
	_, url := busServerWith(t, cfg, st)
	leaveAfterRetrying(t, url)
	var dls []store.DeadLetter
	waitFor(t, "the dead letter", func() bool {
		dls, _ = st.DeadLetters(ctxT(t), store.DLQFilter{})
		return len(dls) == 1
	})
	if d := dls[0]; !strings.Contains(d.Reason, "TTL expired") || !strings.Contains(d.Reason, "worker") || d.To != "worker" {
		t.Errorf("dead letter %q to %q, want a reason naming the TTL and the absent client", d.Reason, d.To)
	}
	if d := dls[0].DeadAt.Sub(dls[0].Time); d < cfg.MessageTTL {
		t.Errorf("dead-lettered %s after it was sent, before its TTL of %s", d, cfg.MessageTTL)
	}
}

// TestBusRetryWaitsAcrossRestart: the waiting message survives the bus
// closing and its store reopening, and the new bus delivers it when the
// subscriber comes back (its subscribe wakes the message, which would
// otherwise wait until its TTL).
func TestBusRetryWaitsAcrossRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bus.db")
	st1, err := store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	srv1, url1 := busServerWith(t, fastConfig(), st1)
	leaveAfterRetrying(t, url1)
	waitAway(t, st1)
	if err := srv1.Close(); err != nil {
		t.Fatal(err)
	}
	if err := st1.Close(); err != nil {
		t.Fatal(err)
	}
	st2 := openStore(t, path)
	_, url2 := busServerWith(t, fastConfig(), st2)
	comeBack(t, url2, st2)
}

// TestBusRetryCountsDeliveriesOnly: a subscriber that comes back and
// still cannot take the message gets it three times in all, the delivery
// before it left included; its absence counted for none of them.
func TestBusRetryCountsDeliveriesOnly(t *testing.T) {
	st := openStore(t, filepath.Join(t.TempDir(), "bus.db"))
	cfg := fastConfig()
	_, url := busServerWith(t, cfg, st)
	first := leaveAfterRetrying(t, url)
	waitAway(t, st)
	worker := newPeer(t, url, "worker", func(delivery) (any, error) {
		return map[string]any{"processed": false, "should_retry": true, "message": "still not now"}, nil
	})
	worker.subscribe(t, map[string]any{"topic": "job:*"})
	var dls []store.DeadLetter
	waitFor(t, "the dead letter", func() bool {
		dls, _ = st.DeadLetters(ctxT(t), store.DLQFilter{})
		return len(dls) == 1
	})
	// The first connection may have had a retry before its close was
	// through: count both.
	if before, after := len(first.texts()), len(worker.texts()); before+after != cfg.MaxAttempts {
		t.Errorf("%d deliveries before leaving and %d after coming back, want %d in all", before, after, cfg.MaxAttempts)
	}
	if d := dls[0]; d.Attempts != cfg.MaxAttempts || !strings.Contains(d.Reason, "gave up after 3 attempts") || !strings.Contains(d.Reason, "still not now") {
		t.Errorf("dead letter after %d attempts: %q", d.Attempts, d.Reason)
	}
}
