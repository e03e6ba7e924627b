package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/meshagent/meshagent/store"
)

// The bus's life of a message: accepted (Enqueue, then acknowledge), a
// failed delivery (Retry), given up (DeadLetter), replayed, delivered and
// recorded in history.
func Example() {
	dir, _ := os.MkdirTemp("", "store-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()

	s, err := store.Open(filepath.Join(dir, "meshagent.db"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()

	m := store.Message{ID: "msg-1", Topic: "inbound:chat-1", From: "telegram-bridge",
		Payload: json.RawMessage(`{"text":"hello"}`)}
	if err := s.Enqueue(ctx, m); err != nil { // synced: safe to acknowledge now
		fmt.Println(err)
		return
	}
	_ = s.Retry(ctx, "msg-1", "agent_unavailable", time.Now().Add(5*time.Second))
	pending, _ := s.Pending(ctx, 10)
	_ = s.DeadLetter(ctx, pending[0], "max retries")
	dead, _ := s.DeadLetters(ctx, store.DLQFilter{Topic: "inbound:chat-1"})
	fmt.Println("dead:", dead[0].ID, dead[0].Attempts, dead[0].Reason)

	replayed, _ := s.Replay(ctx, "msg-1")
	fmt.Println("replayed with attempts", replayed.Attempts)
	_ = s.Delivered(ctx, "msg-1")
	_ = s.Record(ctx, replayed)
	_ = s.Record(ctx, replayed) // at-least-once: recorded once

	h, _ := s.History(ctx, store.HistoryQuery{Topic: "inbound:*"})
	fmt.Println("history:", len(h), h[0].ID)
	// Output:
	// dead: msg-1 1 max retries
	// replayed with attempts 0
	// history: 1 msg-1
}
