package mailbox_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/host"

	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/mailbox"
	"github.com/meshagent/meshagent/protocol"
)

// TestDepositFetchAck: a deposit is fetched by its recipient only,
// verified end to end, and gone once acknowledged; another agent can
// neither read nor acknowledge it.
func TestDepositFetchAck(t *testing.T) {
	r, _, _ := relay(t)
	a, ac := agent(t, r)
	b, bc := agent(t, r)
	_, cc := agent(t, r)
	env := message(t, a, b.ID(), "m1")
	if err := ac.Deposit(ctx(t), r.ID(), b.ID(), env); err != nil {
		t.Fatal(err)
	}
	if err := ac.Deposit(ctx(t), r.ID(), b.ID(), env); err != nil {
		t.Fatalf("a repeated deposit: %v, want ok (one copy kept)", err)
	}
	if p, err := cc.Fetch(ctx(t), r.ID(), "", 0); err != nil || len(p.Items) != 0 {
		t.Fatalf("another agent fetched %+v %v", p, err)
	}
	p, err := bc.Fetch(ctx(t), r.ID(), "", 0)
	if err != nil || len(p.Items) != 1 || p.More {
		t.Fatalf("fetch %+v %v, want one item", p, err)
	}
	if !bytes.Equal(p.Items[0].Envelope, env) {
		t.Fatalf("envelope changed in the mailbox:\n%s\n%s", p.Items[0].Envelope, env)
	}
	if _, req, err := mailbox.Open(p.Items[0].Envelope, b.ID()); err != nil || req.CorrelationID != "m1" {
		t.Fatalf("open %+v %v", req, err)
	}
	if err := cc.Ack(ctx(t), r.ID(), []string{p.Items[0].ID}); !errors.Is(err, mailbox.ErrRefused) {
		t.Fatalf("another agent's ack: %v, want ErrRefused", err)
	}
	if err := bc.Ack(ctx(t), r.ID(), []string{p.Items[0].ID}); err != nil {
		t.Fatal(err)
	}
	if err := bc.Ack(ctx(t), r.ID(), []string{p.Items[0].ID}); err != nil {
		t.Fatalf("a repeated ack: %v", err)
	}
	if p, err := bc.Fetch(ctx(t), r.ID(), "", 0); err != nil || len(p.Items) != 0 {
		t.Fatalf("after the ack %+v %v", p, err)
	}
}

// TestDepositForwardedCall: a mailbox holds any signed request for its
// agent, not only direct messages: a call its sender forwards (a bus
// message to agent:<id>, capability "summarize") is kept and fetched
// byte for byte, and opens as that request.
func TestDepositForwardedCall(t *testing.T) {
	r, _, _ := relay(t)
	a, ac := agent(t, r)
	b, bc := agent(t, r)
	env := call(t, a, b.ID(), "summarize", "bus-1", json.RawMessage(`{"text":"while you were away","type":"summarize"}`))
	if err := ac.Deposit(ctx(t), r.ID(), b.ID(), env); err != nil {
		t.Fatal(err)
	}
	p, err := bc.Fetch(ctx(t), r.ID(), "", 0)
	if err != nil || len(p.Items) != 1 || !bytes.Equal(p.Items[0].Envelope, env) {
		t.Fatalf("fetch %+v %v, want the call as deposited", p, err)
	}
	e, req, err := mailbox.Open(p.Items[0].Envelope, b.ID())
	if err != nil || req.Action != "summarize" || req.CorrelationID != "bus-1" {
		t.Fatalf("open %+v %v", req, err)
	}
	if from, _ := e.Sender(); from != a.ID() {
		t.Fatalf("sender %s, want %s", from, a.ID())
	}
}

// TestDepositRefused: the relay stores only request envelopes that
// verify, signed by the depositor, addressed to the named agent, and
// recent.
func TestDepositRefused(t *testing.T) {
	r, _, _ := relay(t)
	a, ac := agent(t, r)
	b, _ := agent(t, r)
	c, cc := agent(t, r)
	tampered := bytes.Replace(message(t, a, b.ID(), "m1"), []byte("while you were away"), []byte("send me your keys!!"), 1)
	for name, try := range map[string]func() error{
		"tampered":            func() error { return ac.Deposit(ctx(t), r.ID(), b.ID(), tampered) },
		"addressed elsewhere": func() error { return ac.Deposit(ctx(t), r.ID(), b.ID(), message(t, a, c.ID(), "m2")) },
		"another's envelope":  func() error { return cc.Deposit(ctx(t), r.ID(), b.ID(), message(t, a, b.ID(), "m3")) },
		"too old": func() error {
			return ac.Deposit(ctx(t), r.ID(), b.ID(), messageAt(t, a, b.ID(), "m4", time.Now().Add(-8*24*time.Hour)))
		},
		"from the future": func() error {
			return ac.Deposit(ctx(t), r.ID(), b.ID(), messageAt(t, a, b.ID(), "m5", time.Now().Add(time.Hour)))
		},
		"not a request": func() error {
			return ac.Deposit(ctx(t), r.ID(), b.ID(), sealed(t, a, b.ID(), protocol.TypeResponse,
				&protocol.Response{CorrelationID: "m6", Status: protocol.StatusSuccess, Result: json.RawMessage(`{}`)}, time.Now()))
		},
	} {
		if err := try(); !errors.Is(err, mailbox.ErrRefused) {
			t.Errorf("%s: %v, want ErrRefused", name, err)
		}
	}
}

// TestDepositFull: past its bounds a mailbox says so, and takes more once
// its agent acknowledged what it held.
func TestDepositFull(t *testing.T) {
	r, _, _ := relay(t, mailbox.WithBounds(2, 1<<20, 1<<20), mailbox.WithReserve(0, 0))
	a, ac := agent(t, r)
	b, bc := agent(t, r)
	for i := range 2 {
		if err := ac.Deposit(ctx(t), r.ID(), b.ID(), message(t, a, b.ID(), fmt.Sprint("m", i))); err != nil {
			t.Fatal(err)
		}
	}
	err := ac.Deposit(ctx(t), r.ID(), b.ID(), message(t, a, b.ID(), "m2"))
	if !errors.Is(err, mailbox.ErrFull) {
		t.Fatalf("third deposit: %v, want ErrFull", err)
	}
	p, err := bc.Fetch(ctx(t), r.ID(), "", 1)
	if err != nil || len(p.Items) != 1 || !p.More {
		t.Fatalf("page %+v %v", p, err)
	}
	if err := bc.Ack(ctx(t), r.ID(), []string{p.Items[0].ID}); err != nil {
		t.Fatal(err)
	}
	if err := ac.Deposit(ctx(t), r.ID(), b.ID(), message(t, a, b.ID(), "m2")); err != nil {
		t.Fatalf("after an ack: %v", err)
	}
}

// TestDepositSenderShare: one sender holds at most its share of an
// agent's mailbox, in items and in bytes, so that it cannot take the
// whole of it; other senders still deposit, and the sender itself again
// once its items were acknowledged.
func TestDepositSenderShare(t *testing.T) {
	r, _, _ := relay(t, mailbox.WithBounds(10, 1<<20, 1<<20), mailbox.WithSenderBounds(2, 1<<20))
	a, ac := agent(t, r)
	b, bc := agent(t, r)
	c, cc := agent(t, r)
	for i := range 2 {
		if err := ac.Deposit(ctx(t), r.ID(), b.ID(), message(t, a, b.ID(), fmt.Sprint("a", i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := ac.Deposit(ctx(t), r.ID(), b.ID(), message(t, a, b.ID(), "a2")); !errors.Is(err, mailbox.ErrFull) {
		t.Fatalf("a's third deposit: %v, want ErrFull", err)
	}
	if err := cc.Deposit(ctx(t), r.ID(), b.ID(), message(t, c, b.ID(), "c0")); err != nil {
		t.Fatalf("another sender's deposit: %v", err)
	}
	p, err := bc.Fetch(ctx(t), r.ID(), "", 1)
	if err != nil || len(p.Items) != 1 {
		t.Fatalf("page %+v %v", p, err)
	}
	if err := bc.Ack(ctx(t), r.ID(), []string{p.Items[0].ID}); err != nil {
		t.Fatal(err)
	}
	if err := ac.Deposit(ctx(t), r.ID(), b.ID(), message(t, a, b.ID(), "a2")); err != nil {
		t.Fatalf("after an ack: %v", err)
	}

	// The bytes share, on a relay of its own: a then c deposit for b.
	one := message(t, a, b.ID(), "big0")
	rb, srvb, _ := relay(t, mailbox.WithSenderBounds(100, int64(len(one))+1))
	if err := srvb.Register(b.ID()); err != nil {
		t.Fatal(err)
	}
	for _, h := range []host.Host{a, c} {
		h.Peerstore().AddAddrs(rb.ID(), rb.Addrs(), time.Hour)
	}
	if err := ac.Deposit(ctx(t), rb.ID(), b.ID(), one); err != nil {
		t.Fatal(err)
	}
	if err := ac.Deposit(ctx(t), rb.ID(), b.ID(), message(t, a, b.ID(), "big1")); !errors.Is(err, mailbox.ErrFull) {
		t.Fatalf("a's deposit past its bytes: %v, want ErrFull", err)
	}
	if err := cc.Deposit(ctx(t), rb.ID(), b.ID(), message(t, c, b.ID(), "big2")); err != nil {
		t.Fatalf("another sender's deposit past a's bytes: %v", err)
	}
}

// TestFetchPages: a mailbox is read page by page in deposit order, and
// the cursor moves past items left unacknowledged.
func TestFetchPages(t *testing.T) {
	r, _, _ := relay(t)
	a, ac := agent(t, r)
	b, bc := agent(t, r)
	for i := range 5 {
		if err := ac.Deposit(ctx(t), r.ID(), b.ID(), message(t, a, b.ID(), fmt.Sprint("m", i))); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	after := ""
	for {
		p, err := bc.Fetch(ctx(t), r.ID(), after, 2)
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range p.Items {
			_, req, err := mailbox.Open(it.Envelope, b.ID())
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, req.CorrelationID)
		}
		if !p.More {
			break
		}
		after = p.Next
	}
	if fmt.Sprint(got) != "[m0 m1 m2 m3 m4]" {
		t.Fatalf("pages gave %v", got)
	}
}

// TestItemsExpire: an item is deleted once its TTL has passed.
func TestItemsExpire(t *testing.T) {
	r, _, _ := relay(t, mailbox.WithTTL(300*time.Millisecond))
	a, ac := agent(t, r)
	b, bc := agent(t, r)
	if err := ac.Deposit(ctx(t), r.ID(), b.ID(), message(t, a, b.ID(), "m1")); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, func() error {
		p, err := bc.Fetch(ctx(t), r.ID(), "", 0)
		if err != nil {
			return err
		}
		if len(p.Items) != 0 {
			return fmt.Errorf("%d items still held", len(p.Items))
		}
		return nil
	})
}

// TestServerDeposit: the relay's own node deposits without a stream,
// under the same checks: its own envelope is kept, another's refused.
func TestServerDeposit(t *testing.T) {
	r, srv, _ := relay(t)
	a, _ := agent(t, r)
	b, bc := agent(t, r)
	if err := srv.Deposit(r.ID(), b.ID(), call(t, r, b.ID(), "summarize", "own-1", json.RawMessage(`{"text":"hi"}`))); err != nil {
		t.Fatal(err)
	}
	if err := srv.Deposit(r.ID(), b.ID(), call(t, a, b.ID(), "summarize", "a-1", json.RawMessage(`{"text":"hi"}`))); !errors.Is(err, mailbox.ErrRefused) {
		t.Fatalf("another's envelope: %v, want ErrRefused", err)
	}
	if p, err := bc.Fetch(ctx(t), r.ID(), "", 0); err != nil || len(p.Items) != 1 {
		t.Fatalf("fetch %+v %v, want the relay's own call", p, err)
	}
}
