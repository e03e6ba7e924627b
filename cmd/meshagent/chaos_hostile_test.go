//go:build chaos && unix

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/meshagent/meshagent/internal/p2ptest"
	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/mailbox"
	"github.com/meshagent/meshagent/protocol"
)

// hostilePeer is a peer that an agent names as its mailbox and that
// speaks the history keepers' store protocol, answering both to hold
// whoever asks: every mailbox fetch with no item, "more" and a fresh
// cursor (a deposit is refused, so that senders hand their mail to the
// agent's honest mailbox); every history query of a fetch, in turn (odd
// and even fetches), with a page of one message that does not verify and
// a fresh cursor, or with a page announcing 1,000 messages sent as 1 MiB
// frames.
type hostilePeer struct {
	h                                       host.Host
	addr                                    ma.Multiaddr
	fetches, streams, queries, bytesWritten atomic.Int64
}

func startHostilePeer(t *testing.T) *hostilePeer {
	t.Helper()
	hp := &hostilePeer{h: p2ptest.Host(t)}
	hp.h.SetStreamHandler(protocol.MailboxProtocol, func(s network.Stream) {
		defer s.Close()
		frame, err := protocol.NewFrameReader(s, 1<<20).Next()
		if err != nil {
			_ = s.Reset()
			return
		}
		req, err := mailbox.ParseRequest(frame)
		resp := mailbox.Response{Status: mailbox.StatusOK}
		switch {
		case err == nil && req.Op == mailbox.OpFetch:
			n := hp.fetches.Add(1)
			resp.More, resp.Next = true, strconv.FormatInt(n, 10)
		case err == nil && req.Op == mailbox.OpDeposit:
			resp.Status = mailbox.StatusRefused
		}
		body, _ := json.Marshal(resp)
		_, _ = s.Write(protocol.AppendFrame(nil, body))
	})
	garbage := []byte(strings.Repeat("x", 64))
	huge := []byte(strings.Repeat("x", 1<<20))
	hp.h.SetStreamHandler(protocol.StoreProtocol, func(s network.Stream) {
		defer s.Close()
		fr := protocol.NewFrameReader(s, 1<<20)
		count, frame := 1, garbage
		if hp.streams.Add(1)%2 == 0 {
			count, frame = 1000, huge
		}
		for {
			if _, err := fr.Next(); err != nil {
				return
			}
			n := hp.queries.Add(1)
			buf := protocol.AppendFrame(nil, fmt.Appendf(nil, `{"count":%d,"next":"c%d"}`, count, n))
			for range count + 1 {
				w, err := s.Write(buf)
				hp.bytesWritten.Add(int64(w))
				if err != nil {
					return
				}
				buf = protocol.AppendFrame(buf[:0], frame)
			}
		}
	})
	addrs, err := peer.AddrInfoToP2pAddrs(&peer.AddrInfo{ID: hp.h.ID(), Addrs: hp.h.Addrs()})
	if err != nil {
		t.Fatal(err)
	}
	hp.addr = addrs[0]
	return hp
}

// connect makes the hostile peer a connected peer of the node at addr
// (its first listen address), so that the node counts it among the
// history keepers it asks.
func (hp *hostilePeer) connect(t *testing.T, addr string) {
	t.Helper()
	ai, err := peer.AddrInfoFromP2pAddr(ma.StringCast(addr))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := hp.h.Connect(ctx, *ai); err != nil {
		t.Fatal(err)
	}
}

// TestChaosHostileMailboxKeeper (issue 23, defects 3 and 5): agent B names
// two mailboxes, an honest relay M (also a history keeper) and a hostile
// peer H that answers every mailbox fetch "more" with no item and every
// history query with garbage or a huge announced page. During the
// attack, a fresh honest deposit (a `send-message` to B while B is away,
// handed to M by the sending node) reaches B once it is back, and B's
// durable subscription resumes, catching up what it missed from M, with
// H among its keepers. Figures: how long each took and what H was asked.
func TestChaosHostileMailboxKeeper(t *testing.T) {
	const scenario = "hostile-mailbox-keeper"
	start := time.Now()
	dir := t.TempDir()
	got := filepath.Join(dir, "received.jsonl")
	caps := filepath.Join(dir, "caps.json")
	writeFile(t, caps, `[{"name": "note", "description": "keeps a note",
		"handler": {"exec": ["sh", "-c", "tee -a '`+got+`'; echo >> '`+got+`'"], "timeout": "10s"}}]`)
	hp := startHostilePeer(t)
	m := startCommand(t, "relay", "mailbox", "--data", filepath.Join(dir, "m"), "--ws", "127.0.0.1:0")
	boot := m.started.Addrs[0]
	s := startNode(t, "sender", "--data", filepath.Join(dir, "s"), "--bootstrap", boot)
	keyB := filepath.Join(dir, "b.key")
	bArgs := []string{"--key", keyB, "--data", filepath.Join(dir, "b"), "--mailbox", boot, "--mailbox", hp.addr.String(),
		"--capabilities", caps, "--bootstrap", boot}
	b := startNode(t, "b", bArgs...)
	idB := b.started.AgentID
	hp.connect(t, b.started.Addrs[0])

	// B's durable subscription reads live, then stops; what is published
	// next it catches up later, from the keepers.
	run1 := startDurable(t, b.started.API, "reader", 0)
	publishSeen(t, s.started.API, run1, 0, 3)
	run1.kill(t)
	publishNews(t, s.started.API, 3, 10)
	kept := keptCount(t, boot)
	wait.For(t, 30*time.Second, func() error {
		k, err := kept()
		if err == nil && k < 10 {
			err = fmt.Errorf("the keeper has %d of 10", k)
		}
		return err
	})

	// B goes away; a fresh deposit for it is handed to M.
	wait.For(t, 30*time.Second, func() error {
		if !s.logged("msg=hello", "remote_peer="+idB) {
			return errors.New("S has no hello from B")
		}
		return nil
	})
	b.signal(t, syscall.SIGKILL)
	<-b.exited
	depositStart := time.Now()
	wait.For(t, 30*time.Second, func() error {
		res := meshagent(t, "send-message", "--bus", "ws://"+s.started.API+"/", "--topic", "agent:"+idB,
			"--payload", `{"type":"note","text":"while you were out"}`)
		if res.code != 0 || !strings.Contains(res.stdout, `"queued":true`) {
			return fmt.Errorf("send-message exit %d:\nstdout: %s\nstderr: %s", res.code, res.stdout, res.stderr)
		}
		return nil
	})
	wait.For(t, 30*time.Second, func() error {
		if !s.logged("message handed over to a mailbox", "mailbox="+m.started.AgentID) {
			return errors.New("S has not handed the message over to B's honest mailbox")
		}
		return nil
	})
	deposited := time.Since(depositStart)

	// B comes back under attack: the deposit reaches it.
	backStart := time.Now()
	b = startNode(t, "b", bArgs...)
	hp.connect(t, b.started.Addrs[0])
	wait.For(t, 30*time.Second, func() error {
		data, err := os.ReadFile(got)
		if err != nil {
			return err
		}
		if n := strings.Count(string(data), "while you were out"); n != 1 {
			return fmt.Errorf("B has the deposit %d times", n)
		}
		return nil
	})
	taken := time.Since(backStart)
	fetchesAtTake := hp.fetches.Load()

	// The durable resume, with H among the keepers: what B missed, in
	// order, from M.
	queriesBefore := hp.queries.Load()
	resumeStart := time.Now()
	run2 := startDurable(t, b.started.API, "reader", 0)
	caught := run2.until(t, 9)
	resumed := time.Since(resumeStart)
	// The subscription fetches once more 2 s after it went live: H's
	// other attack, the huge page, then.
	wait.For(t, 30*time.Second, func() error {
		if n := hp.streams.Load(); n < 2 {
			return fmt.Errorf("H was asked for history by %d fetches", n)
		}
		return nil
	})
	run2.kill(t)
	for i := 1; i < len(caught); i++ {
		if caught[i] != caught[i-1]+1 {
			t.Fatalf("the resume printed %v: out of order, a message lost or doubled", caught)
		}
	}
	if len(caught) == 0 || caught[0] > 3 {
		t.Fatalf("the resume printed %v, want from 3 (or the one in flight before it)", caught)
	}
	queries := hp.queries.Load() - queriesBefore
	if queries == 0 {
		t.Errorf("H was not asked for history during the resume: the keeper attack did not happen")
	}
	if hp.fetches.Load() == 0 {
		t.Errorf("H was not asked for mail: the mailbox attack did not happen")
	}
	figures(t, scenario, "a fresh deposit handed to the honest mailbox in %s; B back under attack took it in %s (H answered %d fetches \"more\" with no item meanwhile); a durable resume caught up %d messages (%d..%d) in order in %s with H among its keepers (H asked %d times in %d fetches for history, %d MiB written at it); %s in all",
		deposited.Round(time.Millisecond), taken.Round(time.Millisecond), fetchesAtTake, len(caught), caught[0], caught[len(caught)-1],
		resumed.Round(time.Millisecond), queries, hp.streams.Load(), hp.bytesWritten.Load()>>20, time.Since(start).Round(time.Second))
}
