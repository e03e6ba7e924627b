package store

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite testdata/golden from the code (review the diff: it is an on-disk format change)")

// goldenRecords pin the on-disk encoding: a change that makes old files
// unreadable fails here.
var goldenRecords = []struct {
	file string
	v    any
}{
	{"message.v1", msgRecord{
		ID: "9f86d081884c7d659a2feaa0c55ad015", Topic: "inbound:chat-1", From: "12D3KooWA", To: "12D3KooWB",
		ConversationID: "conv-7", Payload: []byte(`{"text": "héllo"}`), Metadata: []byte(`{"trace":"x"}`),
		Time: time.Date(2026, 2, 5, 20, 0, 0, 123, time.UTC).UnixNano(), Attempts: 2, LastError: "agent_unavailable",
		Seq: 42, Next: time.Date(2026, 2, 5, 20, 5, 0, 0, time.UTC).UnixNano(),
	}},
	{"deadletter.v1", msgRecord{
		ID: "m-1", Topic: "task:42", Payload: []byte(`[1,2,3]`), Time: time.Date(2026, 2, 5, 20, 0, 0, 0, time.UTC).UnixNano(),
		Attempts: 3, LastError: "timeout", Reason: "max retries",
		DeadAt: time.Date(2026, 2, 5, 20, 10, 0, 0, time.UTC).UnixNano(),
	}},
	{"registration.v1", regRecord{
		AgentID: "12D3KooWA", TokenHash: bytes.Repeat([]byte{0xab}, 32),
		Capabilities: []byte(`[{"name":"summarize"}]`), RegisteredAt: time.Date(2026, 2, 5, 20, 0, 0, 0, time.UTC).UnixNano(),
	}},
}

func TestGoldenRecords(t *testing.T) {
	for _, g := range goldenRecords {
		t.Run(g.file, func(t *testing.T) {
			path := filepath.Join("testdata", "golden", g.file)
			got, err := encode(g.v)
			if err != nil {
				t.Fatal(err)
			}
			if *update {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test ./store -run Golden -update)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("encoding changed:\n got %s\nwant %s", got, want)
			}
			// The file decodes to the value.
			var back any
			switch g.v.(type) {
			case msgRecord:
				back, err = decodeMessage("golden", []byte(g.file), want)
			case regRecord:
				back, err = decodeRegistration("golden", []byte(g.file), want)
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(back, g.v) {
				t.Errorf("decoded %+v, want %+v", back, g.v)
			}
		})
	}
}

func TestMessageRoundTrip(t *testing.T) {
	m := Message{ID: "x", Topic: "t", From: "a", To: "b", ConversationID: "c",
		Payload: json.RawMessage(" [ 1 ,2 ] "), Metadata: json.RawMessage(`{}`),
		Time: time.Date(1960, 1, 1, 0, 0, 0, 5, time.UTC), Attempts: 1, LastError: "e",
		NextAttempt: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	v, err := encode(toRecord(m))
	if err != nil {
		t.Fatal(err)
	}
	r, err := decodeMessage("b", []byte("k"), v)
	if err != nil {
		t.Fatal(err)
	}
	if got := r.message(); !reflect.DeepEqual(got, m) {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, m)
	}
}

func TestTimeKeyOrder(t *testing.T) {
	times := []time.Time{
		time.Unix(0, -1<<62), time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC), time.Unix(0, -1),
		time.Unix(0, 0), time.Unix(0, 1), t0, time.Unix(0, 1<<62),
	}
	for i := 1; i < len(times); i++ {
		a, b := timeKey(times[i-1]), timeKey(times[i])
		if bytes.Compare(a, b) >= 0 {
			t.Errorf("timeKey(%v) >= timeKey(%v)", times[i-1], times[i])
		}
		if keyNano(b) != times[i].UnixNano() {
			t.Errorf("keyNano(timeKey(%v)) = %d", times[i], keyNano(b))
		}
	}
}

func TestCorruptValues(t *testing.T) {
	good, _ := encode(goldenRecords[0].v)
	tests := []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"unknown version", append([]byte{9}, good[1:]...)},
		{"not JSON", []byte{formatVersion, 'x'}},
		{"truncated", good[:len(good)/2]},
		{"trailing data", append(bytes.Clone(good), []byte(` {}`)...)},
		{"unknown field", []byte{formatVersion, '{', '"', 'z', '"', ':', '1', '}'}},
		{"no id", append([]byte{formatVersion}, `{"topic":"t","payload":"MQ==","time":1}`...)},
		{"no topic", append([]byte{formatVersion}, `{"id":"i","payload":"MQ==","time":1}`...)},
		{"payload not JSON", append([]byte{formatVersion}, `{"id":"i","topic":"t","payload":"ew==","time":1}`...)},
		{"negative attempts", append([]byte{formatVersion}, `{"id":"i","topic":"t","payload":"MQ==","time":1,"attempts":-1}`...)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := decodeMessage(bucketOutbox, []byte{1, 2}, tt.data)
			ce, ok := err.(*CorruptError)
			if !ok || ce.Bucket != bucketOutbox || !bytes.Equal(ce.Key, []byte{1, 2}) {
				t.Fatalf("decode: %v, want a CorruptError naming the bucket and key", err)
			}
		})
	}
}
