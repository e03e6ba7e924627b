package bus_test

import (
	"path/filepath"
	"testing"

	"github.com/meshagent/meshagent/internal/fakemesh"
	"github.com/meshagent/meshagent/store"
)

// TestBusCloseKeepsHistory: every message a sendMessage answered is in the
// history once Close returns, including those a background writer had
// taken from its queue but not yet committed when Close began.
func TestBusCloseKeepsHistory(t *testing.T) {
	st := openStore(t, filepath.Join(t.TempDir(), "bus.db"))
	srv, url := busServer(t, fakemesh.New(), st)
	sub := newPeer(t, url, "sub", nil)
	sub.subscribe(t, map[string]any{"topic": "hist:*"})
	sender := newPeer(t, url, "sender", nil)
	const n = 40
	for i := range n {
		if res := sender.send(t, "hist:1", "m"); !res.Success {
			t.Fatalf("message %d: %+v", i, res)
		}
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	msgs, err := st.History(ctxT(t), store.HistoryQuery{Topic: "hist:1", Limit: 2 * n})
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != n {
		t.Errorf("history holds %d of the %d messages sent before Close", len(msgs), n)
	}
}
