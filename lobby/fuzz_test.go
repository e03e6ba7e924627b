package lobby

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshagent/meshagent/protocol"
)

// FuzzParseMessage feeds arbitrary frames to the lobby's decoder. It
// must never panic; an error is an INVALID_MESSAGE *protocol.Error; a
// message it accepts has a type and an object payload, and encodes to a
// frame that decodes to the same message.
func FuzzParseMessage(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.txt"))
	for _, file := range files {
		src, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		for line := range strings.SplitSeq(string(src), "\n") {
			if _, frame, ok := strings.Cut(line, " --> "); ok {
				f.Add([]byte(frame))
			}
		}
	}
	f.Add([]byte("\xff\xfe"))
	f.Add([]byte(`{"message_type":"X","payload":{"a":1,"a":2}}`))
	f.Add([]byte(`{"message_type":"X","Message_Type":"Y","payload":null,"extra":[1,{"b":2}]}`))
	f.Fuzz(func(t *testing.T, frame []byte) {
		m, err := ParseMessage(frame)
		if err != nil {
			var pe *protocol.Error
			if !errors.As(err, &pe) || pe.Code != protocol.CodeInvalidMessage {
				t.Fatalf("error %v is not INVALID_MESSAGE", err)
			}
			return
		}
		if m.MessageType == "" || len(m.Payload) == 0 || m.Payload[0] != '{' || !json.Valid(m.Payload) {
			t.Fatalf("accepted %+v", m)
		}
		b, err := encodeMessage(m)
		if err != nil {
			t.Fatal(err)
		}
		m2, err := ParseMessage(b)
		if err != nil {
			t.Fatalf("re-decoding %s: %v", b, err)
		}
		var c1, c2 bytes.Buffer
		if json.Compact(&c1, m.Payload) != nil || json.Compact(&c2, m2.Payload) != nil || c1.String() != c2.String() {
			t.Fatalf("payload changed: %s -> %s", m.Payload, m2.Payload)
		}
		m.Payload, m2.Payload = nil, nil
		if a, b := *m, *m2; a.SenderID != b.SenderID || a.ReceiverID != b.ReceiverID || a.MessageType != b.MessageType ||
			a.ConversationID != b.ConversationID || a.AuthToken != b.AuthToken {
			t.Fatalf("round trip changed %+v into %+v", m, m2)
		}
	})
}
