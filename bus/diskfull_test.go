//go:build linux

package bus_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshagent/meshagent/bus"
	"github.com/meshagent/meshagent/internal/fakemesh"
	"github.com/meshagent/meshagent/internal/smallfs"
	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/rpc"
	"github.com/meshagent/meshagent/store"
)

// TestDiskFullRefusesBeforeAck (issue 23, disk full): with the bus's
// store on a full filesystem, sendMessage is refused (-32005, naming the
// store's error) before it is acknowledged; every message it did
// acknowledge is in history once space returns, and sending resumes by
// itself.
func TestDiskFullRefusesBeforeAck(t *testing.T) {
	dir := smallfs.Mount(t, "8m")
	st, err := store.Open(filepath.Join(dir, "bus.db"), store.WithPruneInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	_, url := busServer(t, fakemesh.New(), st)
	sub := newPeer(t, url, "sub", nil)
	sub.subscribe(t, map[string]any{"topic": "fill:*"})
	sender := newPeer(t, url, "sender", nil)

	filler := filepath.Join(dir, "filler")
	smallfs.Fill(t, filler)
	text := strings.Repeat("x", 16<<10)
	var acked []string
	refused, lastErr := 0, ""
	for i := range 200 {
		topic := fmt.Sprintf("fill:%d", i)
		var res bus.SendResult
		err := sender.Call(ctxT(t), bus.MethodSendMessage, map[string]any{"topic": topic, "payload": map[string]string{"type": "plaintext_message", "text": text}}, &res)
		switch {
		case err == nil && res.Success:
			acked = append(acked, topic)
		case rpcCode(err) == rpc.CodeServerBusy:
			refused++
			lastErr = err.Error()
		default:
			t.Errorf("%s: %+v %v, want success or -32005", topic, res, err)
		}
	}
	if refused == 0 {
		t.Fatalf("all %d messages were acknowledged on a full disk", len(acked))
	}
	if !strings.Contains(lastErr, "no space left on device") {
		t.Errorf("the refusal does not say why: %s", lastErr)
	}

	// Space returns: the refusals end by themselves, and every message
	// acknowledged is in history.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 30*time.Second, func() error {
		var res bus.SendResult
		err := sender.Call(ctxT(t), bus.MethodSendMessage, map[string]any{"topic": "fill:after", "payload": map[string]string{"type": "plaintext_message"}}, &res)
		if err != nil || !res.Success {
			return fmt.Errorf("sendMessage after space returned: %+v %v", res, err)
		}
		return nil
	})
	wait.For(t, 30*time.Second, func() error {
		hist, err := st.History(ctxT(t), store.HistoryQuery{Topic: "fill:*", Limit: store.MaxHistoryLimit})
		if err != nil {
			return err
		}
		in := map[string]bool{}
		for _, m := range hist {
			in[m.Topic] = true
		}
		missing := 0
		for _, topic := range acked {
			if !in[topic] {
				missing++
			}
		}
		if missing > 0 {
			return fmt.Errorf("%d of %d acknowledged messages not in history", missing, len(acked))
		}
		return nil
	})
	t.Logf("full disk: %d acknowledged (all in history once space returned), %d refused: %s", len(acked), refused, lastErr)
}

// TestDiskFullStopKeepsHistory (issue 23, disk full; found by make
// chaos's disk-full scenario): a bus whose disk fills up and which is
// stopped cleanly before space returns keeps every message it
// acknowledged in history. History is written after the acknowledgement,
// so the write that first meets the full disk holds messages already
// acknowledged: the store's reserve (store.WithReserve) takes that write,
// and from then on sendMessage is refused (-32005) until space returns.
// Without a reserve those messages were dropped at the stop ("history not
// recorded").
func TestDiskFullStopKeepsHistory(t *testing.T) {
	dir := smallfs.Mount(t, "8m")
	path := filepath.Join(dir, "bus.db")
	st, err := store.Open(path, store.WithPruneInterval(0), store.WithReserve(1<<20))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	stack, url := busServer(t, fakemesh.New(), st)
	sub := newPeer(t, url, "sub", nil)
	sub.subscribe(t, map[string]any{"topic": "stop:*"})
	sender := newPeer(t, url, "sender", nil)

	filler := filepath.Join(dir, "filler")
	smallfs.Fill(t, filler)
	text := strings.Repeat("x", 16<<10)
	var acked []string
	refused, lastErr := 0, ""
	for i := 0; i < 200 && refused < 5; i++ {
		topic := fmt.Sprintf("stop:%d", i)
		var res bus.SendResult
		err := sender.Call(ctxT(t), bus.MethodSendMessage, map[string]any{"topic": topic, "payload": map[string]string{"type": "plaintext_message", "text": text}}, &res)
		switch {
		case err == nil && res.Success:
			acked = append(acked, topic)
		case rpcCode(err) == rpc.CodeServerBusy:
			refused++
			lastErr = err.Error()
		default:
			t.Fatalf("%s: %+v %v, want success or -32005", topic, res, err)
		}
	}
	if refused == 0 || !strings.Contains(lastErr, "no space left on device") {
		t.Fatalf("%d acknowledged, %d refused on a full disk (%s); want refusals naming the cause", len(acked), refused, lastErr)
	}

	// A clean stop while the disk is still full.
	if err := stack.Close(); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	st, err = store.Open(path, store.WithPruneInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	hist, err := st.History(ctxT(t), store.HistoryQuery{Topic: "stop:*", Limit: store.MaxHistoryLimit})
	if err != nil {
		t.Fatal(err)
	}
	in := map[string]bool{}
	for _, m := range hist {
		in[m.Topic] = true
	}
	var missing []string
	for _, topic := range acked {
		if !in[topic] {
			missing = append(missing, topic)
		}
	}
	if len(missing) > 0 {
		t.Fatalf("%d of %d acknowledged messages not in history after a stop on a full disk: %v", len(missing), len(acked), missing)
	}
	t.Logf("full disk, then a clean stop: %d acknowledged, all in history; %d refused: %s", len(acked), refused, lastErr)
}
