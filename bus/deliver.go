package bus

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/meshagent/meshagent/rpc"
	"github.com/meshagent/meshagent/store"
)

// attempt is one delivery of a message to one subscription.
type attempt struct {
	sub *subscription
	// via is the queue group sub was picked from: a retry goes to the
	// group again.
	via *queueGroup
	pr  ProcessResult
	err error
}

// failed reports whether the message is to be delivered again.
func (a attempt) failed() bool { return a.err != nil || a.pr.ShouldRetry }

// absent reports whether the subscriber left during the attempt: an
// absence, not a delivery (see Config.MaxAttempts).
func (a attempt) absent() bool {
	return a.err != nil && (a.sub.conn == nil || a.sub.conn.Context().Err() != nil)
}

// to is whom a retry of the attempt is addressed to: its client, or the
// queue group it was picked from.
func (a attempt) to() string {
	if a.via != nil {
		return a.via.address()
	}
	return a.sub.client.id
}

// reason says why a failed attempt is to be retried.
func (a attempt) reason() string {
	if a.err != nil {
		return a.err.Error()
	}
	return "should_retry: " + a.pr.Message
}

// ack is the attempt as sendMessage reports it.
func (a attempt) ack() Ack {
	ack := Ack{ClientID: a.sub.client.id, Processed: a.err == nil && a.pr.Processed, Message: a.pr.Message}
	if a.err != nil {
		ack.Message = a.err.Error()
	}
	return ack
}

// pass is the one delivery pass of the bus, for first attempts and
// retries alike: it delivers msg to subs in order under their propagation
// policies and returns the attempts in that order, and whether a
// subscriber stopped propagation. A run of continueAll subscriptions
// cannot stop propagation, so its deliveries go out at once.
func (b *Bus) pass(ctx context.Context, msg store.Message, subs []*subscription) ([]attempt, bool) {
	atts := make([]attempt, len(subs))
	params := processParams(msg)
	for i := 0; i < len(subs); {
		j := i + 1
		for subs[i].propagation == PropagationContinueAll && j < len(subs) && subs[j].propagation == PropagationContinueAll {
			j++
		}
		if j-i > 1 {
			b.deliverAll(ctx, subs[i:j], atts[i:j], msg, params)
			i = j
			continue
		}
		atts[i] = b.deliver(ctx, subs[i], msg, params)
		if a := atts[i]; a.err == nil && a.sub.propagation.stops(a.pr) {
			return atts[:i+1], true
		}
		i++
	}
	return atts, false
}

// processParams is msg as processMessage's (and a legacy sendMessage's)
// params, encoded once for every subscriber it goes to. Should msg not
// encode, it is the ProcessParams themselves, and each delivery fails
// with the encoding's error as it would have.
func processParams(msg store.Message) any {
	params := ProcessParams{Topic: msg.Topic, Payload: msg.Payload}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // as rpc encodes params: payloads pass through as written
	if err := enc.Encode(params); err != nil {
		return params
	}
	return rpc.Encoded(bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
}

// starter is a connection that can have a request out without a
// goroutine waiting on it (*rpc.Conn is one).
type starter interface {
	TryStart(method string, params any) (*rpc.PendingCall, bool)
}

// deliverAll delivers a message to a run of continueAll subscriptions at
// once and puts each attempt in atts, in order. The requests go out from
// this goroutine, which then collects the answers: a fan-out costs no
// goroutine per subscriber. A delivery that cannot start so (to a queue
// group, or on a connection whose request slots are all taken, where Call
// waits for one) runs as deliver on a goroutine of its own. All share one
// DeliveryTimeout, as they start together.
func (b *Bus) deliverAll(ctx context.Context, subs []*subscription, atts []attempt, msg store.Message, params any) {
	dctx, cancel := context.WithTimeout(ctx, b.cfg.DeliveryTimeout)
	defer cancel()
	type started struct {
		pc     *rpc.PendingCall
		method string
		raw    json.RawMessage // the answer: here, not one allocation each
	}
	pending := make([]started, len(subs))
	// Made only for a delivery that needs a goroutine: the usual fan-out
	// has none, and the closure would move the WaitGroup and msg to the
	// heap on every call.
	var wg *sync.WaitGroup
	for k, s := range subs {
		if st, ok := s.conn.(starter); ok && s.members == nil {
			method := s.client.method()
			if pc, ok := st.TryStart(method, params); ok {
				pending[k] = started{pc: pc, method: method}
				continue
			}
		}
		if wg == nil {
			wg = new(sync.WaitGroup)
		}
		b.deliverTo(ctx, wg, &atts[k], s, msg, params)
	}
	for k := range pending {
		if p := &pending[k]; p.pc != nil {
			err := p.pc.Wait(dctx, &p.raw)
			atts[k] = b.answered(dctx, subs[k], p.method, params, p.raw, err)
		}
	}
	if wg != nil {
		wg.Wait()
	}
}

// deliverTo runs deliver on a goroutine of its own, counted by wg, and
// puts its attempt in att.
func (b *Bus) deliverTo(ctx context.Context, wg *sync.WaitGroup, att *attempt, s *subscription, msg store.Message, params any) {
	wg.Go(func() { *att = b.deliver(ctx, s, msg, params) })
}

// deliver sends one message, whose params processParams has made, to one
// subscription's client: processMessage, or sendMessage for a client
// that does not know processMessage. A queue group's entry delivers to
// one of its members.
func (b *Bus) deliver(ctx context.Context, s *subscription, msg store.Message, params any) attempt {
	if s.members != nil {
		return b.deliverToGroup(ctx, s, msg, params)
	}
	ctx, cancel := context.WithTimeout(ctx, b.cfg.DeliveryTimeout)
	defer cancel()
	method := s.client.method()
	var raw json.RawMessage
	err := s.conn.Call(ctx, method, params, &raw)
	return b.answered(ctx, s, method, params, raw, err)
}

// answered makes the attempt of a delivery by method from its answer,
// raw, or its failure, err. A client that does not know processMessage
// is asked again with sendMessage (within ctx), and from then on always.
func (b *Bus) answered(ctx context.Context, s *subscription, method string, params any, raw json.RawMessage, err error) attempt {
	if method == MethodProcessMessage && err != nil && methodNotFound(err) {
		s.client.mu.Lock()
		s.client.legacy = true
		s.client.mu.Unlock()
		method = MethodSendMessage
		raw, err = b.callLegacy(ctx, s, params)
	}
	var pr ProcessResult
	if err == nil {
		err = decodeProcessResult(method, raw, &pr)
	}
	if err != nil {
		return b.met.acked(attempt{sub: s, err: fmt.Errorf("delivery to %s failed: %w", s.client.id, err)})
	}
	if pr.Success != nil && !pr.Processed {
		pr.Processed = *pr.Success
	}
	return b.met.acked(attempt{sub: s, pr: pr})
}

// methodNotFound reports whether err is a client's method-not-found
// error. Apart from answered, so that its *rpc.Error, which errors.As
// moves to the heap, costs nothing on a delivery that succeeded.
func methodNotFound(err error) bool {
	var re *rpc.Error
	return errors.As(err, &re) && re.Code == rpc.CodeMethodNotFound
}

// callLegacy asks s's client again with sendMessage and returns its
// answer. Apart from answered for the reason methodNotFound is.
func (b *Bus) callLegacy(ctx context.Context, s *subscription, params any) (json.RawMessage, error) {
	var raw json.RawMessage
	err := s.conn.Call(ctx, MethodSendMessage, params, &raw)
	return raw, err
}

// dispatch is a message's first delivery: to a mesh agent for agent:<id>
// topics that no local client holds, to local subscribers in order under
// their policies, to the mesh, and to a default handler when nothing else
// takes it. The failed deliveries are in the outbox before it returns.
// local is false for messages that came from the mesh: they are not
// published back, and never go to a default handler (every node would
// spawn one).
func (b *Bus) dispatch(ctx context.Context, msg store.Message, local bool) (SendResult, error) {
	subs := b.subs.route(msg.Topic)
	// One ack per subscriber, and one from the mesh or a default handler.
	res := SendResult{MessageID: msg.ID, Acks: make([]Ack, 0, len(subs)+1)}
	if local && len(subs) == 0 {
		ack, success, ok, err := b.toMeshAgent(ctx, msg)
		if err != nil {
			return res, err
		}
		if ok {
			res.Acks = append(res.Acks, ack)
			res.Success = success
			b.record(msg)
			return res, nil
		}
	}
	var meshAck <-chan Ack
	if local {
		// With local subscribers the mesh copy goes out in the background
		// (it may wait for topic peers to be found) and is not in the
		// acks; without any, its ack is what routes the message.
		meshAck = b.toMesh(ctx, msg, len(subs) > 0)
	}
	var retries []store.Message
	atts, stopped := b.pass(ctx, msg, subs)
	res.StopPropagation = stopped
	for _, a := range atts {
		res.Acks = append(res.Acks, b.settle(msg, a, a.to(), &retries))
	}
	if meshAck != nil {
		if ack, ok := <-meshAck; ok {
			res.Acks = append(res.Acks, ack)
		}
	}
	res.Success = len(res.Acks) > 0
	if local && len(subs) == 0 && !res.Success {
		if d := b.subs.defaultHandler(msg.Topic); d != nil {
			// The default handler has wired up a subscriber (or will):
			// its retry routes the message afresh.
			atts, _ := b.pass(ctx, msg, []*subscription{d})
			res.Acks = append(res.Acks, b.settle(msg, atts[0], "", &retries))
			res.Success = true
		}
	}
	// Acknowledge only what is on disk: retries are in the outbox before
	// the answer leaves.
	for _, rm := range retries {
		if err := b.store.Enqueue(ctx, rm); err != nil {
			b.gate.fail(b.now(), err)
			return res, fmt.Errorf("persist retry: %w", err)
		}
	}
	if len(retries) > 0 {
		b.wake()
	}
	if local && !res.Success && b.store != nil {
		if err := b.store.DeadLetter(ctx, msg, "no subscriber and no default handler"); err != nil {
			b.gate.fail(b.now(), err)
			return res, fmt.Errorf("persist dead letter: %w", err)
		}
		b.met.deadLetter()
	}
	b.record(msg)
	return res, nil
}

// settle reports a first attempt as its ack, and adds the outbox entry of
// its retry, addressed to client to ("": routed afresh), to retries when
// it failed and the bus has a store.
func (b *Bus) settle(msg store.Message, a attempt, to string, retries *[]store.Message) Ack {
	ack := a.ack()
	if !a.failed() || b.store == nil {
		return ack
	}
	rm := msg
	rm.ID = msg.ID + "." + hex.EncodeToString([]byte(to))
	rm.To = to
	if a.via != nil {
		rm.Metadata = a.via.retryMeta(a.sub.client.id)
	}
	rm.Attempts = 1
	if to != "" && a.absent() {
		rm.Attempts = 0
	}
	rm.Expires = msg.Time.Add(b.cfg.MessageTTL)
	rm.NextAttempt = b.now().Add(b.cfg.backoff(0, a))
	rm.LastError = a.reason()
	*retries = append(*retries, rm)
	b.met.retry()
	ack.Retrying = true
	return ack
}
