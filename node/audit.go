package node

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"time"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/store"
)

// The audit log (seed 004: "all inter-agent communication logged"): with
// WithAudit, a node records every request it sends to another agent and
// every request it serves, direct messages and their batches included:
// who asked whom, when, the capability, the params' size, the outcome and
// the duration, and the params themselves only when asked to. Records go
// to the node's store as history messages of topic AuditTopic (From the
// requester, To the provider), so they share the history's bounds (7
// days, and its byte bound, oldest first) and its queries (Audit).
//
// Recording stays off the call's path: a record is queued on a channel
// (at most auditQueue; past that it is dropped and counted, never
// waited for) and one writer stores what queued in one transaction at
// most every auditFlush.
const (
	// AuditTopic is the history topic of audit records.
	AuditTopic = "mesh.audit"
	auditQueue = 8192
	auditFlush = 200 * time.Millisecond
	auditBatch = 1024
)

// auditLog queues records for its writer.
type auditLog struct {
	bodies  bool
	ch      chan store.Message
	dropped atomic.Int64
}

// WithAudit makes the node record, in its store (WithStore, required),
// every request it sends to another agent or serves for one (see
// protocol.AuditRecord); with bodies, the params too.
func WithAudit(bodies bool) Option {
	return func(c *Config) error {
		c.Audit = &bodies
		return nil
	}
}

// startAudit starts the audit writer when the configuration asks for one.
func (n *Node) startAudit() {
	if n.cfg.Audit == nil || n.cfg.Store == nil {
		return
	}
	a := &auditLog{bodies: *n.cfg.Audit, ch: make(chan store.Message, auditQueue)}
	if n.goTracked(func() { n.writeAudit(a) }) {
		n.audit = a
	}
}

// auditCall queues one audit record; a full queue drops it.
func (n *Node) auditCall(direction, from, to, capability string, params json.RawMessage, err error, start time.Time) {
	a := n.audit
	if a == nil {
		return
	}
	now := n.cfg.Now()
	r := protocol.AuditRecord{Direction: direction, From: from, To: to, Capability: capability, Size: len(params),
		Outcome: outcome(err), DurationMS: float64(time.Since(start).Microseconds()) / 1000}
	if a.bodies && len(params) > 0 {
		r.Params = params
	}
	payload, merr := json.Marshal(r)
	if merr != nil {
		return
	}
	select {
	case a.ch <- store.Message{ID: protocol.NewID(), Topic: AuditTopic, From: from, To: to, Payload: payload, Time: now}:
	default:
		if a.dropped.Add(1)&1023 == 1 {
			n.log.Warn("audit log queue full: records dropped", "dropped", a.dropped.Load())
		}
	}
}

// writeAudit stores queued records in batches until the node closes,
// then stores what is left.
func (n *Node) writeAudit(a *auditLog) {
	t := time.NewTicker(auditFlush)
	defer t.Stop()
	batch := make([]store.Message, 0, auditBatch)
	flush := func(ctx context.Context) {
		if len(batch) == 0 {
			return
		}
		if err := n.cfg.Store.RecordAll(ctx, batch); err != nil {
			n.log.Warn("audit log write", "records", len(batch), "err", err)
		}
		clear(batch)
		batch = batch[:0]
	}
	for {
		select {
		case m := <-a.ch:
			batch = append(batch, m)
			if len(batch) == auditBatch {
				flush(n.ctx)
			}
		case <-t.C:
			flush(n.ctx)
		case <-n.ctx.Done():
		drain:
			for {
				select {
				case m := <-a.ch:
					batch = append(batch, m)
				default:
					break drain
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			flush(ctx)
			cancel()
			return
		}
	}
}

// Audit returns the audit records matching q, newest first. Records
// reach the store within about auditFlush of their call.
func (n *Node) Audit(ctx context.Context, q protocol.AuditQuery) ([]protocol.AuditEntry, error) {
	if n.cfg.Store == nil || n.cfg.Audit == nil {
		return nil, ErrNoAudit
	}
	ms, err := n.cfg.Store.History(ctx, store.HistoryQuery{Topic: AuditTopic, Agent: q.Agent, Since: q.Since, Until: q.Until, Limit: q.Limit, Before: q.Before})
	if err != nil {
		return nil, err
	}
	out := make([]protocol.AuditEntry, 0, len(ms))
	for _, m := range ms {
		e := protocol.AuditEntry{ID: m.ID, At: m.Time}
		if err := json.Unmarshal(m.Payload, &e.AuditRecord); err != nil {
			continue // not a record this version wrote
		}
		out = append(out, e)
	}
	return out, nil
}
