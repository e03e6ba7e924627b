package bus

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/meshagent/meshagent/store"
)

// The outbox holds what the bus has acknowledged but not delivered: a
// failed first attempt's retry, a replayed dead letter, and what waits for
// a subscriber that is away. One loop delivers it, through the same pass
// as first attempts, and sleeps until the next message is due or it is
// woken (a new retry, a replay, a subscriber back): it never polls.

// retryBatch bounds the messages one pass of the retry loop takes.
const retryBatch = 64

// wake makes the retry loop look at the outbox now.
func (b *Bus) wake() {
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

// wakeClient makes what waits in the outbox for a client that has just
// subscribed due now, and wakes the retry loop to deliver it.
func (b *Bus) wakeClient(id string) {
	if b.store == nil {
		return
	}
	n, err := b.store.Wake(b.ctx, id, b.now())
	if err != nil {
		if b.ctx.Err() == nil {
			b.log.Warn("outbox not woken", "client", id, "err", err)
		}
		return
	}
	if n > 0 {
		b.log.Debug("client back: its waiting messages are due", "client", id, "messages", n)
		b.wake()
	}
}

// retryLoop delivers the outbox: retries whose time has come, replayed
// dead letters, what waited for a subscriber that is back, and what a
// restart found waiting (the first pass runs at once).
func (b *Bus) retryLoop() {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-b.ctx.Done():
			return
		case <-t.C:
		case <-b.kick:
		}
		due, err := b.store.Due(b.ctx, b.now(), retryBatch)
		if err != nil && b.ctx.Err() == nil {
			b.log.Warn("outbox unreadable", "err", err)
		}
		for _, m := range due {
			b.retry(m)
		}
		t.Stop()
		switch next, ok, err := b.store.NextDue(b.ctx); {
		case len(due) == retryBatch:
			t.Reset(0) // more may be due
		case err != nil:
			if b.ctx.Err() == nil {
				b.log.Warn("outbox unreadable", "err", err)
				t.Reset(b.cfg.RetryBackoff) // try the store again
			}
		case ok:
			t.Reset(max(next.Sub(b.now()), 0))
		}
		// Nothing waits: only a wake starts the next pass.
	}
}

// retry makes one more attempt at an outbox message: to the client or
// queue group it is addressed to, or routed afresh when it names none.
func (b *Bus) retry(m store.Message) {
	ctx, now := b.ctx, b.now()
	if !m.Expires.IsZero() && !now.Before(m.Expires) {
		b.deadLetter(m, fmt.Sprintf("TTL expired: not delivered within %s (subscriber %s away; sent %s)",
			b.cfg.MessageTTL, orAny(m.To), m.Time.UTC().Format(time.RFC3339)), m.LastError)
		return
	}
	var subs []*subscription
	if s := b.addressee(m); s != nil {
		subs = []*subscription{s}
	} else if m.To == "" {
		subs = b.subs.route(m.Topic)
	} else {
		b.await(m, now)
		return
	}
	atts, _ := b.pass(ctx, m, subs)
	if ctx.Err() != nil {
		return
	}
	if m.To != "" && atts[0].absent() { // a connection that ended during the attempt
		b.await(m, now)
		return
	}
	var (
		why    []string
		failed = attempt{err: errNoSubscriber}
	)
	if len(atts) == 0 {
		why = append(why, errNoSubscriber.Error())
	}
	for _, a := range atts {
		if a.failed() {
			if why == nil {
				failed = a
			}
			why = append(why, a.reason())
		}
	}
	if len(why) == 0 {
		if err := b.store.Delivered(ctx, m.ID); err != nil && !errors.Is(err, store.ErrNotFound) {
			b.log.Warn("outbox not updated", "id", m.ID, "err", err)
		}
		return
	}
	reason := strings.Join(why, "; ")
	if m.Attempts+1 >= b.cfg.MaxAttempts {
		m.Attempts++
		b.deadLetter(m, fmt.Sprintf("gave up after %d attempts: %s", m.Attempts, reason), reason)
		return
	}
	if err := b.store.Retry(ctx, m.ID, reason, now.Add(b.cfg.backoff(m.Attempts, failed))); err != nil {
		b.log.Warn("outbox not updated", "id", m.ID, "err", err)
		return
	}
	b.met.retry()
}

// await keeps a message whose subscriber is away in the outbox without
// counting an attempt, until the subscriber subscribes again (subscribe
// wakes it through wakeClient) or the message expires (when the retry
// loop dead-letters it). A message with no expiry (replayed, or queued by
// an older version) gets MessageTTL from now.
func (b *Bus) await(m store.Message, now time.Time) {
	expires := m.Expires
	if expires.IsZero() {
		expires = now.Add(b.cfg.MessageTTL)
	}
	why := fmt.Sprintf("waiting for client %s to subscribe to %s", m.To, m.Topic)
	if gm, ok := groupOf(m); ok {
		why = fmt.Sprintf("waiting for a member of queue group %s to subscribe to %s", gm.Group, gm.Pattern)
	}
	if err := b.store.Postpone(b.ctx, m.ID, why, expires, expires); err != nil {
		if !errors.Is(err, store.ErrNotFound) && b.ctx.Err() == nil {
			b.log.Warn("outbox not updated", "id", m.ID, "err", err)
		}
		return
	}
	b.log.Debug("subscriber away: message waits", "id", m.ID, "client", m.To, "until", expires)
	// The client may have subscribed between the attempt and the
	// postponement, and its wake found the message still due.
	if s := b.addressee(m); s != nil && (s.members == nil || s.members.live()) {
		b.wakeClient(m.To)
	}
}

// addressee returns the subscription an outbox message addressed to a
// client or a queue group goes to, or nil: none is subscribed (or the
// message is to be routed afresh).
func (b *Bus) addressee(m store.Message) *subscription {
	if gm, ok := groupOf(m); ok {
		return b.subs.group(gm.Pattern, gm.Group)
	}
	if m.To == "" {
		return nil
	}
	return b.subs.of(m.To, m.Topic)
}

func orAny(client string) string {
	if client == "" {
		return "(any)"
	}
	return client
}
