package rpc

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzDecodeRequest feeds arbitrary frames to the decoder the server uses.
// It must never panic, and whatever it decides must be well formed: a
// fatal answer alone, or one item per batch element, each a valid message
// or an error response that encodes to a JSON-RPC 2.0 error.
func FuzzDecodeRequest(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.txt"))
	for _, file := range files {
		src, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		for line := range strings.SplitSeq(string(src), "\n") {
			if frame, ok := strings.CutPrefix(line, "--> "); ok {
				f.Add([]byte(frame))
			}
		}
	}
	f.Add([]byte("\xff\xfe"))
	f.Add([]byte(`[{"jsonrpc":"2.0","id":1,"result":{}},{"jsonrpc":"2.0","id":2,"error":{"code":1,"message":"m","data":[1]}}]`))
	f.Fuzz(func(t *testing.T, frame []byte) {
		items, batch, fatal := decodeFrame(frame, 8)
		if fatal != nil {
			if items != nil || fatal.Error == nil {
				t.Fatalf("fatal %+v with items %v", fatal, items)
			}
			checkResponse(t, fatal)
			return
		}
		if len(items) == 0 || (!batch && len(items) != 1) || len(items) > 8 {
			t.Fatalf("%d items, batch %v", len(items), batch)
		}
		for _, it := range items {
			switch {
			case it.bad != nil && it.msg != nil:
				t.Fatal("an item is both a message and an error")
			case it.bad != nil:
				checkResponse(t, it.bad)
			case it.msg != nil:
				checkMessage(t, it.msg)
			}
		}
	})
}

func checkResponse(t *testing.T, r *response) {
	t.Helper()
	if r.JSONRPC != "2.0" || r.Error == nil || r.Result != nil || !validID(r.ID) {
		t.Fatalf("bad error response %+v", r)
	}
	b, err := marshal(r)
	if err != nil || !json.Valid(b) {
		t.Fatalf("error response does not encode: %s %v", b, err)
	}
}

func checkMessage(t *testing.T, m *message) {
	t.Helper()
	switch m.kind {
	case kindRequest:
		if !validID(m.ID) || m.Method == "" {
			t.Fatalf("bad request %+v", m)
		}
	case kindNotification:
		if m.ID != nil || m.Method == "" {
			t.Fatalf("bad notification %+v", m)
		}
	case kindResponse:
		if !validID(m.ID) || isNull(m.ID) || (m.Result == nil) == (m.Error == nil) {
			t.Fatalf("bad response %+v", m)
		}
	default:
		t.Fatalf("message of kind %d", m.kind)
	}
	if m.Params != nil && m.Params[0] != '{' && m.Params[0] != '[' {
		t.Fatalf("params %s", m.Params)
	}
}
