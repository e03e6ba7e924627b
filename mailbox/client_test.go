package mailbox_test

import (
	"errors"
	"io"
	"testing"

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
