package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/meshagent/meshagent/internal/meshtest"
	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/store"
)

// TestTaskWaitShowsProgressAsItComes: `task wait` on a detached task
// prints each progress line while the task still runs, not only with its
// result.
func TestTaskWaitShowsProgressAsItComes(t *testing.T) {
	openStore := func(name string) *store.Store { return openTestStore(t, filepath.Join(t.TempDir(), name)) }
	release := make(chan struct{})
	prov := meshtest.Node(t, 66, node.WithStore(openStore("p.db")), node.WithServices(node.Service{Capability: protocol.Capability{Name: "review"},
		Handler: handler(func(ctx context.Context, c *node.Call) (json.RawMessage, error) {
			if err := c.Progress(json.RawMessage(`{"step":1}`)); err != nil {
				return nil, err
			}
			select {
			case <-release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			if err := c.Progress(json.RawMessage(`{"step":2}`)); err != nil {
				return nil, err
			}
			return json.RawMessage(`{"verdict":"ok"}`), nil
		})}))
	st := openStore("r.db")
	req := meshtest.Node(t, 67, node.WithStore(st))
	meshtest.Connect(t, req, prov)
	api := serveStoreAPI(t, req, st)
	res := runCLI(t, "", "call", prov.AgentID(), "review", "--detach", "--api", api)
	res.wantCode(t, ExitOK)
	id := regexp.MustCompile(`task (\S+) `).FindStringSubmatch(res.stdout)
	if id == nil {
		t.Fatalf("call --detach printed %q", res.stdout)
	}

	var out, errb syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(context.Background(), NewApp(&out, &errb), []string{"meshagent", "task", "wait", id[1], "--timeout", "60s", "--api", api})
	}()
	wait.For(t, 20*time.Second, func() error {
		if !strings.Contains(errb.String(), `in progress: {"step":1}`) {
			return fmt.Errorf("task wait has not printed the first step while the task runs; stderr %q", errb.String())
		}
		return nil
	})
	if strings.Contains(errb.String(), `{"step":2}`) || out.String() != "" {
		t.Fatalf("the task had not gone on, yet task wait printed %q / %q", errb.String(), out.String())
	}
	close(release)
	if code := wait.Receive(t, 30*time.Second, done, "task wait ends"); code != ExitOK {
		t.Fatalf("task wait exited %d: %s", code, errb.String())
	}
	if !strings.Contains(errb.String(), `in progress: {"step":2}`) || strings.Count(errb.String(), `{"step":1}`) != 1 || !strings.Contains(out.String(), `"verdict": "ok"`) {
		t.Fatalf("stderr %q stdout %q: want each step once, then the result", errb.String(), out.String())
	}
}
