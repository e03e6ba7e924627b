package bus_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/meshagent/meshagent/internal/fakemesh"
	"github.com/meshagent/meshagent/rpc"
)

// processedBy records which member processed each message.
type processedBy struct {
	mu  sync.Mutex
	by  map[string][]string // text -> members that answered processed
	per map[string]int      // member -> messages processed
}

func (p *processedBy) add(member, text string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.by[text] = append(p.by[text], member)
	p.per[member]++
}

func (p *processedBy) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.by)
}

// TestBusQueueGroup: three clients in one queue group share 30 messages,
// each processed by exactly one member; a member that disconnects in the
// middle of a delivery loses nothing: its message is retried at another
// member.
func TestBusQueueGroup(t *testing.T) {
	st := openStore(t, filepath.Join(t.TempDir(), "bus.db"))
	_, url := busServer(t, fakemesh.New(), st)
	done := processedBy{by: map[string][]string{}, per: map[string]int{}}
	members := map[string]*peer{}
	var leaving sync.Once
	for _, id := range []string{"w1", "w2", "w3"} {
		n := 0
		members[id] = newPeer(t, url, id, func(d delivery) (any, error) {
			n++
			if id == "w2" && n >= 4 {
				// w2 goes away while it holds this message (Close waits
				// for this handler: it closes in the background).
				leaving.Do(func() { go func() { _ = members["w2"].Close() }() })
				return nil, errors.New("going away")
			}
			done.add(id, d.text)
			return map[string]any{"processed": true}, nil
		})
	}
	for _, id := range []string{"w1", "w2", "w3"} {
		members[id].subscribe(t, map[string]any{"topic": "job:*", "group": "workers"})
	}
	sender := newPeer(t, url, "sender", nil)
	retrying := 0
	for i := range 30 {
		res := sender.send(t, fmt.Sprintf("job:%d", i), fmt.Sprintf("m%d", i))
		if !res.Success || len(res.Acks) != 1 {
			t.Fatalf("message %d: %+v, want one ack (one member)", i, res)
		}
		if res.Acks[0].Retrying {
			retrying++
		}
	}
	waitFor(t, "all 30 messages processed", func() bool { return done.count() == 30 })
	done.mu.Lock()
	defer done.mu.Unlock()
	for text, by := range done.by {
		if len(by) != 1 {
			t.Errorf("%s processed by %q, want one member", text, by)
		}
	}
	for _, id := range []string{"w1", "w2", "w3"} {
		if done.per[id] == 0 {
			t.Errorf("%s processed nothing: %v", id, done.per)
		}
	}
	if done.per["w2"] != 3 || retrying == 0 {
		t.Errorf("w2 processed %d before it left (want 3), %d acks said retrying (want 1 or more): %v", done.per["w2"], retrying, done.per)
	}
}

// TestBusQueueGroupParams: the group member of subscribe and unsubscribe.
func TestBusQueueGroupParams(t *testing.T) {
	_, url := busServer(t, fakemesh.New(), nil)
	a, b := newPeer(t, url, "a", nil), newPeer(t, url, "b", nil)
	a.subscribe(t, map[string]any{"topic": "job:*", "group": "w", "policy": "continueAll"})
	for _, tc := range []struct {
		method string
		params map[string]any
		code   int
		want   string
	}{
		{"subscribe", map[string]any{"topic": "job:*", "group": "w"}, rpc.CodeInvalidParams, "delivers under policy continueAll"},
		{"subscribe", map[string]any{"topic": "job:*", "group": ""}, rpc.CodeInvalidParams, `"group" must be a non-empty string`},
		{"subscribe", map[string]any{"topic": "job:*", "group": 5}, rpc.CodeInvalidParams, `"group" must be`},
		{"subscribe", map[string]any{"topic": "job:*", "group": strings.Repeat("g", 257)}, rpc.CodeInvalidParams, `at most 256 bytes`},
		{"subscribe", map[string]any{"topic": "job:*", "group": "w", "defaultHandler": true}, rpc.CodeInvalidParams, "default handler"},
		{"unsubscribe", map[string]any{"topic": "job:*", "group": "w"}, rpc.CodeSubscriptionNotFound, "not found"},
	} {
		err := b.Call(ctxT(t), tc.method, tc.params, nil)
		var re *rpc.Error
		if !errors.As(err, &re) || re.Code != tc.code || !strings.Contains(re.Message, tc.want) {
			t.Errorf("%s %v: %v, want %d with %q", tc.method, tc.params, err, tc.code, tc.want)
		}
	}
	if err := a.Call(ctxT(t), "subscribe", map[string]any{"topic": "job:*", "group": "w", "policy": "continueAll"}, nil); rpcCode(err) != rpc.CodeAlreadySubscribed {
		t.Errorf("second join: %v, want -32003", err)
	}
	if err := a.Call(ctxT(t), "unsubscribe", map[string]any{"topic": "job:*", "group": "v"}, nil); rpcCode(err) != rpc.CodeSubscriptionNotFound {
		t.Errorf("unsubscribe from another group: %v, want -32004", err)
	}
	b.subscribe(t, map[string]any{"topic": "job:*", "group": "w", "policy": "continueAll"})
	if err := a.Call(ctxT(t), "unsubscribe", map[string]any{"topic": "job:*", "group": "w"}, nil); err != nil {
		t.Fatal(err)
	}
	sender := newPeer(t, url, "sender", nil)
	for i := range 3 {
		if got := ackIDs(sender.send(t, "job:1", fmt.Sprint(i))); got != "b=true" {
			t.Errorf("after a left, message %d went to %q, want b", i, got)
		}
	}
	// The topic alone names a connection's subscription, in a group or
	// not. Without a store, a message to a group whose members all left
	// is not retried, and nothing else takes it.
	if err := b.Call(ctxT(t), "unsubscribe", map[string]any{"topic": "job:*"}, nil); err != nil {
		t.Fatal(err)
	}
	if res := sender.send(t, "job:1", "nobody"); res.Success {
		t.Errorf("a message to an empty group: %+v", res)
	}
}

// TestBusQueueGroupAway: a message whose group has no member left waits
// in the outbox, without counting attempts, and goes to the first member
// that joins.
func TestBusQueueGroupAway(t *testing.T) {
	st := openStore(t, filepath.Join(t.TempDir(), "bus.db"))
	_, url := busServer(t, fakemesh.New(), st)
	gone := newPeer(t, url, "gone", func(delivery) (any, error) {
		return map[string]any{"processed": false, "should_retry": true, "retry_seconds": 0}, nil
	})
	gone.subscribe(t, map[string]any{"topic": "job:*", "group": "w"})
	sender := newPeer(t, url, "sender", nil)
	if res := sender.send(t, "job:1", "wait for me"); !res.Acks[0].Retrying {
		t.Fatalf("ack %+v, want retrying", res.Acks)
	}
	_ = gone.Close()
	waitFor(t, "the retry to wait for the group", func() bool {
		p, _ := st.Pending(ctxT(t), 10)
		return len(p) == 1 && strings.Contains(p[0].LastError, "queue group w")
	})
	back := newPeer(t, url, "back", nil)
	back.subscribe(t, map[string]any{"topic": "job:*", "group": "w"})
	waitFor(t, "the message at the new member", func() bool { return strings.Join(back.texts(), ",") == "wait for me" })
	waitFor(t, "an empty outbox", func() bool {
		p, _ := st.Pending(ctxT(t), 10)
		return len(p) == 0
	})
}
