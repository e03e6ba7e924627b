package node

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshagent/meshagent/protocol"
)

// TestTaskTableBounds: the provider's task table stays within maxTasks
// tasks and maxTaskBytes of kept results, forgetting the oldest finished
// tasks first and never a running one.
func TestTaskTableBounds(t *testing.T) {
	tt := newTaskTable("provider", time.Now)
	from := requester{agent: peer.ID("requester")}
	admit := func(id string) *task {
		t.Helper()
		_, cancel := context.WithCancel(context.Background())
		tk, run, err := tt.admit(context.Background(), cancel, from, from.String(), &protocol.Request{Action: "work", CorrelationID: id}, false)
		if err != nil || !run {
			t.Fatalf("admit %s: run %v, %v", id, run, err)
		}
		return tk
	}
	known := func(id string) bool {
		tt.mu.Lock()
		defer tt.mu.Unlock()
		return tt.m[requestKey{from: from, id: id}] != nil
	}
	check := func() {
		t.Helper()
		tt.mu.Lock()
		defer tt.mu.Unlock()
		sum := 0
		for _, tk := range tt.m {
			if tk.finished() {
				sum += tk.size
			}
		}
		if len(tt.m) > maxTasks || tt.bytes > maxTaskBytes || sum != tt.bytes || len(tt.order) != len(tt.m) {
			t.Fatalf("table: %d tasks (max %d), %d bytes counted, %d kept (max %d), %d in order",
				len(tt.m), maxTasks, tt.bytes, sum, maxTaskBytes, len(tt.order))
		}
	}

	running := admit("running")
	big := json.RawMessage(`"` + strings.Repeat("x", 1<<20) + `"`)
	const bigTasks = 2 * maxTaskBytes >> 20
	for i := range bigTasks {
		id := fmt.Sprintf("big-%d", i)
		tt.finish(admit(id), big, nil)
		check()
	}
	if known("big-0") || !known(fmt.Sprintf("big-%d", bigTasks-1)) || !known("running") {
		t.Errorf("after %d results of 1 MiB: oldest kept %v, newest kept %v, running kept %v",
			bigTasks, known("big-0"), known(fmt.Sprintf("big-%d", bigTasks-1)), known("running"))
	}
	for i := range maxTasks + 10 {
		tt.finish(admit(fmt.Sprintf("small-%d", i)), json.RawMessage(`{}`), nil)
	}
	check()
	if known("small-0") || !known(fmt.Sprintf("small-%d", maxTasks+9)) || !known("running") {
		t.Errorf("after %d small results: oldest kept %v, newest kept %v, running kept %v",
			maxTasks+10, known("small-0"), known(fmt.Sprintf("small-%d", maxTasks+9)), known("running"))
	}
	tt.finish(running, nil, protocol.Errorf(protocol.CodeInternalError, "stopped"))
	check()
}
