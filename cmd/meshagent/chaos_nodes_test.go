//go:build chaos && unix

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/rpc"
)

const (
	nodeKillNodes  = 15
	nodeKillRate   = 20 // messages per second
	nodeKillBefore = 5 * time.Second
	nodeKillAfter  = 20 * time.Second
	nodeKillSettle = 3 * time.Second // messages this long after the kills must all arrive
)

// nodeKillVictims are the nodes killed: leaves and inner nodes of the
// bootstrap tree alike, never the publisher (node 0).
var nodeKillVictims = []int{1, 4, 7, 10, 13}

// TestChaosNodeKill: 15 node processes, each bootstrapped to one earlier
// node only (a binary tree, mDNS off), every node but the publisher
// subscribed to a topic pattern through its local API. Node 0 publishes 20
// messages a second; 5 s in, 5 nodes are SIGKILLed at once. Every survivor
// must receive at least 99.9% of the messages published 3 s or more after
// the kills (the mesh repairs itself within 3 s), and the publisher's
// publishes after that must succeed.
func TestChaosNodeKill(t *testing.T) {
	dir := t.TempDir()
	nodes := make([]*nodeProc, nodeKillNodes)
	for i := range nodes {
		args := []string{"--data", filepath.Join(dir, fmt.Sprint(i))}
		if i > 0 {
			args = append(args, "--bootstrap", nodes[(i-1)/2].started.Addrs[0])
		}
		nodes[i] = startNode(t, fmt.Sprintf("n%d", i), args...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()

	var (
		mu  sync.Mutex
		got = make([]map[int]int, nodeKillNodes) // node -> message n -> copies
	)
	for i := 1; i < nodeKillNodes; i++ {
		got[i] = map[int]int{}
		cl, err := rpc.Dial(ctx, nodes[i].started.API)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cl.Close() })
		if _, err := cl.Subscribe(ctx, "chaos:*", func(m protocol.TopicMessage) {
			var p struct {
				N int `json:"n"`
			}
			if json.Unmarshal(m.Payload, &p) == nil {
				mu.Lock()
				got[i][p.N]++
				mu.Unlock()
			}
		}); err != nil {
			t.Fatalf("subscribe on n%d: %v", i, err)
		}
	}
	pub, err := rpc.Dial(ctx, nodes[0].started.API)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()

	// Warm up: publish (negative n) until every subscriber has one.
	warm := -1
	wait.For(t, 60*time.Second, func() error {
		_, _ = pub.Publish(ctx, "chaos:warmup", json.RawMessage(fmt.Sprintf(`{"n":%d}`, warm)), nil, time.Second)
		warm--
		mu.Lock()
		defer mu.Unlock()
		for i := 1; i < nodeKillNodes; i++ {
			if len(got[i]) == 0 {
				return fmt.Errorf("n%d has received nothing yet", i)
			}
		}
		return nil
	})

	type published struct {
		at  time.Time
		err error
	}
	// Each publish runs on its own goroutine, so that a slow one does not
	// lower the rate.
	var (
		pubs  []published
		pubMu sync.Mutex
		pubWG sync.WaitGroup
	)
	start := time.Now()
	var killedAt time.Time
	tick := time.NewTicker(time.Second / nodeKillRate)
	defer tick.Stop()
	for n := 0; time.Since(start) < nodeKillBefore+nodeKillAfter; n++ {
		<-tick.C
		if killedAt.IsZero() && time.Since(start) >= nodeKillBefore {
			for _, v := range nodeKillVictims {
				nodes[v].signal(t, syscall.SIGKILL)
			}
			killedAt = time.Now()
		}
		pubMu.Lock()
		pubs = append(pubs, published{at: time.Now()})
		pubMu.Unlock()
		pubWG.Go(func() {
			_, err := pub.Publish(ctx, "chaos:stream", json.RawMessage(fmt.Sprintf(`{"n":%d}`, n)), nil, 2*time.Second)
			pubMu.Lock()
			pubs[n].err = err
			pubMu.Unlock()
		})
	}
	pubWG.Wait()
	elapsed := time.Since(start)
	for _, v := range nodeKillVictims {
		<-nodes[v].exited
	}

	// The messages that count: published nodeKillSettle after the kills.
	var counted []int
	pubErrs := 0
	for n, p := range pubs {
		if p.at.Sub(killedAt) >= nodeKillSettle {
			counted = append(counted, n)
			if p.err != nil {
				pubErrs++
				t.Errorf("publish %d (%s after the kills): %v", n, p.at.Sub(killedAt).Round(time.Millisecond), p.err)
			}
		}
	}
	survivors := []int{}
	for i := 1; i < nodeKillNodes; i++ {
		if !slices.Contains(nodeKillVictims, i) {
			survivors = append(survivors, i)
		}
	}
	missing := func() (worst int, worstNode int, dups int) {
		mu.Lock()
		defer mu.Unlock()
		worstNode = -1
		for _, i := range survivors {
			miss := 0
			for _, n := range counted {
				if got[i][n] == 0 {
					miss++
				}
			}
			if miss > worst || worstNode < 0 {
				worst, worstNode = miss, i
			}
			for _, c := range got[i] {
				dups += max(c-1, 0)
			}
		}
		return worst, worstNode, dups
	}
	// Let the last messages arrive.
	_ = wait.Until(10*time.Second, func() error {
		if w, _, _ := missing(); w > 0 {
			return errors.New("still missing")
		}
		return nil
	})
	worst, worstNode, dups := missing()
	ratio := 100 * float64(len(counted)-worst) / float64(max(len(counted), 1))
	figures(t, "node-kill", "%d nodes, %d killed, %d published at %.1f/s (%d counted from %s after the kills, %d publish errors), worst survivor n%d received %.2f%% (%d missing), %d duplicates",
		nodeKillNodes, len(nodeKillVictims), len(pubs), float64(len(pubs))/elapsed.Seconds(), len(counted), nodeKillSettle, pubErrs, worstNode, ratio, worst, dups)
	if len(counted) < 200 {
		t.Errorf("only %d messages counted", len(counted))
	}
	if ratio < 99.9 {
		t.Errorf("survivor n%d received %.2f%% of the messages published %s after the kills (%d missing); want >= 99.9%%",
			worstNode, ratio, nodeKillSettle, worst)
	}
}
