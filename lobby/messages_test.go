package lobby_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/meshagent/meshagent/lobby"
	"github.com/meshagent/meshagent/protocol"
)

func TestParseMessage(t *testing.T) {
	for _, tc := range []struct{ frame, want, err string }{
		{`{"message_type":"REGISTER","sender_id":"a","auth_token":null}`,
			`{"sender_id":"a","receiver_id":"","message_type":"REGISTER","payload":{}}`, ""},
		{`{"sender_id":"a","receiver_id":"b","message_type":"REQUEST","payload":{"capability_name":"x"},"conversation_id":"c","auth_token":"t","timestamp":1}`,
			`{"sender_id":"a","receiver_id":"b","message_type":"REQUEST","payload":{"capability_name":"x"},"conversation_id":"c","auth_token":"t"}`, ""},
		{`{"message_type":"X","payload":null,"conversation_id":null}`, `{"sender_id":"","receiver_id":"","message_type":"X","payload":{}}`, ""},
		{`{"message_type":"X","auth_token":7}`, "", `"auth_token" must be a string`},
		{`{"message_type":""}`, "", `"message_type" is required`},
		{`{"message_type":"X","payload":"{}"}`, "", `"payload" must be an object`},
		{`{"message_type":"X","payload":{"a":1,"a":1}}`, "", `duplicate member "payload.a"`},
		{`{"message_type":"X","message_type":"X"}`, "", `duplicate member "message_type"`},
		{`"REGISTER"`, "", "not a JSON object"},
	} {
		m, err := lobby.ParseMessage([]byte(tc.frame))
		if tc.err != "" {
			if protocol.CodeOf(err) != protocol.CodeInvalidMessage || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: error %v, want INVALID_MESSAGE mentioning %q", tc.frame, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.frame, err)
			continue
		}
		b, _ := json.Marshal(m)
		if string(b) != tc.want {
			t.Errorf("%s: decoded as\n\t%s\nwant\n\t%s", tc.frame, b, tc.want)
		}
	}
	// On error the fields read so far are kept for the ERROR reply.
	m, err := lobby.ParseMessage([]byte(`{"message_type":"REQUEST","conversation_id":"c7","payload":[]}`))
	if err == nil || m == nil || m.MessageType != lobby.TypeRequest || m.ConversationID != "c7" {
		t.Fatalf("partial message %+v %v", m, err)
	}
	var pe *protocol.Error
	if !errors.As(err, &pe) {
		t.Fatalf("%T is not a *protocol.Error", err)
	}
}

func TestMalformedMessages(t *testing.T) {
	tl := newTestLobby(t)
	a := dialLobby(t, tl.url, "agent_a")
	for _, tc := range []struct{ frame, want string }{
		{`not json`, "not JSON"},
		{"\xff\xfe", "UTF-8"},
		{`[1,2]`, "not a JSON object"},
		{`{"message_type":"REGISTER"} {}`, "not JSON"},
		{`{"sender_id":"a","sender_id":"b","message_type":"REGISTER"}`, `duplicate member "sender_id"`},
		{`{"sender_id":"agent_a","message_type":"REGISTER","payload":{"capabilities":[],"capabilities":[{"name":"x"}]}}`, `malformed message: duplicate member "payload.capabilities"`},
		{`{"sender_id":"agent_a"}`, `"message_type" is required`},
		{`{"Message_Type":"REGISTER","sender_id":"agent_a"}`, `"message_type" is required`},
		{`{"sender_id":5,"message_type":"REGISTER"}`, `"sender_id" must be a string`},
		{`{"sender_id":"agent_a","message_type":"REGISTER","payload":[]}`, `"payload" must be an object`},
		{`{"sender_id":"` + strings.Repeat("x", 300) + `","message_type":"REGISTER"}`, "longer than 256"},
		{`{"sender_id":"agent_a","message_type":"HELLO"}`, `unknown message_type "HELLO"`},
		{`{"sender_id":"agent_a","message_type":"REGISTER_ACK"}`, "sent by the lobby"},
		{`{"sender_id":"agent_a","message_type":"SERVICES_AVAILABLE"}`, "sent by the lobby"},
	} {
		a.sendRaw(tc.frame)
		a.expectError(protocol.CodeInvalidMessage, tc.want)
	}
	// A malformed ERROR is dropped, not answered.
	a.sendRaw(`{"message_type":"ERROR","payload":7}`)
	// Unknown top-level members are tolerated (and dropped); the
	// connection still works.
	a.sendRaw(`{"sender_id":"agent_a","receiver_id":"global_lobby","message_type":"REGISTER","payload":{"capabilities":[]},"auth_token":null,"timestamp":"2025-02-14T12:00:00Z"}`)
	a.expect(lobby.TypeRegisterAck)
	a.quiet()
}
