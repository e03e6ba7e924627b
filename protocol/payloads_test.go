package protocol

import (
	"strings"
	"testing"
)

// TestHelloMailboxes: the optional mailbox list travels in hello, absent
// when empty (so hellos without one keep their bytes), decoded strictly
// and bounded.
func TestHelloMailboxes(t *testing.T) {
	plain, err := MarshalCanonical(&Hello{Version: HelloVersion})
	if err != nil || strings.Contains(string(plain), "mailboxes") {
		t.Fatalf("a hello without mailboxes: %s %v", plain, err)
	}
	addr := "/ip4/127.0.0.1/tcp/4001/p2p/12D3KooWQYhTNQdmr3ArTeUHRYzFg94BKyTkoWBDWez9kSCVe2Xo"
	b, err := MarshalCanonical(&Hello{Version: HelloVersion, Mailboxes: []string{addr}})
	if err != nil {
		t.Fatal(err)
	}
	var h Hello
	if err := DecodePayload(b, "hello payload", &h); err != nil || len(h.Mailboxes) != 1 || h.Mailboxes[0] != addr || h.CheckMailboxes() != nil {
		t.Fatalf("decoded %+v %v", h, err)
	}
	if err := DecodePayload([]byte(`{"mailboxes":"`+addr+`","version":"0.1"}`), "hello payload", &h); err == nil {
		t.Fatal("a mailbox list that is a string was accepted")
	}
	for name, hm := range map[string]Hello{
		"too many": {Mailboxes: []string{addr, addr, addr, addr, addr}},
		"too long": {Mailboxes: []string{strings.Repeat("a", MaxMailboxAddrLen+1)}},
		"empty":    {Mailboxes: []string{""}},
	} {
		if err := hm.CheckMailboxes(); CodeOf(err) != CodeInvalidMessage {
			t.Errorf("%s: %v, want INVALID_MESSAGE", name, err)
		}
	}
}

// TestTaskStateCheck: each of seed 003's states passes, exactly as
// written; anything else is refused with the list of states.
func TestTaskStateCheck(t *testing.T) {
	for _, s := range []TaskState{TaskPending, TaskValidating, TaskApproved, TaskRejected,
		TaskEscalated, TaskCompleted, TaskFailed, TaskCancelled} {
		if err := s.Check(); err != nil {
			t.Errorf("%s: %v", s, err)
		}
	}
	for _, s := range []TaskState{"", "completed", "DONE", " FAILED", "CANCELED"} {
		err := s.Check()
		if err == nil || !strings.Contains(err.Error(), "one of PENDING, VALIDATING, APPROVED, REJECTED, ESCALATED, COMPLETED, FAILED, CANCELLED") {
			t.Errorf("%q: %v, want refused with the states", s, err)
		}
	}
}
