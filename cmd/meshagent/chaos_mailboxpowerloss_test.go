//go:build chaos && unix

package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/meshagent/meshagent/bus"
	"github.com/meshagent/meshagent/internal/wait"
)

// mailboxPowerLossKills is how many times TestChaosMailboxPowerLoss
// SIGKILLs the mailbox relay, each 100–600 ms after it started, while
// deposits arrive.
const mailboxPowerLossKills = 40

// TestChaosMailboxPowerLoss (issue 23, power loss of a mailbox): agent B
// names relay M as its mailbox and goes away; a node S keeps sending B
// bus messages (each acknowledged as queued once in S's outbox), which S
// hands over to M, deposit by deposit, while M is SIGKILLed 40 times at
// random points and restarted on its store at the same address. M must
// start every time (startCommand fails the test otherwise), and once B is
// back every message acknowledged as queued reaches it: from M's mailbox,
// or from S's outbox when a deposit did not complete.
func TestChaosMailboxPowerLoss(t *testing.T) {
	const scenario = "mailbox-power-loss"
	dir := t.TempDir()
	got := filepath.Join(dir, "received.jsonl")
	caps := filepath.Join(dir, "caps.json")
	writeFile(t, caps, `[{"name": "note", "description": "keeps a note",
		"handler": {"exec": ["sh", "-c", "tee -a '`+got+`'; echo >> '`+got+`'"], "timeout": "10s"}}]`)
	keyM, dataM := filepath.Join(dir, "m.key"), filepath.Join(dir, "m")
	m := startCommand(t, "relay", "mailbox-0", "--key", keyM, "--data", dataM, "--ws", "127.0.0.1:0", "--api", "off")
	mbox := m.started.Addrs[0]
	listenM := mbox[:strings.Index(mbox, "/p2p/")]
	wsM := m.started.WS
	keyB := filepath.Join(dir, "b.key")
	bArgs := []string{"--key", keyB, "--data", filepath.Join(dir, "b"), "--mailbox", mbox, "--capabilities", caps, "--bootstrap", mbox}
	b := startNode(t, "b", bArgs...)
	idB := b.started.AgentID
	s := startNode(t, "sender", "--data", filepath.Join(dir, "s"), "--bootstrap", mbox)
	wait.For(t, 30*time.Second, func() error {
		if !s.logged("msg=hello", "remote_peer="+idB) {
			return fmt.Errorf("S has no hello from B")
		}
		return nil
	})
	b.signal(t, syscall.SIGKILL)
	<-b.exited

	var (
		mu    sync.Mutex
		acked []int
		sent  = 0
	)
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	stop := make(chan struct{})
	producer := &busSession{url: "ws://" + s.started.API + "/", id: "producer"}
	wg.Go(func() {
		defer producer.drop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-ctx.Done():
				return
			case <-time.After(20 * time.Millisecond):
			}
			cl, err := producer.client(ctx)
			if err != nil {
				return
			}
			var res bus.SendResult
			cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
			err = cl.Call(cctx, "sendMessage", map[string]any{"topic": "agent:" + idB,
				"payload": map[string]any{"type": "note", "seq": fmt.Sprintf("s%d.", i)}}, &res)
			ccancel()
			mu.Lock()
			sent++
			if err == nil && res.Success && len(res.Acks) == 1 && res.Acks[0].Queued {
				acked = append(acked, i)
			}
			mu.Unlock()
			if err != nil {
				producer.drop()
			}
		}
	})

	start := time.Now()
	for k := 1; k <= mailboxPowerLossKills; k++ {
		select {
		case <-time.After(time.Duration(100+rand.IntN(500)) * time.Millisecond):
		case <-ctx.Done():
			t.Fatalf("out of time after %d kills", k-1)
		}
		m.signal(t, syscall.SIGKILL)
		<-m.exited
		m = startCommand(t, "relay", fmt.Sprintf("mailbox-%d", k), "--key", keyM, "--data", dataM, "--ws", wsM, "--api", "off", "--listen", listenM)
	}
	close(stop)
	killing := time.Since(start)
	wg.Wait()
	handedOver := strings.Count(s.stderr.String(), "message handed over to a mailbox")

	// B comes back: every message acknowledged as queued reaches it.
	startNode(t, "b", bArgs...)
	seqRE := regexp.MustCompile(`"seq":"s([0-9]+)\.`)
	delivered := func() map[int]int {
		data, _ := os.ReadFile(got)
		out := map[int]int{}
		for _, mm := range seqRE.FindAllStringSubmatch(string(data), -1) {
			var n int
			_, _ = fmt.Sscan(mm[1], &n)
			out[n]++
		}
		return out
	}
	missing := func() []int {
		d := delivered()
		mu.Lock()
		defer mu.Unlock()
		var out []int
		for _, n := range acked {
			if d[n] == 0 {
				out = append(out, n)
			}
		}
		return out
	}
	if err := wait.Until(90*time.Second, func() error {
		if miss := missing(); len(miss) > 0 {
			return fmt.Errorf("%d acknowledged messages have not reached B: %v", len(miss), head(miss, 20))
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
	twice := 0
	for _, c := range delivered() {
		if c > 1 {
			twice++
		}
	}
	lost := len(missing())
	mu.Lock()
	defer mu.Unlock()
	figures(t, scenario, "%d SIGKILLs of the mailbox relay in %s, it started %d of %d times; %d sent, %d acknowledged as queued, %d handed over to the mailbox, %d acknowledged messages lost, %d run twice",
		mailboxPowerLossKills, killing.Round(time.Second), mailboxPowerLossKills+1, mailboxPowerLossKills+1, sent, len(acked), handedOver, lost, twice)
	if len(acked) < 50 {
		t.Errorf("only %d messages acknowledged: the scenario wrote too little", len(acked))
	}
}
