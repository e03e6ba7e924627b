package bus

import (
	"context"

	"github.com/meshagent/meshagent/store"
)

// History is written by writers of its own, so that no sendMessage waits
// for an fsync; each commit carries one record per writer waiting, so
// there are enough of them to fill a store group commit.
const (
	historyQueue   = 4096
	historyWriters = 32
)

// record writes a message to history, in the background: history is not
// part of what sendMessage acknowledges.
func (b *Bus) record(msg store.Message) {
	if b.store == nil {
		return
	}
	select {
	case b.historyQ <- msg: // blocks only when the writers fall behind
	case <-b.ctx.Done():
		b.recordNow(context.Background(), msg)
	}
}

func (b *Bus) historyLoop() {
	for {
		select {
		case m := <-b.historyQ:
			// Not b.ctx: a record taken before Close began is still
			// written, like those left in the queue.
			b.recordNow(context.Background(), m)
		case <-b.ctx.Done():
			for { // what was queued before Close is still written
				select {
				case m := <-b.historyQ:
					b.recordNow(context.Background(), m)
				default:
					return
				}
			}
		}
	}
}

func (b *Bus) recordNow(ctx context.Context, m store.Message) {
	if err := b.store.Record(ctx, m); err != nil {
		b.log.Warn("history not recorded", "id", m.ID, "err", err)
	}
}

// deadLetter gives up on an outbox message.
func (b *Bus) deadLetter(m store.Message, reason, lastError string) {
	m.LastError = lastError
	if err := b.store.DeadLetter(b.ctx, m, reason); err != nil {
		b.log.Warn("dead letter not stored", "id", m.ID, "err", err)
		return
	}
	b.met.deadLetter()
	b.log.Info("message dead-lettered", "id", m.ID, "topic", m.Topic, "client", m.To, "attempts", m.Attempts, "reason", reason)
}
