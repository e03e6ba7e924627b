package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/meshagent/meshagent/internal/meshtest"
	"github.com/meshagent/meshagent/internal/p2ptest"
	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/mailbox"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/sign"
	"github.com/meshagent/meshagent/store"
)

// hostileMailbox starts a relay that answers every mailbox request "ok",
// and every fetch with no item, "more" and a fresh cursor (or, when
// repeat is set, the cursor it was given). It counts the fetches.
func hostileMailbox(t *testing.T, repeat bool) (host.Host, ma.Multiaddr, *atomic.Int64) {
	t.Helper()
	h := p2ptest.Host(t)
	var fetches atomic.Int64
	h.SetStreamHandler(protocol.MailboxProtocol, func(s network.Stream) {
		defer s.Close()
		frame, err := protocol.NewFrameReader(s, 1<<20).Next()
		if err != nil {
			_ = s.Reset()
			return
		}
		req, err := mailbox.ParseRequest(frame)
		resp := mailbox.Response{Status: mailbox.StatusOK}
		if err == nil && req.Op == mailbox.OpFetch {
			n := fetches.Add(1)
			resp.More, resp.Next = true, strconv.FormatInt(n, 10)
			if repeat {
				resp.Next = req.After
			}
		}
		body, _ := json.Marshal(resp)
		_, _ = s.Write(protocol.AppendFrame(nil, body))
	})
	addr, err := peer.AddrInfoToP2pAddrs(&peer.AddrInfo{ID: h.ID(), Addrs: h.Addrs()})
	if err != nil {
		t.Fatal(err)
	}
	return h, addr[0], &fetches
}

// TestMailboxHostileMoreForever: the agent's first mailbox answers every
// fetch "more" with no item and a fresh cursor (or the same cursor); an
// item waiting at its second mailbox is still taken, and the hostile
// mailbox gets a bounded number of fetches. Before rounds were bounded,
// the agent fetched from the first mailbox forever and never read the
// second.
func TestMailboxHostileMoreForever(t *testing.T) {
	for _, repeat := range []bool{false, true} {
		t.Run(fmt.Sprint("repeat=", repeat), func(t *testing.T) {
			_, hostileAddr, fetches := hostileMailbox(t, repeat)
			r, rst := mailboxRelay(t)
			b := meshtest.ID(t, mbAgent)
			depositMessage(t, rst, b, "waiting")

			var log inboxLog
			meshtest.Node(t, mbAgent, node.WithMailboxes(hostileAddr, r.Addrs()[0]), node.WithMessageHandler(log.handler))
			wait.For(t, 30*time.Second, func() error {
				if ids := fmt.Sprint(log.messageIDs()); ids != "[waiting]" {
					return fmt.Errorf("got %s, want the item of the second mailbox", ids)
				}
				return nil
			})
			// A page announcing more with no item ends that mailbox's
			// round: a few fetches, not thousands.
			if n := fetches.Load(); n > 10 {
				t.Fatalf("the hostile mailbox got %d fetches", n)
			}
		})
	}
}

// depositMessage puts a direct message for agent to, signed by the
// sender's key, straight into a relay's mailbox store.
func depositMessage(t *testing.T, rst *store.Store, to peer.ID, id string) {
	t.Helper()
	signer, err := sign.NewSigner(meshtest.Key(t, mbSender))
	if err != nil {
		t.Fatal(err)
	}
	params, _ := json.Marshal(protocol.AgentMessage{MessageID: id, Subject: "waiting"})
	doc := sealRequest(t, signer, to, &protocol.Request{Action: protocol.MessageCapability, CorrelationID: id, Params: params})
	now := time.Now()
	m := store.Message{ID: fmt.Sprintf("%s/%s/%s", to, signer.ID(), id), Queue: mailbox.Queue, Topic: "agent:" + to.String(),
		From: signer.ID().String(), To: to.String(), Payload: doc, NextAttempt: now.Add(time.Hour), Expires: now.Add(time.Hour)}
	if err := rst.EnqueueWithin(context.Background(), m, store.Bounds{}); err != nil {
		t.Fatal(err)
	}
}
