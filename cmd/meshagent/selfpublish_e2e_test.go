package main

import (
	"fmt"
	"testing"
	"time"

	"github.com/meshagent/meshagent/internal/wait"
)

// TestPublishToOwnBusSubscriber: `meshagent publish` on a node reaches a
// bus client subscribed on that node's own local API (issue 12, defect 5),
// once, and does not fail with "no agent subscribes".
func TestPublishToOwnBusSubscriber(t *testing.T) {
	x := startNode(t, "x")
	url := "ws://" + x.started.API + "/"
	watcher := dialBusPeer(t, url, "watcher", "outbound:*")
	meshagent(t, "publish", "outbound:2", "--payload", `{"text":"mine"}`, "--timeout", "3s", "--api", x.started.API).must(t, 0)
	meshagent(t, "publish", "outbound:3", "--payload", `{"text":"end"}`, "--timeout", "3s", "--api", x.started.API).must(t, 0)
	wait.For(t, 10*time.Second, func() error {
		if got := watcher.received(); got != "outbound:2=mine outbound:3=end" {
			return fmt.Errorf("the bus subscriber received %q, want each message once", got)
		}
		return nil
	})
}
