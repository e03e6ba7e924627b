package bus

import (
	"context"

	"github.com/meshagent/meshagent/store"
)

// History is written by writers of its own, so that no sendMessage waits
// for an fsync. Each writer takes what has queued up while it was writing,
// up to historyBatch messages, and records it in one transaction; with a
// few writers, one gathers the next batch while another's is fsync'd (and
// their batches share a store group commit), so a wake-up and a commit
// serve many messages instead of one each.
const (
	historyQueue   = 4096
	historyWriters = 4
	historyBatch   = 256
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
		b.recordNow(context.Background(), []store.Message{msg})
	}
}

func (b *Bus) historyLoop() {
	batch := make([]store.Message, 0, historyBatch)
	for {
		select {
		case m := <-b.historyQ:
			// Not b.ctx: a record taken before Close began is still
			// written, like those left in the queue.
			batch = b.drainHistory(append(batch, m))
			b.recordNow(context.Background(), batch)
			clear(batch) // let the payloads go
			batch = batch[:0]
		case <-b.ctx.Done():
			for { // what was queued before Close is still written
				batch = b.drainHistory(batch)
				if len(batch) == 0 {
					return
				}
				b.recordNow(context.Background(), batch)
				clear(batch)
				batch = batch[:0]
			}
		}
	}
}

// drainHistory appends to batch what is queued, without waiting, until
// it holds historyBatch messages.
func (b *Bus) drainHistory(batch []store.Message) []store.Message {
	for len(batch) < historyBatch {
		select {
		case m := <-b.historyQ:
			batch = append(batch, m)
		default:
			return batch
		}
	}
	return batch
}

func (b *Bus) recordNow(ctx context.Context, ms []store.Message) {
	if err := b.store.RecordAll(ctx, ms); err != nil {
		b.log.Warn("history not recorded", "messages", len(ms), "err", err)
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
