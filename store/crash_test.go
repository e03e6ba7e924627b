package store

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	bolt "go.etcd.io/bbolt"
)

const (
	envHelper = "MESHAGENT_STORE_CRASH_HELPER"
	envPath   = "MESHAGENT_STORE_CRASH_PATH"
	envRound  = "MESHAGENT_STORE_CRASH_ROUND"
)

// TestHelperProcess is the child of the crash tests: it writes messages
// from several goroutines as fast as it can and prints each id on stdout
// only after Enqueue (or Record) has returned, until it is killed.
func TestHelperProcess(t *testing.T) {
	mode := os.Getenv(envHelper)
	if mode == "" {
		t.Skip("run by the crash tests only")
	}
	s, err := Open(os.Getenv(envPath), WithPruneInterval(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		os.Exit(2)
	}
	round := os.Getenv(envRound)
	var out sync.Mutex
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := 0; i < 1_000_000; i++ {
				m := Message{
					ID: fmt.Sprintf("r%s-w%d-%d", round, w, i), Topic: "inbound:crash", From: "child",
					Payload: json.RawMessage(`{"n":` + fmt.Sprint(i) + `}`),
				}
				var err error
				if mode == "record" {
					err = s.Record(ctx, m)
				} else {
					err = s.Enqueue(ctx, m)
				}
				if err != nil {
					fmt.Fprintln(os.Stderr, "write:", err)
					os.Exit(3)
				}
				out.Lock()
				// One write(2) per acknowledged id.
				_, _ = os.Stdout.WriteString(m.ID + "\n")
				out.Unlock()
			}
		})
	}
	wg.Wait()
	os.Exit(0)
}

// runAndKill starts the helper on path, reads acknowledged ids until it has
// seen kill of them, kills the child with SIGKILL and returns every id the
// child printed in full before it died.
func runAndKill(t *testing.T, mode, path string, round, kill int) []string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), envHelper+"="+mode, envPath+"="+path, fmt.Sprintf("%s=%d", envRound, round))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var acked []string
	sc := bufio.NewScanner(stdout)
	killed := false
	for sc.Scan() {
		line := sc.Text()
		acked = append(acked, line)
		if !killed && len(acked) >= kill {
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			killed = true
		}
	}
	// Each id was printed with one write(2) of fewer than PIPE_BUF bytes,
	// which a kill cannot tear; check the form anyway.
	for _, id := range acked {
		if !strings.HasPrefix(id, fmt.Sprintf("r%d-w", round)) {
			t.Fatalf("helper printed %q", id)
		}
	}
	err = cmd.Wait()
	if !killed {
		t.Fatalf("helper exited before it was killed: %v\n%s", err, stderr.String())
	}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("helper did not die of SIGKILL: %v\n%s", cmd.ProcessState, stderr.String())
	}
	return acked
}

func testCrash(t *testing.T, mode, bucket string) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	path := filepath.Join(t.TempDir(), "crash.db")
	var acked []string
	// Three crashes on the same file: recovery after a crash is itself
	// crash-safe.
	for round, kill := range []int{50, 400, 1500} {
		acked = append(acked, runAndKill(t, mode, path, round, kill)...)
	}
	s, err := Open(path, WithPruneInterval(0))
	if err != nil {
		t.Fatalf("reopening after SIGKILL: %v", err)
	}
	defer s.Close()
	if err := s.db.View(func(tx *bolt.Tx) error {
		var errs []error
		for err := range tx.Check() {
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	}); err != nil {
		t.Fatalf("bbolt consistency check: %v", err)
	}
	stored := map[string]bool{}
	for _, k := range keys(t, s, bucket) {
		stored[string(k)] = true
	}
	missing := 0
	for _, id := range acked {
		if !stored[id] {
			missing++
			if missing <= 5 {
				t.Errorf("acknowledged %s lost", id)
			}
		}
	}
	if missing > 0 {
		t.Fatalf("%d of %d acknowledged ids lost", missing, len(acked))
	}
	// The records decode too, not only their ids.
	switch mode {
	case "record":
		if _, err := s.History(ctx, HistoryQuery{Topic: "inbound:*", Limit: MaxHistoryLimit}); err != nil {
			t.Fatal(err)
		}
	default:
		if _, err := s.Pending(ctx, 0); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d acknowledged, %d stored (writes in flight at the kill may be stored unacknowledged)", len(acked), len(stored))
}

func TestCrashEnqueue(t *testing.T) { testCrash(t, "enqueue", bucketOutboxIDs) }

func TestCrashRecord(t *testing.T) { testCrash(t, "record", bucketHistoryIDs) }
