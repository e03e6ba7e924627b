package pubsub

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	libp2ppubsub "github.com/libp2p/go-libp2p-pubsub"
)

// Subscription delivers messages matching a pattern to a handler.
type Subscription struct {
	b       *Topics
	fam     string
	pattern string
	// keeper marks a history keeper's subscription: it takes every topic
	// of its family when pattern is empty, and is not a receiver Publish
	// counts (it keeps messages for others; it reads none).
	keeper bool
	// own marks the subscription of a publisher that recognises the
	// messages it publishes WithID by their id and drops them (the bus,
	// which delivers its own messages itself): Publish WithID does not
	// count it as a receiver, since its copy reaches nobody.
	own     bool
	handler func(Message)
	queue   *msgQueue
	done    chan struct{}
	once    sync.Once
	dropped atomic.Uint64
}

// queueKeep is the capacity a subscription's queue keeps once drained:
// a burst's larger buffer is released, so an idle subscription holds
// this much, not the bound.
const queueKeep = 8

// msgQueue is a subscription's queue: at most max messages, its buffer
// grown on demand and released when it drains (beyond queueKeep), so an
// idle subscription costs a few hundred bytes rather than max messages'
// worth (a buffered channel of 256 Messages is 28 KiB from the start).
type msgQueue struct {
	max  int
	wake chan struct{} // one token: the queue may be non-empty

	mu   sync.Mutex
	buf  []Message
	head int
}

func newMsgQueue(max int) *msgQueue {
	return &msgQueue{max: max, wake: make(chan struct{}, 1)}
}

// push appends m and reports false, keeping nothing, when max messages
// wait already.
func (q *msgQueue) push(m Message) bool {
	q.mu.Lock()
	if len(q.buf)-q.head >= q.max {
		q.mu.Unlock()
		return false
	}
	q.buf = append(q.buf, m)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
	return true
}

// pop returns the oldest message, or false when the queue is empty; the
// emptied queue keeps a buffer of at most queueKeep.
func (q *msgQueue) pop() (Message, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.head == len(q.buf) {
		return Message{}, false
	}
	m := q.buf[q.head]
	q.buf[q.head] = Message{} // the slot no longer holds the message
	q.head++
	if q.head == len(q.buf) {
		if cap(q.buf) > queueKeep {
			q.buf = nil
		} else {
			q.buf = q.buf[:0]
		}
		q.head = 0
	}
	return m, true
}

// len returns how many messages wait.
func (q *msgQueue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.buf) - q.head
}

// matches reports whether the subscription takes a message on topic.
func (s *Subscription) matches(topic string) bool {
	return s.keeper && s.pattern == "" || Match(s.pattern, topic)
}

// Dropped returns how many messages were dropped because the queue was full.
func (s *Subscription) Dropped() uint64 { return s.dropped.Load() }

func (s *Subscription) stop() { s.once.Do(func() { close(s.done) }) }

// Cancel stops the subscription. A handler call already in progress
// finishes; no new call starts.
func (s *Subscription) Cancel() {
	b := s.b
	b.mu.Lock()
	if f := b.families[s.fam]; f != nil {
		delete(f.subs, s)
	}
	b.mu.Unlock()
	s.stop()
}

// Subscribe calls handler, in order, for each message whose topic matches
// pattern and whose filter admits this node.
func (tp *Topics) Subscribe(pattern string, handler func(Message)) (*Subscription, error) {
	fam := Family(pattern)
	if fam == "" || hasWild(fam) || !validPattern(pattern) {
		return nil, fmt.Errorf("%w: %q (the family, before the first ':' or '.', must be literal)", ErrPattern, pattern)
	}
	return tp.subscribe(fam, pattern, false, handler)
}

// SubscribeOwn is Subscribe for a publisher that publishes WithID and
// drops the messages it recognises as its own when they come back: a
// Publish WithID does not count the subscription as a receiver, so a
// message that reached only it fails with ErrNoPeers instead of being
// reported as delivered. A Publish without an id counts it.
func (tp *Topics) SubscribeOwn(pattern string, handler func(Message)) (*Subscription, error) {
	fam := Family(pattern)
	if fam == "" || hasWild(fam) || !validPattern(pattern) {
		return nil, fmt.Errorf("%w: %q (the family, before the first ':' or '.', must be literal)", ErrPattern, pattern)
	}
	return tp.subscribeAs(fam, pattern, false, true, handler)
}

// subscribe adds a subscription to family fam.
func (tp *Topics) subscribe(fam, pattern string, keeper bool, handler func(Message)) (*Subscription, error) {
	return tp.subscribeAs(fam, pattern, keeper, false, handler)
}

// subscribeAs is subscribe, own as SubscribeOwn's.
func (tp *Topics) subscribeAs(fam, pattern string, keeper, own bool, handler func(Message)) (*Subscription, error) {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	f, err := tp.join(fam)
	if err != nil {
		return nil, err
	}
	if f.sub == nil {
		sub, err := f.topic.Subscribe(libp2ppubsub.WithMessageFilter(tp.floodSwitch))
		if err != nil {
			return nil, fmt.Errorf("pubsub: subscribe %s: %w", GossipPrefix+fam, err)
		}
		f.sub = sub
		tp.wg.Add(1)
		go tp.read(f, sub)
	}
	s := &Subscription{b: tp, fam: fam, pattern: pattern, keeper: keeper, own: own, handler: handler, queue: newMsgQueue(tp.cfg.queue), done: make(chan struct{})}
	f.subs[s] = struct{}{}
	close(tp.added)
	tp.added = make(chan struct{})
	tp.wg.Add(1)
	go s.run(&tp.wg)
	return s, nil
}

func (s *Subscription) run(wg *sync.WaitGroup) {
	defer wg.Done()
	for {
		select {
		case <-s.done:
			return
		case <-s.queue.wake:
		}
		for {
			select {
			case <-s.done:
				return
			default:
			}
			m, ok := s.queue.pop()
			if !ok {
				break
			}
			s.handler(m)
		}
	}
}

func (tp *Topics) read(f *family, sub *libp2ppubsub.Subscription) {
	defer tp.wg.Done()
	for {
		m, err := sub.Next(tp.ctx)
		if err != nil {
			return
		}
		e, ok := envelopeOf(m.ValidatorData)
		if !ok {
			continue
		}
		// A keeper keeps what filters keep from this node's own
		// subscribers: the filter is for the receivers who fetch it.
		admitted := tp.admit(e)
		from, _ := e.Sender()
		msg := Message{Topic: e.To.Topic, From: from, Envelope: e, Payload: e.Payload, ReceivedAt: time.Now(), data: m.GetData()}
		tp.mu.Lock()
		for s := range f.subs {
			if !s.matches(msg.Topic) || !admitted && !s.keeper {
				continue
			}
			if s.queue.push(msg) {
				if !s.keeper { // a history keeper's own subscription is no subscriber
					tp.met.deliver(s.fam, true)
				}
			} else {
				s.dropped.Add(1)
				tp.met.deliver(s.fam, false)
			}
		}
		tp.mu.Unlock()
	}
}
