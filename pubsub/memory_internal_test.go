package pubsub

import (
	"fmt"
	"testing"
	"time"

	libp2ppubsub "github.com/libp2p/go-libp2p-pubsub"

	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/sign"
)

// A subscription's queue holds at most its bound, in order, refuses the
// rest, and releases a burst's buffer once drained: an idle subscription
// keeps at most queueKeep slots, not the bound's.
func TestMsgQueueBoundAndRelease(t *testing.T) {
	tests := []struct {
		name       string
		max, push  int
		wantKept   int
		wantCapMax int // after draining
	}{
		{name: "below the bound", max: 256, push: 5, wantKept: 5, wantCapMax: queueKeep},
		{name: "a burst to the bound", max: 256, push: 256, wantKept: 256, wantCapMax: queueKeep},
		{name: "beyond the bound", max: 16, push: 40, wantKept: 16, wantCapMax: queueKeep},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q := newMsgQueue(tc.max)
			if got := cap(q.buf); got != 0 {
				t.Fatalf("a new queue holds a buffer of %d, want none", got)
			}
			kept := 0
			for i := range tc.push {
				if q.push(Message{Topic: string(rune('a' + i%26))}) {
					kept++
				}
			}
			if kept != tc.wantKept || q.len() != tc.wantKept {
				t.Fatalf("kept %d (len %d) of %d pushed with bound %d, want %d", kept, q.len(), tc.push, tc.max, tc.wantKept)
			}
			for i := range kept {
				m, ok := q.pop()
				if !ok || m.Topic != string(rune('a'+i%26)) {
					t.Fatalf("pop %d = %q, %v: out of order or missing", i, m.Topic, ok)
				}
			}
			if _, ok := q.pop(); ok {
				t.Fatal("pop from a drained queue returned a message")
			}
			if got := cap(q.buf); got > tc.wantCapMax {
				t.Fatalf("a drained queue keeps a buffer of %d messages, want at most %d", got, tc.wantCapMax)
			}
			if !q.push(Message{Topic: "again"}) {
				t.Fatal("a drained queue refused a message")
			}
		})
	}
}

// Peer scoring keeps delivery records for scoreRecordTTL only because no
// topic is scored: were one scored, its counters would read the records
// and the short retention would need revisiting.
func TestScoreRecordsShortOnlyWithoutTopicScores(t *testing.T) {
	sp, _ := scoreParams()
	if sp.SeenMsgTTL != scoreRecordTTL || scoreRecordTTL > 10*time.Second {
		t.Fatalf("delivery records kept %s (scoreRecordTTL %s), want scoreRecordTTL of at most 10s", sp.SeenMsgTTL, scoreRecordTTL)
	}
	if len(sp.Topics) != 0 {
		t.Fatalf("%d topics scored: their deliveries counters read the records, which scoreRecordTTL keeps only %s", len(sp.Topics), scoreRecordTTL)
	}
}

// GossipSub's seen-message cache forgets an id after seenTTL; a copy
// arriving later is validated, and the replay guard refuses it (the
// validator's replay case is tested in topics_test.go) as long as the
// guard's window covers it: seenTTL lies between the gossip window (5
// heartbeats, when honest copies stop coming) and the default replay
// window.
func TestSeenTTLCoveredByReplayGuard(t *testing.T) {
	gossip := 5 * libp2ppubsub.GossipSubHeartbeatInterval
	if seenTTL > sign.DefaultReplayWindow || seenTTL < gossip {
		t.Fatalf("seenTTL %s: want between the gossip window %s and the replay window %s", seenTTL, gossip, sign.DefaultReplayWindow)
	}
}

// The mesh peers of a family named by WithUnprotectedFamilies are not
// protected from the connection manager; those of other families are, as
// GossipSub protects them, and so are both without the option.
func TestUnprotectedFamilies(t *testing.T) {
	for _, tc := range []struct {
		name          string
		opts          []Option
		wantPresence  bool
		wantOtherProt bool
	}{
		{name: "presence unprotected", opts: []Option{WithUnprotectedFamilies("presence")}, wantPresence: false, wantOtherProt: true},
		{name: "default", wantPresence: true, wantOtherProt: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ha, hb := newHost(t), newHost(t)
			a, b := newBus(t, ha, tc.opts...), newBus(t, hb, tc.opts...)
			connect(t, ha, hb)
			for _, tp := range []*Topics{a, b} {
				for _, pattern := range []string{"presence:*", "team:*"} {
					if _, err := tp.Subscribe(pattern, func(Message) {}); err != nil {
						t.Fatal(err)
					}
				}
			}
			if err := wait.Until(30*time.Second, func() error {
				if a.MeshPeers("presence:x") < 1 || a.MeshPeers("team:x") < 1 {
					return fmt.Errorf("mesh peers: presence %d, team %d", a.MeshPeers("presence:x"), a.MeshPeers("team:x"))
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			cm := ha.ConnManager()
			if got := cm.IsProtected(hb.ID(), meshTag(GossipTopic("presence:x"))); got != tc.wantPresence {
				t.Errorf("presence mesh peer protected %v, want %v", got, tc.wantPresence)
			}
			if got := cm.IsProtected(hb.ID(), meshTag(GossipTopic("team:x"))); got != tc.wantOtherProt {
				t.Errorf("team mesh peer protected %v, want %v", got, tc.wantOtherProt)
			}
		})
	}
}
