package mailbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"

	"github.com/meshagent/meshagent/internal/p2ptest"
	"github.com/meshagent/meshagent/mailbox"
	"github.com/meshagent/meshagent/protocol"
)

// TestDepositUnanswered: a deposit the relay read but did not answer (it
// died, or its answer was lost) may be in the mailbox, and says so with
// ErrUnanswered; one that never reached a relay, or that a relay
// answered, does not.
func TestDepositUnanswered(t *testing.T) {
	fake := p2ptest.Host(t)
	answer := map[string][]byte{
		"no answer": nil,
		"garbled":   []byte("{not json"),
		"refused":   []byte(`{"status":"refused","message":"no"}`),
	}
	var mode string
	fake.SetStreamHandler(protocol.MailboxProtocol, func(s network.Stream) {
		defer s.Close()
		_, _ = io.Copy(io.Discard, s) // the whole request, then the answer
		if a := answer[mode]; a != nil {
			_, _ = s.Write(protocol.AppendFrame(nil, a))
			return
		}
		_ = s.Reset()
	})
	h, c := stranger(t, fake)
	env := message(t, h, fake.ID(), "m1")
	for _, tc := range []struct {
		mode        string
		unanswered  bool
		alsoMatches error
	}{
		{"no answer", true, mailbox.ErrFailed},
		{"garbled", true, mailbox.ErrFailed},
		{"refused", false, mailbox.ErrRefused},
	} {
		mode = tc.mode
		err := c.Deposit(ctx(t), fake.ID(), fake.ID(), env)
		if errors.Is(err, mailbox.ErrUnanswered) != tc.unanswered || !errors.Is(err, tc.alsoMatches) {
			t.Errorf("%s: %v, want ErrUnanswered %v and %v", tc.mode, err, tc.unanswered, tc.alsoMatches)
		}
	}

	// A relay that is down never saw the deposit.
	gone := p2ptest.Host(t)
	_, gc := stranger(t, gone)
	if err := gone.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gc.Deposit(ctx(t), gone.ID(), gone.ID(), env); !errors.Is(err, mailbox.ErrFailed) || errors.Is(err, mailbox.ErrUnanswered) {
		t.Errorf("a relay that is down: %v, want ErrFailed and not ErrUnanswered", err)
	}
}

// FuzzDepositAnswer: whatever a relay answers a deposit with, the client
// neither panics nor hangs, reports success only for an answer whose
// status is "ok", and reports any failure as one of the errors a sender
// branches on (ErrFull, ErrRefused, ErrFailed), ErrUnanswered only with
// ErrFailed. The relay is a host on loopback that reads the deposit and
// answers with the fuzzed bytes as its frame: the client's whole path.
func FuzzDepositAnswer(f *testing.F) {
	relay := p2ptest.Host(f)
	var answer atomic.Pointer[[]byte]
	relay.SetStreamHandler(protocol.MailboxProtocol, func(s network.Stream) {
		defer s.Close()
		_, _ = io.Copy(io.Discard, s)
		_, _ = s.Write(protocol.AppendFrame(nil, *answer.Load()))
	})
	h := p2ptest.Host(f)
	h.Peerstore().AddAddrs(relay.ID(), relay.Addrs(), time.Hour)
	c := &mailbox.Client{Host: h, IOTimeout: 5 * time.Second}
	env := message(f, h, relay.ID(), "m1")
	for _, s := range []string{`{"status":"ok"}`, `{"status":"full","message":"no room"}`, `{"status":"refused","message":"no"}`,
		`{"status":"error","message":"disk"}`, `{"status":7}`, `{"status":"ok","items":[{}]}`, `{"status":"ok","status":"full"}`, `[]`, ``} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		answer.Store(&data)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err := c.Deposit(ctx, relay.ID(), relay.ID(), env)
		var st struct {
			Status string `json:"status"`
		}
		if err == nil {
			if json.Unmarshal(data, &st) != nil || st.Status != mailbox.StatusOK {
				t.Fatalf("answer %q taken as a deposit", data)
			}
			return
		}
		full, refused, failed := errors.Is(err, mailbox.ErrFull), errors.Is(err, mailbox.ErrRefused), errors.Is(err, mailbox.ErrFailed)
		if !full && !refused && !failed {
			t.Fatalf("answer %q: %v matches none of ErrFull, ErrRefused, ErrFailed", data, err)
		}
		if errors.Is(err, mailbox.ErrUnanswered) && !failed {
			t.Fatalf("answer %q: %v is unanswered without ErrFailed", data, err)
		}
	})
}
