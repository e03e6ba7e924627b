//go:build chaos && unix

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/meshagent/meshagent/bus"
	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/rpc"
	"github.com/meshagent/meshagent/sign"
	"github.com/meshagent/meshagent/store"
)

// nodePowerLossKills is how many times TestChaosNodePowerLoss SIGKILLs
// the node, each 100–600 ms after it started, while its outbox writes.
const nodePowerLossKills = 100

// TestChaosNodePowerLoss (issue 23, power loss on a node): a node is
// SIGKILLed 100 times at random points while a bus client sends it
// messages for an agent that is away, each acknowledged as queued only
// once its outbox entry is fsync'd, and while its outbox loop rewrites
// those entries (each attempt's postponement is a commit). After every
// kill the node must start on the same store (startNode fails the test
// otherwise); at the end the store opens and every message acknowledged
// as queued is in the outbox.
func TestChaosNodePowerLoss(t *testing.T) {
	const scenario = "node-power-loss"
	dir := filepath.Join(t.TempDir(), "node")
	key, err := sign.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	signer, err := sign.NewSigner(key)
	if err != nil {
		t.Fatal(err)
	}
	away := signer.ID().String() // an agent nobody runs: always away

	keeper := startCommand(t, "relay", "keeper", "--data", filepath.Join(t.TempDir(), "keeper"), "--ws", "127.0.0.1:0")
	boot := keeper.started.Addrs[0]
	n := startNode(t, "node-0", "--data", dir, "--bootstrap", boot)
	api := n.started.API
	url := "ws://" + api + "/"

	var (
		mu    sync.Mutex
		acked []string
		sent  = 0
	)
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	stop := make(chan struct{})
	producer := &busSession{url: url, id: "producer"}
	wg.Go(func() {
		defer producer.drop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-ctx.Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
			cl, err := producer.client(ctx)
			if err != nil {
				return
			}
			var res bus.SendResult
			cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
			err = cl.Call(cctx, "sendMessage", map[string]any{"topic": "agent:" + away,
				"payload": map[string]any{"type": "note", "n": i}}, &res)
			ccancel()
			mu.Lock()
			sent++
			if err == nil && res.Success && len(res.Acks) == 1 && res.Acks[0].Queued {
				acked = append(acked, res.MessageID)
			}
			mu.Unlock()
			if err != nil {
				producer.drop() // not acknowledged: not sent again
			}
		}
	})

	// The durable subscription: a client of the node answers pl:*
	// messages, and the node saves its position as answers come; a
	// publisher on the keeper publishes one every 20 ms.
	var (
		answered     = map[int]int{}
		published    []int
		subscribed   = 0
		publishFails = 0
	)
	answer := func(m protocol.TopicMessage) error {
		var p struct{ N int }
		if err := json.Unmarshal(m.Payload, &p); err != nil {
			return err
		}
		mu.Lock()
		answered[p.N]++
		mu.Unlock()
		return nil
	}
	wg.Go(func() {
		for ctx.Err() == nil {
			select {
			case <-stop:
				return
			default:
			}
			dctx, dcancel := context.WithTimeout(ctx, 5*time.Second)
			cl, err := rpc.Dial(dctx, url)
			if err == nil {
				_, err = cl.SubscribeDurable(dctx, "pl:*", "reader", answer)
			}
			dcancel()
			if err != nil {
				if cl != nil {
					_ = cl.Close()
				}
				select {
				case <-time.After(20 * time.Millisecond):
				case <-ctx.Done():
				}
				continue
			}
			mu.Lock()
			subscribed++
			mu.Unlock()
			select {
			case <-cl.Done():
			case <-stop:
			case <-ctx.Done():
			}
			_ = cl.Close()
		}
	})
	pubCl, err := rpc.Dial(ctx, "ws://"+keeper.started.API+"/")
	if err != nil {
		t.Fatal(err)
	}
	defer pubCl.Close()
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-ctx.Done():
				return
			case <-time.After(20 * time.Millisecond):
			}
			_, err := pubCl.Publish(ctx, fmt.Sprintf("pl:%d", i%3), json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)), nil, 5*time.Second)
			mu.Lock()
			if err == nil {
				published = append(published, i)
			} else {
				publishFails++
			}
			mu.Unlock()
		}
	})

	start := time.Now()
	for k := 1; k <= nodePowerLossKills; k++ {
		select {
		case <-time.After(time.Duration(100+rand.IntN(500)) * time.Millisecond):
		case <-ctx.Done():
			t.Fatalf("out of time after %d kills", k-1)
		}
		n.signal(t, syscall.SIGKILL)
		<-n.exited
		n = startNode(t, fmt.Sprintf("node-%d", k), "--data", dir, "--api", api, "--bootstrap", boot)
	}
	close(stop)
	killing := time.Since(start)
	wg.Wait()

	// Durable positions: once more on the node as it was left, the
	// subscription resumes and every message published is answered, at
	// least once.
	// The node releases the name of the subscriber that just closed when it
	// sees its connection end, which may be after the close returned here:
	// until then the name is refused as in use, and the client tries again.
	final, err := rpc.Dial(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	var refused error // other than as in use: not tried again
	if err := wait.Until(30*time.Second, func() error {
		_, err := final.SubscribeDurable(ctx, "pl:*", "reader", answer)
		if err != nil && !strings.Contains(err.Error(), "is in use on this node") {
			refused = err
			return nil
		}
		return err
	}); err != nil || refused != nil {
		err = errors.Join(err, refused)
		t.Fatalf("the durable subscription does not resume after the last kill: %v", err)
	}
	unanswered := func() []int {
		mu.Lock()
		defer mu.Unlock()
		var out []int
		for _, i := range published {
			if answered[i] == 0 {
				out = append(out, i)
			}
		}
		return out
	}
	if err := wait.Until(60*time.Second, func() error {
		if u := unanswered(); len(u) > 0 {
			return fmt.Errorf("%d published messages never delivered to the durable subscription: %v", len(u), head(u, 20))
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
	_ = final.Close()
	n.signal(t, syscall.SIGKILL)
	<-n.exited

	st, err := store.Open(filepath.Join(dir, "store.db"), store.WithPruneInterval(0))
	if err != nil {
		t.Fatalf("the store does not open after the last kill: %v", err)
	}
	defer st.Close()
	queued, err := st.PendingIn(context.Background(), "node", 100_000)
	if err != nil {
		t.Fatal(err)
	}
	in := map[string]bool{}
	for _, m := range queued {
		in[m.ID] = true
	}
	notDelivered := len(unanswered())
	mu.Lock()
	defer mu.Unlock()
	var lost []string
	for _, id := range acked {
		if !in[id] {
			lost = append(lost, id)
		}
	}
	again := 0
	for _, c := range answered {
		again += c - 1
	}
	figures(t, scenario, "%d SIGKILLs in %s, the store opened %d of %d times; outbox: %d sent, %d acknowledged as queued, %d in the outbox, %d acknowledged messages lost; durable positions: %d subscriptions, %d published (%d publishes refused), %d not delivered, %d delivered again",
		nodePowerLossKills, killing.Round(time.Second), nodePowerLossKills+2, nodePowerLossKills+2, sent, len(acked), len(queued), len(lost),
		subscribed, len(published), publishFails, notDelivered, again)
	if len(lost) > 0 {
		t.Errorf("%d acknowledged messages not in the outbox: %v", len(lost), lost[:min(len(lost), 20)])
	}
	if len(acked) < 100 {
		t.Errorf("only %d messages acknowledged: the scenario wrote too little", len(acked))
	}
}
