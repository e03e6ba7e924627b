package pubsub

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/event"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshagent/meshagent/protocol"
)

// Bounds of a history fetch.
const (
	// MaxFetch bounds the messages one FetchHistory returns; a fetch that
	// reaches it says so (FetchStats.Truncated) and a later fetch goes on
	// from the last message's time.
	MaxFetch = 100_000
	// maxFetchKeepers bounds the keepers one fetch asks.
	maxFetchKeepers = 3
	// maxHeaderBytes bounds a page header frame.
	maxHeaderBytes = 8192
	// maxKeeperMessages and maxKeeperBytes bound what one fetch reads
	// from one keeper, refused messages included; maxKeeperRejected is
	// how many messages that do not verify a keeper may send before the
	// fetch gives up on it. A page is read a message at a time, each
	// verified as it arrives, and bounded to MaxPageBytes (and one
	// message past it).
	maxKeeperMessages = MaxFetch + MaxPageSize
	maxKeeperBytes    = 256 << 20
	maxKeeperRejected = 16
	// keeperShare is the share of what is left of a fetch's window (its
	// ctx's deadline, once the keepers are found) that one keeper may
	// take: a keeper still sending then, however valid what it sends, is
	// given up (its verified messages are kept), so that one slow keeper
	// never holds a fetch, or a durable resume (rpc.DurableCatchUpTimeout,
	// one minute: 30 s per keeper), past half its window while the others
	// are read. maxKeeperTime bounds a keeper of a fetch whose ctx has no
	// deadline.
	keeperShare   = 2 // one keeper: at most 1/keeperShare of the window
	maxKeeperTime = 30 * time.Second
)

// keeperDeadline is when a keeper of a fetch within ctx is given up, the
// keepers being asked from now on: a share of what is left of ctx's
// window (keeperShare), at most maxKeeperTime.
func keeperDeadline(ctx context.Context, now time.Time) time.Time {
	d := maxKeeperTime
	if dl, ok := ctx.Deadline(); ok {
		d = min(d, dl.Sub(now)/keeperShare)
	}
	return now.Add(d)
}

// FetchStats says how a history fetch went.
type FetchStats struct {
	// Keepers is how many keepers answered (this node's own archive
	// counts as one).
	Keepers int
	// Fetched is how many messages the keepers sent, before
	// deduplication; Rejected how many of them failed verification.
	Fetched, Rejected int
	// Truncated is set when the fetch stopped at MaxFetch.
	Truncated bool
}

// FetchHistory fetches from history keepers the messages whose topic
// matches pattern with an envelope time at or after since, verifies each
// as the topic validator would (signature, author, type, family; not the
// replay window), applies broadcast filters as a subscription does, and
// returns them once each (by author and id), ordered by envelope time,
// then id, then author. It asks up to three keepers: connected peers that
// speak protocol.StoreProtocol, keepers found in the directory, and this
// node's own archive, waiting up to WithFetchWait for a remote one, and
// reads them at once. Each keeper has its own deadline, half of what is
// left of ctx's window once the keepers are found (at most 30 s): a keeper
// still sending then is given up, what it sent and verified kept, and the
// fetch returns with what the others sent. It fails with an error
// wrapping ErrNoKeepers when none answered.
func (tp *Topics) FetchHistory(ctx context.Context, pattern string, since time.Time) ([]Message, FetchStats, error) {
	var st FetchStats
	q := HistoryQuery{Pattern: pattern, Since: since, Limit: MaxPageSize}
	if err := q.check(); err != nil {
		return nil, st, err
	}
	fam := Family(pattern)
	keepers := tp.findKeepers(ctx, fam)
	var (
		mu   sync.Mutex
		got  = map[string]Message{}
		errs []error
	)
	add := func(data [][]byte) (rejected int, more bool) {
		mu.Lock()
		defer mu.Unlock()
		for _, d := range data {
			st.Fetched++
			m, ok := tp.verifyKept(fam, pattern, since, d)
			if !ok {
				st.Rejected++
				rejected++
				continue
			}
			if !tp.admit(m.Envelope) {
				continue
			}
			got[messageKey(m.Envelope.ID, m.From)] = m
		}
		if len(got) >= MaxFetch {
			st.Truncated = true
			return rejected, false
		}
		return rejected, true
	}
	var wg sync.WaitGroup
	deadline := keeperDeadline(ctx, time.Now())
	for _, p := range keepers {
		wg.Go(func() {
			kctx, cancel := context.WithDeadline(ctx, deadline)
			defer cancel()
			err := tp.fetchFrom(kctx, p, q, add)
			if err != nil && ctx.Err() == nil && kctx.Err() != nil {
				err = fmt.Errorf("given up at its deadline, %s, a share of the fetch's (%w)", deadline.Format(time.RFC3339Nano), err)
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", p, err))
				return
			}
			st.Keepers++
		})
	}
	if tp.cfg.archive != nil {
		wg.Go(func() {
			err := tp.fetchLocal(ctx, q, add)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("own archive: %w", err))
				return
			}
			st.Keepers++
		})
	}
	wg.Wait()
	if st.Keepers == 0 {
		return nil, st, fmt.Errorf("%w for %q: %w", ErrNoKeepers, pattern, errors.Join(errs...))
	}
	out := make([]Message, 0, len(got))
	for _, m := range got {
		out = append(out, m)
	}
	slices.SortFunc(out, compareMessages)
	return out, st, nil
}

// compareMessages orders messages by envelope time, then id, then author.
func compareMessages(a, b Message) int {
	ta, _ := a.Envelope.Time()
	tb, _ := b.Envelope.Time()
	if c := ta.Compare(tb); c != 0 {
		return c
	}
	return cmp.Or(cmp.Compare(a.Envelope.ID, b.Envelope.ID), cmp.Compare(a.From, b.From))
}

// verifyKept checks one kept message sent by a keeper.
func (tp *Topics) verifyKept(fam, pattern string, since time.Time, data []byte) (Message, bool) {
	e, author, ts, why := tp.open(fam, data)
	if why != "" || !Match(pattern, e.To.Topic) || ts.Before(since) {
		return Message{}, false
	}
	return Message{Topic: e.To.Topic, From: author, Envelope: e, Payload: e.Payload, ReceivedAt: time.Now(), data: data}, true
}

// fetchFrom reads every page of q from keeper p, passing each message to
// add as it arrives until add says no more. It gives up on the keeper,
// with an error, past maxKeeperRejected messages that do not verify, a
// page past MaxPageBytes, or maxKeeperMessages or maxKeeperBytes in all.
func (tp *Topics) fetchFrom(ctx context.Context, p peer.ID, q HistoryQuery, add func([][]byte) (int, bool)) error {
	s, err := tp.h.NewStream(ctx, p, protocol.StoreProtocol)
	if err != nil {
		return err
	}
	defer func() { _ = s.Close() }()
	stop := context.AfterFunc(ctx, func() { _ = s.Reset() })
	defer stop()
	fr := protocol.NewFrameReader(s, max(maxHeaderBytes, tp.cfg.maxSize))
	read, readBytes, rejected := 0, 0, 0
	for {
		raw, err := json.Marshal(q)
		if err != nil {
			return err
		}
		_ = s.SetDeadline(time.Now().Add(storeIO))
		if _, err := s.Write(protocol.AppendFrame(nil, raw)); err != nil {
			return err
		}
		head, err := fr.Next()
		if err != nil {
			return err
		}
		var hdr pageHeader
		if err := json.Unmarshal(head, &hdr); err != nil || hdr.Count < 0 || hdr.Count > MaxPageSize {
			return fmt.Errorf("a page header that is not one: %q", truncateBytes(head, 100))
		}
		if hdr.Error != nil {
			err := &queryError{Code: hdr.Error.Code, Message: hdr.Error.Message}
			if hdr.Error.Code == codeInvalidQuery {
				return fmt.Errorf("%w: %w", ErrInvalidQuery, err)
			}
			return err
		}
		pageBytes := 0
		for range hdr.Count {
			d, err := fr.Next()
			if err != nil {
				return err
			}
			if pageBytes > MaxPageBytes {
				return fmt.Errorf("a page past %d bytes", MaxPageBytes)
			}
			pageBytes += len(d)
			if read++; read > maxKeeperMessages {
				return fmt.Errorf("more than %d messages", maxKeeperMessages)
			}
			if readBytes += len(d); readBytes > maxKeeperBytes {
				return fmt.Errorf("more than %d bytes", maxKeeperBytes)
			}
			rej, more := add([][]byte{append([]byte(nil), d...)})
			if rejected += rej; rejected > maxKeeperRejected {
				return fmt.Errorf("%d messages that do not verify: giving up on this keeper", rejected)
			}
			if !more {
				return nil
			}
		}
		if hdr.Next == "" {
			return nil
		}
		if hdr.Next == q.Cursor {
			return errors.New("the keeper's cursor does not move")
		}
		q.Cursor = hdr.Next
	}
}

// fetchLocal reads every page of q from this node's own archive.
func (tp *Topics) fetchLocal(ctx context.Context, q HistoryQuery, add func([][]byte) (int, bool)) error {
	for {
		page, err := tp.localPage(ctx, q)
		if err != nil {
			return err
		}
		data := make([][]byte, len(page.Messages))
		for i, m := range page.Messages {
			data[i] = m.Data
		}
		if _, more := add(data); !more || page.Next == "" {
			return nil
		}
		q.Cursor = page.Next
	}
}

func truncateBytes(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}

// keepersNow returns the connected peers that speak the store protocol.
func (tp *Topics) keepersNow() []peer.ID {
	var out []peer.ID
	for _, p := range tp.h.Network().Peers() {
		if tp.h.Network().Connectedness(p) != network.Connected {
			continue
		}
		if ps, err := tp.h.Peerstore().SupportsProtocols(p, protocol.StoreProtocol); err == nil && len(ps) > 0 {
			out = append(out, p)
		}
	}
	return out
}

// findKeepers returns up to maxFetchKeepers remote keepers of fam: those
// connected, else those the directory names (connected to), else the
// first to appear within the fetch wait. It returns none when there is
// none (the caller may still have its own archive).
func (tp *Topics) findKeepers(ctx context.Context, fam string) []peer.ID {
	cap3 := func(ps []peer.ID) []peer.ID { return ps[:min(len(ps), maxFetchKeepers)] }
	if ps := tp.keepersNow(); len(ps) > 0 {
		return cap3(ps)
	}
	ctx, cancel := context.WithTimeout(ctx, tp.cfg.fetchWait)
	defer cancel()
	sub, err := tp.h.EventBus().Subscribe([]any{new(event.EvtPeerIdentificationCompleted), new(event.EvtPeerProtocolsUpdated)})
	if err != nil {
		return nil
	}
	defer func() { _ = sub.Close() }()
	if tp.cfg.disc != nil {
		if found, err := tp.cfg.disc.FindPeers(ctx, storeNamespace(fam)); err == nil {
			var wg sync.WaitGroup
			for ai := range found {
				if ai.ID != tp.h.ID() {
					wg.Go(func() { _ = tp.h.Connect(ctx, ai) })
				}
			}
			wg.Wait()
		}
	}
	for {
		if ps := tp.keepersNow(); len(ps) > 0 {
			return cap3(ps)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tp.ctx.Done():
			return nil
		case <-sub.Out():
		}
	}
}
