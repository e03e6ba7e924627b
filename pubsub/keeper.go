package pubsub

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"golang.org/x/time/rate"

	"github.com/meshagent/meshagent/protocol"
)

// Bounds of a history keeper.
const (
	// MaxKeptFamilies bounds the families a keeper of "*" keeps.
	MaxKeptFamilies = 256
	// keepQueue and keepWriters: messages wait in the queue for writers
	// of their own, so that a store's group commit serves many at once;
	// a full queue drops the newest (counted by KeepDropped).
	keepQueue   = 4096
	keepWriters = 16
	// queriesPerSecond and queryBurst bound each peer's history queries.
	queriesPerSecond = 50
	queryBurst       = 100
	// storeIdle closes a store stream that sends no query for this long;
	// storeIO bounds the write of a page.
	storeIdle = 30 * time.Second
	storeIO   = 10 * time.Second
	// maxQueryPeers bounds the rate limiters a keeper remembers; past it
	// they start afresh.
	maxQueryPeers = 4096
)

// storeNamespace is the directory namespace under which keepers of a
// family advertise themselves.
func storeNamespace(fam string) string { return "meshagent-store:" + fam }

// keeper keeps topic messages in the archive and serves them over the
// store protocol.
type keeper struct {
	b       *Topics
	archive Archive
	queue   chan KeptMessage
	dropped atomic.Uint64

	mu       sync.Mutex
	families map[string]bool // kept families
	limiters map[peer.ID]*rate.Limiter
	streams  map[network.Stream]struct{}
	learned  chan string
}

// startKeeper subscribes the keeper to its patterns and serves queries.
func (tp *Topics) startKeeper() error {
	k := &keeper{b: tp, archive: tp.cfg.archive, queue: make(chan KeptMessage, keepQueue),
		families: map[string]bool{}, limiters: map[peer.ID]*rate.Limiter{}, streams: map[network.Stream]struct{}{},
		learned: make(chan string, 256)}
	tp.keeper = k
	for range keepWriters {
		tp.wg.Go(k.write)
	}
	for _, p := range tp.cfg.keep {
		if p == "*" {
			fn := func(topic string) {
				if fam, ok := strings.CutPrefix(topic, GossipPrefix); ok {
					select {
					case k.learned <- fam:
					default: // the peer's later messages keep announcing nothing; a full queue only delays
					}
				}
			}
			tp.mesh.subscribed.Store(&fn)
			tp.wg.Go(k.learn)
			continue
		}
		fam := Family(p)
		if fam == "" || hasWild(fam) || !validPattern(p) {
			return fmt.Errorf("%w: cannot keep %q (the family, before the first ':' or '.', must be literal)", ErrPattern, p)
		}
		if _, err := tp.subscribe(fam, p, true, k.keep); err != nil {
			return err
		}
		k.advertise(fam)
	}
	tp.h.SetStreamHandler(protocol.StoreProtocol, k.serve)
	return nil
}

// learn keeps each family a peer subscribes to.
func (k *keeper) learn() {
	for {
		select {
		case <-k.b.ctx.Done():
			return
		case fam := <-k.learned:
			k.keepFamily(fam)
		}
	}
}

func (k *keeper) keepFamily(fam string) {
	if fam == "" || fam == protocol.PresenceFamily || hasWild(fam) {
		return
	}
	k.mu.Lock()
	if k.families[fam] || len(k.families) >= MaxKeptFamilies {
		k.mu.Unlock()
		return
	}
	k.families[fam] = true
	k.mu.Unlock()
	if _, err := k.b.subscribe(fam, "", true, k.keep); err != nil {
		return // closing
	}
	k.advertise(fam)
}

// advertise announces the keeper of fam in the directory, again whenever
// the directory asks, until Close.
func (k *keeper) advertise(fam string) {
	k.mu.Lock()
	k.families[fam] = true
	k.mu.Unlock()
	disc := k.b.cfg.disc
	if disc == nil || !k.b.track(1) {
		return
	}
	go func() {
		defer k.b.wg.Done()
		for {
			ttl, err := disc.Advertise(k.b.ctx, storeNamespace(fam))
			if err != nil || ttl <= 0 {
				ttl = time.Minute
			}
			select {
			case <-k.b.ctx.Done():
				return
			case <-time.After(ttl / 2):
			}
		}
	}()
}

// keep queues a received message for the writers.
func (k *keeper) keep(m Message) {
	if len(m.data) == 0 {
		return
	}
	km := KeptMessage{Family: Family(m.Topic), Topic: m.Topic, Key: messageKey(m.Envelope.ID, m.From), Data: m.data}
	if ts, err := m.Envelope.Time(); err == nil {
		km.Time = ts
	}
	select {
	case k.queue <- km:
	default:
		k.dropped.Add(1)
	}
}

func (k *keeper) write() {
	for {
		select {
		case <-k.b.ctx.Done():
			return
		case m := <-k.queue:
			_ = k.archive.Keep(context.WithoutCancel(k.b.ctx), m)
		}
	}
}

// messageKey identifies a topic message: its envelope id and author
// (receivers drop an (author, id) pair they have seen).
func messageKey(id string, author peer.ID) string { return id + " " + author.String() }

// KeepDropped returns how many received messages a history keeper did not
// keep because its write queue was full.
func (tp *Topics) KeepDropped() uint64 {
	if tp.keeper == nil {
		return 0
	}
	return tp.keeper.dropped.Load()
}

// allow takes a token of p's query budget.
func (k *keeper) allow(p peer.ID) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	l := k.limiters[p]
	if l == nil {
		if len(k.limiters) >= maxQueryPeers {
			k.limiters = map[peer.ID]*rate.Limiter{}
		}
		l = rate.NewLimiter(queriesPerSecond, queryBurst)
		k.limiters[p] = l
	}
	return l.Allow()
}

// serve answers the queries of one store stream, one page each, until the
// peer closes it, sends an invalid query, or stays idle.
func (k *keeper) serve(s network.Stream) {
	k.mu.Lock()
	if k.streams == nil || !k.b.track(1) {
		k.mu.Unlock()
		_ = s.Reset()
		return
	}
	k.streams[s] = struct{}{}
	k.mu.Unlock()
	defer func() {
		k.mu.Lock()
		delete(k.streams, s)
		k.mu.Unlock()
		_ = s.Close()
		k.b.wg.Done()
	}()
	fr := protocol.NewFrameReader(s, MaxQueryBytes)
	for {
		_ = s.SetReadDeadline(time.Now().Add(storeIdle))
		raw, err := fr.Next()
		if err != nil {
			return
		}
		var hdr pageHeader
		var msgs []KeptMessage
		q, err := ParseHistoryQuery(raw)
		switch {
		case !k.allow(s.Conn().RemotePeer()):
			hdr.Error = &pageError{Code: codeRateLimited, Message: fmt.Sprintf("more than %d history queries a second", queriesPerSecond)}
		case err != nil:
			hdr.Error = &pageError{Code: codeInvalidQuery, Message: err.Error()}
		default:
			page, err := k.b.localPage(k.b.ctx, q)
			if err != nil {
				hdr.Error = &pageError{Code: codeInternal, Message: "the keeper could not read its history"}
				break
			}
			hdr.Count, hdr.Next, msgs = len(page.Messages), page.Next, page.Messages
		}
		if err := writePage(s, hdr, msgs); err != nil || hdr.Error != nil && hdr.Error.Code == codeInvalidQuery {
			return
		}
	}
}

func writePage(s network.Stream, hdr pageHeader, msgs []KeptMessage) error {
	head, err := json.Marshal(hdr)
	if err != nil {
		return err
	}
	n := len(head) + 10
	for _, m := range msgs {
		n += len(m.Data) + 10
	}
	buf := protocol.AppendFrame(make([]byte, 0, n), head)
	for _, m := range msgs {
		buf = protocol.AppendFrame(buf, m.Data)
	}
	_ = s.SetWriteDeadline(time.Now().Add(storeIO))
	_, err = s.Write(buf)
	return err
}

// localPage reads a page of this keeper's archive for q.
func (tp *Topics) localPage(ctx context.Context, q HistoryQuery) (ArchivePage, error) {
	limit := q.Limit
	if limit == 0 {
		limit = DefaultPageSize
	}
	pattern := q.Pattern
	return tp.cfg.archive.Page(ctx, ArchiveQuery{
		Family: Family(pattern), Since: q.Since, Until: q.Until, After: q.Cursor,
		Limit: limit, MaxBytes: MaxPageBytes,
		Match: func(topic string) bool { return Match(pattern, topic) },
	})
}

// close stops serving queries and resets the streams being served.
func (k *keeper) close() {
	k.b.h.RemoveStreamHandler(protocol.StoreProtocol)
	k.b.mesh.subscribed.Store(nil)
	k.mu.Lock()
	streams := k.streams
	k.streams = nil
	k.mu.Unlock()
	for s := range streams {
		_ = s.Reset()
	}
}
