package lobby_test

import (
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/coder/websocket"

	"github.com/meshagent/meshagent/lobby"
)

var update = flag.Bool("update", false, "rewrite the <-- lines of testdata/*.txt with what the lobby sends")

// TestTranscripts replays the conversations in testdata/*.txt
// (the format is described at the top of each file). Frames are compared
// as compact JSON, byte for byte: field order is part of the contract.
// At the end every client sends a frame of an unknown type and must
// receive its ERROR next, so an extra frame fails the test. With -update
// the <-- lines are rewritten with what the lobby sent; review the diff.
func TestTranscripts(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.txt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no lobby transcripts: %v", err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txt"), func(t *testing.T) {
			runTranscript(t, file)
		})
	}
}

func runTranscript(t *testing.T, file string) {
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	tl := newTestLobby(t)
	var issued atomic.Int64
	lobby.SetTokens(tl.lobby, func() string { return fmt.Sprintf("token-%d", issued.Add(1)) })
	clients := make(map[string]*websocket.Conn)
	client := func(name string) *websocket.Conn {
		if clients[name] == nil {
			clients[name] = dialRaw(t, tl.url)
		}
		return clients[name]
	}
	lines := strings.Split(string(src), "\n")
	changed := false
	for i, line := range lines {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, rest, ok := strings.Cut(line, " ")
		switch {
		case ok && strings.HasPrefix(rest, "--> "):
			writeFrame(t, client(name), strings.TrimPrefix(rest, "--> "))
		case ok && strings.HasPrefix(rest, "<-- "):
			got := compact(readFrame(t, client(name)))
			if *update {
				if nl := name + " <-- " + got; nl != line {
					lines[i], changed = nl, true
				}
				continue
			}
			if want := compact(strings.TrimPrefix(rest, "<-- ")); got != want {
				t.Errorf("%s:%d: %s received\n\t%s\nwant\n\t%s", file, i+1, name, got, want)
			}
		default:
			t.Fatalf("%s:%d: a line is <client> --> frame, <client> <-- frame, or a # comment", file, i+1)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(clients)) {
		writeFrame(t, clients[name], `{"message_type":"TRANSCRIPT_END"}`)
		if got := readFrame(t, clients[name]); !strings.Contains(got, `"TRANSCRIPT_END"`) {
			t.Errorf("%s: after the transcript %s received %s", file, name, got)
		}
	}
	if *update && changed {
		if err := os.WriteFile(file, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("rewrote %s", file)
	}
}
