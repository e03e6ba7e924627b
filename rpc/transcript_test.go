package rpc_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the <-- lines of testdata/*.txt with what the server sends")

// A transcript is a conversation with one client over one WebSocket:
//
//	--> a frame the client sends
//	<-- the frame the server must send next
//
// Lines starting with # and blank lines are comments. After each -->
// frame the runner reads exactly the <-- frames that follow it before it
// sends the next one. At the end it sends a sentinel request and requires
// its answer to be the next frame, so a notification that wrongly got an
// answer, or any other extra frame, fails the test. Frames are compared
// as compact JSON, byte for byte: key order is part of the contract.
//
// Transcripts named mesh_topics*.txt talk to a mesh with topics
// (topicMesh); the others to the fake mesh, which has none.
//
// With -update the <-- lines are rewritten with what the server sent.
// Review the diff before committing it.
func TestTranscripts(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.txt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no transcripts: %v", err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txt"), func(t *testing.T) {
			runTranscript(t, file)
		})
	}
}

const sentinel = `{"jsonrpc":"2.0","id":"transcript-end","method":"mesh.id"}`

func runTranscript(t *testing.T, file string) {
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var url string
	if strings.HasPrefix(filepath.Base(file), "mesh_topics") {
		url = topicServer(t, newTopicMesh())
	} else {
		url = newTestServer(t).url
	}
	ws := dialRaw(t, url)

	lines := strings.Split(string(src), "\n")
	changed := false
	for i, line := range lines {
		switch {
		case strings.HasPrefix(line, "--> "):
			writeFrame(t, ws, strings.TrimPrefix(line, "--> "))
		case strings.HasPrefix(line, "<-- "):
			want := strings.TrimPrefix(line, "<-- ")
			got := readFrame(t, ws)
			if *update {
				if nl := "<-- " + compact(got); nl != line {
					lines[i], changed = nl, true
				}
				continue
			}
			if compact(got) != compact(want) {
				t.Errorf("%s:%d: server sent\n\t%s\nwant\n\t%s", file, i+1, got, want)
			}
		case line == "" || strings.HasPrefix(line, "#"):
		default:
			t.Fatalf("%s:%d: a line must start with -->, <-- or #", file, i+1)
		}
	}
	writeFrame(t, ws, sentinel)
	if got, want := compact(readFrame(t, ws)), `{"jsonrpc":"2.0","id":"transcript-end","result":{"agentId":"`+selfID+`","publicKey":"`+selfB64+`"}}`; got != want {
		t.Errorf("%s: after the transcript the server sent\n\t%s\nwant the sentinel's answer\n\t%s", file, got, want)
	}
	if *update && changed {
		if err := os.WriteFile(file, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("rewrote %s", file)
	}
}

// compact returns s as compact JSON, or s itself if it is not JSON.
func compact(s string) string {
	var buf bytes.Buffer
	if err := json.Compact(&buf, []byte(s)); err != nil {
		return s
	}
	return buf.String()
}
