//go:build chaos && linux

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/meshagent/meshagent/bus"
	"github.com/meshagent/meshagent/internal/smallfs"
	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/rpc"
)

// Bounds of TestChaosDiskFull: each data directory is a tmpfs of
// diskFullSize, filled and freed diskFullCycles times while producers send
// a message of diskFullSmall bytes every diskFullPace each. In the first
// cycle at most diskFullSends send-message commands of diskFullPayload
// bytes are tried (so that the store's free pages run out within a few),
// and diskFullProbes calls and publishes go each way between the agent on
// the full disk and a live one. A cycle waits at most diskFullWait for
// the refusals to start, keeps the disk full until each producer was
// refused diskFullRefusals more times (a few seconds: the store tries to
// write its reserve again every second, and the bus what it holds), and
// waits at most diskFullWait for the sends to resume.
const (
	diskFullSize     = "16m"
	diskFullCycles   = 4
	diskFullSmall    = 2 << 10
	diskFullPace     = 25 * time.Millisecond
	diskFullSends    = 40
	diskFullPayload  = 32 << 10
	diskFullProbes   = 10
	diskFullWait     = 30 * time.Second
	diskFullRefusals = 80
)

// TestChaosDiskFull (issue 23, disk full): a node's data directory and a
// relay's, each on a small tmpfs (as root: mount -t tmpfs), are filled to
// the last block and freed four times while producers keep sending, and
// each is restarted once while its disk is full. While
// full, a send that needs the store (send-message, sendMessage and
// mesh.sendMessage to an agent that is away, through the node;
// sendMessage to a topic on the relay's public bus) is refused with
// -32005 naming the cause before it is acknowledged, never success:true
// (a deposit in the relay's mailbox is refused too, and its sender's
// outbox keeps it);
// calls (mesh.call) and topics (mesh.publish, mesh.subscribe) between the
// agent on the full disk and a live one keep working both ways. Each time
// space returns, sends are accepted again by themselves, and in the end
// every message acknowledged (before, during, after) is delivered: to
// the away agent once it is back (also the notes a node queued for an
// agent whose mailbox is the relay); to the relay's subscriber, and into
// the relay's bus history. Nothing acknowledged is lost.
func TestChaosDiskFull(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("disk-full needs root: it mounts a small tmpfs for each data directory (mount -t tmpfs); CI runs make chaos as root")
	}
	t.Run("node", testDiskFullNode)
	t.Run("relay", testDiskFullRelay)
}

// echoCaps writes a capabilities file offering echo (built in) and note,
// which appends its params to got, one line each.
func echoCaps(t *testing.T, dir, got string) string {
	t.Helper()
	caps := filepath.Join(dir, "caps.json")
	writeFile(t, caps, `[{"name": "echo", "description": "returns its params", "handler": {"builtin": "echo"}},
		{"name": "note", "description": "keeps a note",
		 "handler": {"exec": ["sh", "-c", "tee -a '`+got+`' >/dev/null; echo >> '`+got+`'; echo '{}'"], "timeout": "10s"}}]`)
	return caps
}

// diskProducer sends one message every diskFullPace until stopped, and
// sorts the outcomes: acknowledged (by the id send returns), refused
// with -32005 saying "no space left on device" and "not accepted", or
// anything else (a failure of the scenario).
type diskProducer struct {
	name string
	send func(ctx context.Context, i int) (id string, err error)
	// elsewhere: its sends need no room on the disk that fills (a
	// sender whose node hands them to the relay's mailbox): never
	// refused, always acknowledged.
	elsewhere bool

	mu      sync.Mutex
	acked   []string
	refused int
	lastWhy string
	other   []string
	down    bool // the server restarts: a failed connection is no failure
	unavail int  // sends that found no server while it restarted
}

// restarting says whether the server is being restarted.
func (p *diskProducer) restarting(down bool) {
	p.mu.Lock()
	p.down = down
	p.mu.Unlock()
}

func (p *diskProducer) run(ctx context.Context, stop <-chan struct{}) {
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-time.After(diskFullPace):
		}
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		id, err := p.send(cctx, i)
		cancel()
		p.mu.Lock()
		switch {
		case err == nil:
			p.acked = append(p.acked, id)
		case rpcCode(err) == rpc.CodeServerBusy && strings.Contains(err.Error(), "no space left on device") && strings.Contains(err.Error(), "not accepted"):
			p.refused++
			p.lastWhy = err.Error()
		case p.down:
			p.unavail++
		default:
			if ctx.Err() == nil {
				p.other = append(p.other, fmt.Sprintf("%s %d: %v", p.name, i, err))
			}
		}
		p.mu.Unlock()
	}
}

// counts returns how many sends were acknowledged and refused so far.
func (p *diskProducer) counts() (acked, refused int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.acked), p.refused
}

// cycleDisk fills the disk through filler, waits until every producer
// had its sends refused, runs during (if any) while the disk is full,
// frees the disk and waits until every producer is acknowledged again.
func cycleDisk(t *testing.T, filler string, ps []*diskProducer, during func()) {
	t.Helper()
	smallfs.Fill(t, filler)
	base := make([]int, len(ps))
	for i, p := range ps {
		_, base[i] = p.counts()
	}
	if err := wait.Until(diskFullWait, func() error {
		for i, p := range ps {
			if _, r := p.counts(); r < base[i]+3 && !p.elsewhere {
				return fmt.Errorf("%s: %d sends refused since the disk filled", p.name, r-base[i])
			}
		}
		return nil
	}); err != nil {
		t.Fatalf("the full disk does not refuse sends: %v", err)
	}
	if during != nil {
		during()
	}
	// The disk stays full until every producer was refused
	// diskFullRefusals more times: across the store's attempts to write
	// its reserve again and the bus's to write what it holds.
	for i, p := range ps {
		_, base[i] = p.counts()
	}
	if err := wait.Until(diskFullWait, func() error {
		for i, p := range ps {
			if _, r := p.counts(); r < base[i]+diskFullRefusals && !p.elsewhere {
				return fmt.Errorf("%s: %d sends refused since the disk was full a while", p.name, r-base[i])
			}
		}
		return nil
	}); err != nil {
		t.Fatalf("the full disk does not keep refusing sends: %v", err)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	for i, p := range ps {
		base[i], _ = p.counts()
	}
	if err := wait.Until(diskFullWait, func() error {
		for i, p := range ps {
			if a, _ := p.counts(); a < base[i]+3 {
				return fmt.Errorf("%s: %d sends acknowledged since space returned", p.name, a-base[i])
			}
		}
		return nil
	}); err != nil {
		t.Fatalf("sends do not resume once space returned: %v", err)
	}
}

// diskCycles is what the fill/free cycles of a disk-full scenario need of
// the server whose data directory is on the disk that fills.
type diskCycles struct {
	server  string              // "node" or "relay", for messages
	command string              // the test's send command, for messages
	send    func(string) string // one test send of seq: "" when acknowledged, else the refusal
	seqEnd  string              // ends each seq send is given
	proc    func() *nodeProc    // the server now (restart replaces it)
	restart func()              // stops the server and starts it again on the same store
}

// diskCycled is what the cycles counted: the test's sends refused while
// the disk was full (the last refusal's text), the restarts, and the
// probes made while it was full.
type diskCycled struct {
	refused, restarted int
	lastWhy            string
	calls, topics      tally
}

// run fills and frees the disk through filler diskFullCycles times while
// producers send (cycleDisk), and fails the test if the server exits. While
// the disk is full in the first cycle it tries up to diskFullSends test
// sends (stopping once diskFullSends/2 were refused), each refusal having
// to name the full disk, at least one of them refused, and runs the probes
// p; in the second it restarts the server, the producers told that a
// failed connection is no failure meanwhile.
func (d diskCycles) run(t *testing.T, filler string, producers []*diskProducer, p *dfProbes) (r diskCycled) {
	t.Helper()
	for c := range diskFullCycles {
		var during func()
		if c == 0 {
			during = func() {
				ackedFull := 0
				for i := 0; i < diskFullSends && r.refused < diskFullSends/2; i++ {
					why := d.send(fmt.Sprintf("full-%d", i) + d.seqEnd)
					if why == "" {
						ackedFull++
						continue
					}
					r.refused++
					r.lastWhy = why
					if !strings.Contains(why, "no space left on device") || !strings.Contains(why, "not accepted") {
						t.Fatalf("%s on a full disk refused without saying why: %s", d.command, why)
					}
				}
				if r.refused == 0 {
					t.Fatalf("all %d sends were acknowledged on a full disk", ackedFull)
				}
				r.calls, r.topics = p.run(t)
			}
		}
		if c == 1 {
			during = func() {
				for _, pr := range producers {
					pr.restarting(true)
				}
				d.restart()
				r.restarted++
				for _, pr := range producers {
					pr.restarting(false)
				}
			}
		}
		cycleDisk(t, filler, producers, during)
		if proc := d.proc(); !alive(proc) {
			t.Fatalf("the %s on the full disk exited: %v\n%s", d.server, proc.waitErr, proc.stderr)
		}
	}
	return r
}

// runProducers starts ps and returns the function that stops them and
// waits for them, failing the test for any outcome other than an
// acknowledgement or a refusal of the full disk.
func runProducers(t *testing.T, ps []*diskProducer) func() {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, p := range ps {
		wg.Go(func() { p.run(ctx, stop) })
	}
	var once sync.Once
	halt := func() {
		once.Do(func() {
			close(stop)
			wg.Wait()
			cancel()
			for _, p := range ps {
				p.mu.Lock()
				if len(p.other) > 0 {
					t.Errorf("%d sends neither acknowledged nor refused for a full disk: %v", len(p.other), head(p.other, 5))
				}
				p.mu.Unlock()
			}
		})
	}
	t.Cleanup(halt)
	return halt
}

func testDiskFullNode(t *testing.T) {
	const scenario = "disk-full node"
	full := smallfs.Mount(t, diskFullSize)
	dir := t.TempDir()
	got := filepath.Join(dir, "received.jsonl")
	caps := echoCaps(t, dir, got)

	n := startNode(t, "full", "--data", filepath.Join(full, "n"), "--capabilities", caps)
	live := startNode(t, "live", "--data", filepath.Join(dir, "live"), "--capabilities", caps, "--bootstrap", n.started.Addrs[0])
	keyC := filepath.Join(dir, "c.key")
	var idC struct {
		AgentID string `json:"agentId"`
	}
	if err := json.Unmarshal([]byte(meshagent(t, "id", "--key", keyC, "--json").must(t, 0).stdout), &idC); err != nil {
		t.Fatal(err)
	}
	to := idC.AgentID
	p := newDFProbes(t, n.started.API, n.started.AgentID, live.started.API, live.started.AgentID)

	text := strings.Repeat("x", diskFullPayload)
	url := "ws://" + n.started.API + "/"
	var cliAcked []string
	// send sends one note to C, away, with send-message through the node.
	// It returns "" when acknowledged as queued, else the refusal.
	send := func(seq string) string {
		res := busCommand(t, url, "send-message", "--topic", "agent:"+to,
			"--payload", `{"type":"note","seq":"`+seq+`","text":"`+text+`"}`)
		if res.code == 0 {
			var sr bus.SendResult
			if err := json.Unmarshal([]byte(res.stdout), &sr); err != nil || !sr.Success || len(sr.Acks) != 1 || !sr.Acks[0].Queued {
				t.Fatalf("send-message %s exited 0 with %s (%v), want one queued ack", seq, res.stdout, err)
			}
			cliAcked = append(cliAcked, seq)
			return ""
		}
		if strings.Contains(res.stdout, `"success":true`) {
			t.Fatalf("send-message %s exited %d yet printed success: %s", seq, res.code, res.stdout)
		}
		return strings.TrimSpace(res.stderr)
	}
	for i := range 3 {
		if why := send(fmt.Sprintf("before-%d.", i)); why != "" {
			t.Fatalf("send-message before the disk filled: %s", why)
		}
	}
	p.warm(t)

	small := strings.Repeat("y", diskFullSmall)
	busProducer := &busSession{url: url, id: "producer"}
	defer busProducer.drop()
	apiProducer := &busSession{url: url, id: "api-producer"}
	defer apiProducer.drop()
	producers := []*diskProducer{
		{name: "sendMessage agent:<away>", send: func(ctx context.Context, i int) (string, error) {
			cl, err := busProducer.client(ctx)
			if err != nil {
				return "", err
			}
			seq := fmt.Sprintf("bus-%d.", i)
			var res bus.SendResult
			if err := cl.Call(ctx, bus.MethodSendMessage, map[string]any{"topic": "agent:" + to,
				"payload": map[string]any{"type": "note", "seq": seq, "text": small}}, &res); err != nil {
				return "", err
			}
			if !res.Success || len(res.Acks) != 1 || !res.Acks[0].Queued {
				return "", fmt.Errorf("answered %+v, want one queued ack", res)
			}
			return seq, nil
		}},
		{name: "mesh.sendMessage", send: func(ctx context.Context, i int) (string, error) {
			cl, err := apiProducer.client(ctx)
			if err != nil {
				return "", err
			}
			id := fmt.Sprintf("api-%d.", i)
			var res rpc.SendMessageResult
			if err := cl.Call(ctx, rpc.MethodMeshSendMessage, map[string]any{"agentId": to,
				"message": map[string]any{"message_id": id, "subject": "s", "body": small}}, &res); err != nil {
				return "", err
			}
			if !res.Queued {
				return "", fmt.Errorf("answered %+v, want queued", res)
			}
			return id, nil
		}},
	}
	halt := runProducers(t, producers)

	cy := diskCycles{server: "node", command: "send-message", send: send, seqEnd: ".",
		proc: func() *nodeProc { return n },
		// The operator restarts the node on the full disk: it stops
		// cleanly and starts again on the same store.
		restart: func() {
			n.stop(t, 30*time.Second)
			n = startNode(t, "full-again", "--data", filepath.Join(full, "n"), "--capabilities", caps, "--api", n.started.API)
		},
	}.run(t, filepath.Join(full, "filler"), producers, p)
	halt()
	for i := range 3 {
		if why := send(fmt.Sprintf("after-%d.", i)); why != "" {
			t.Fatalf("send-message after space returned: %s", why)
		}
	}

	// C comes back: every message acknowledged reaches it (notes through
	// its capability, direct messages through its default handler, which
	// logs each).
	c := startNode(t, "c", "--key", keyC, "--data", filepath.Join(dir, "c"), "--capabilities", caps, "--bootstrap", n.started.Addrs[0])
	seqRE := regexp.MustCompile(`"seq":"([a-z]+-[0-9]+\.)`)
	idRE := regexp.MustCompile(`msg=message .*message_id=(api-[0-9]+\.)`)
	acked := append([]string(nil), cliAcked...)
	for _, pr := range producers {
		acked = append(acked, pr.acked...)
	}
	missing := func() []string {
		data, _ := os.ReadFile(got)
		in := map[string]bool{}
		for _, m := range seqRE.FindAllStringSubmatch(string(data), -1) {
			in[m[1]] = true
		}
		for _, m := range idRE.FindAllStringSubmatch(c.stderr.String(), -1) {
			in[m[1]] = true
		}
		var out []string
		for _, seq := range acked {
			if !in[seq] {
				out = append(out, seq)
			}
		}
		return out
	}
	if err := wait.Until(90*time.Second, func() error {
		if m := missing(); len(m) > 0 {
			return fmt.Errorf("%d of %d acknowledged messages have not reached the agent: %v", len(m), len(acked), head(m, 20))
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
	lost := len(missing())
	for _, pr := range producers {
		cy.refused += pr.refused
	}
	figures(t, scenario, "%d fill/free cycles, restarted %d time(s) while full; %d sends refused while full, %d acknowledged, %d delivered, %d lost; calls ok %d/%d; topics ok %d/%d",
		diskFullCycles, cy.restarted, cy.refused, len(acked), len(acked)-lost, lost, cy.calls.ok, cy.calls.n, cy.topics.ok, cy.topics.n)
	t.Logf("send-message on a full disk: %s", cy.lastWhy)
	for _, pr := range producers {
		t.Logf("%s on a full disk: %s", pr.name, pr.lastWhy)
	}
	p.check(t, cy.calls, cy.topics)
}

func testDiskFullRelay(t *testing.T) {
	const scenario = "disk-full relay"
	full := smallfs.Mount(t, diskFullSize)
	dir := t.TempDir()
	caps := echoCaps(t, dir, filepath.Join(dir, "received.jsonl"))

	rl := startCommand(t, "relay", "full-relay", "--data", filepath.Join(full, "r"), "--ws", "127.0.0.1:0", "--capabilities", caps)
	live := startNode(t, "live", "--data", filepath.Join(dir, "live"), "--capabilities", caps, "--bootstrap", rl.started.Addrs[0])
	p := newDFProbes(t, rl.started.API, rl.started.AgentID, live.started.API, live.started.AgentID)
	url := "ws://" + rl.started.WS + "/"
	// The subscriber and the sender reconnect on their own when the relay
	// restarts.
	var subMu sync.Mutex
	got := map[string]bool{}
	sub := &busSession{url: url, id: "sub", topics: []string{"df:*"}, handler: func(_ context.Context, _ string, params json.RawMessage) (any, error) {
		var pp struct {
			Topic string `json:"topic"`
		}
		if err := json.Unmarshal(params, &pp); err != nil {
			return nil, err
		}
		subMu.Lock()
		got[pp.Topic] = true
		subMu.Unlock()
		return map[string]any{"processed": true}, nil
	}}
	subCtx, subCancel := context.WithCancel(context.Background())
	var subWG sync.WaitGroup
	defer subWG.Wait()
	defer subCancel()
	defer sub.drop()
	subWG.Go(func() {
		for subCtx.Err() == nil {
			cl, err := sub.client(subCtx)
			if err != nil {
				return
			}
			select {
			case <-cl.Done():
			case <-subCtx.Done():
			}
		}
	})
	subUp := func() *rpc.Client {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cl, err := sub.client(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}
	subUp()
	sender := &busSession{url: url, id: "sender"}
	defer sender.drop()

	var mu sync.Mutex
	var acked []string
	// sendOn sends df:<seq> with text on the relay's public bus through
	// cl: nil when acknowledged (success:true), else the error.
	sendOn := func(ctx context.Context, cl *rpc.Client, seq, text string) error {
		var res bus.SendResult
		if err := cl.Call(ctx, bus.MethodSendMessage, map[string]any{"topic": "df:" + seq,
			"payload": map[string]any{"type": "plaintext_message", "text": text}}, &res); err != nil {
			return err
		}
		if !res.Success {
			return fmt.Errorf("sendMessage df:%s answered %+v: neither success nor a refusal", seq, res)
		}
		mu.Lock()
		acked = append(acked, "df:"+seq)
		mu.Unlock()
		return nil
	}
	text := strings.Repeat("x", diskFullPayload)
	// send is sendOn by the sender, a test's send: "" when acknowledged,
	// else the refusal (anything but -32005 fails the test).
	send := func(seq string) string {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		cl, err := sender.client(ctx)
		if err != nil {
			t.Fatal(err)
		}
		err = sendOn(ctx, cl, seq, text)
		switch {
		case err == nil:
			return ""
		case rpcCode(err) != rpc.CodeServerBusy:
			t.Fatalf("sendMessage df:%s: %v (code %d), want success or -32005", seq, err, rpcCode(err))
		}
		return err.Error()
	}
	for i := range 3 {
		if why := send(fmt.Sprintf("before-%d", i)); why != "" {
			t.Fatalf("sendMessage before the disk filled: %s", why)
		}
	}
	p.warm(t)

	// B names the relay as its mailbox and goes away; node S keeps
	// sending it notes, each acknowledged once in S's outbox, which S
	// hands over to the relay's mailbox when the relay takes them.
	keyB := filepath.Join(dir, "b.key")
	bArgs := []string{"--key", keyB, "--data", filepath.Join(dir, "b"), "--mailbox", rl.started.Addrs[0], "--capabilities", caps}
	sNode := startNode(t, "s", "--data", filepath.Join(dir, "s"), "--bootstrap", rl.started.Addrs[0])
	b := startNode(t, "b", append(bArgs, "--bootstrap", sNode.started.Addrs[0])...)
	idB := b.started.AgentID
	wait.For(t, 30*time.Second, func() error {
		if !sNode.logged("msg=hello", "remote_peer="+idB) {
			return errors.New("S has no hello from B")
		}
		if !rl.logged("msg=hello", "remote_peer="+idB) {
			return errors.New("the relay has no hello from B")
		}
		return nil
	})
	b.signal(t, syscall.SIGKILL)
	<-b.exited
	sURL := "ws://" + sNode.started.API + "/"
	wait.For(t, 30*time.Second, func() error {
		// Until S sees B gone: a send while the dead connection lingers
		// is not queued.
		res := busCommand(t, sURL, "send-message", "--topic", "agent:"+idB, "--payload", `{"type":"note","seq":"mb-first."}`)
		if res.code != 0 || !strings.Contains(res.stdout, `"queued":true`) {
			return fmt.Errorf("send-message to B exit %d: %s %s", res.code, res.stdout, res.stderr)
		}
		return nil
	})

	small := strings.Repeat("y", diskFullSmall)
	producers := make([]*diskProducer, 2, 3)
	mbSession := &busSession{url: sURL, id: "mailbox-producer"}
	defer mbSession.drop()
	mbProducer := &diskProducer{name: "sendMessage agent:<away> through a node to the relay's mailbox", elsewhere: true, send: func(ctx context.Context, i int) (string, error) {
		cl, err := mbSession.client(ctx)
		if err != nil {
			return "", err
		}
		seq := fmt.Sprintf("mb-%d.", i)
		var res bus.SendResult
		if err := cl.Call(ctx, bus.MethodSendMessage, map[string]any{"topic": "agent:" + idB,
			"payload": map[string]any{"type": "note", "seq": seq, "text": small}}, &res); err != nil {
			return "", err
		}
		if !res.Success || len(res.Acks) != 1 || !res.Acks[0].Queued {
			return "", fmt.Errorf("answered %+v, want one queued ack", res)
		}
		return seq, nil
	}}
	for k := range producers {
		s := &busSession{url: url, id: fmt.Sprintf("producer-%d", k)}
		defer s.drop()
		producers[k] = &diskProducer{name: s.id, send: func(ctx context.Context, i int) (string, error) {
			cl, err := s.client(ctx)
			if err != nil {
				return "", err
			}
			seq := fmt.Sprintf("p%d-%d", k, i)
			return "df:" + seq, sendOn(ctx, cl, seq, small)
		}}
	}
	producers = append(producers, mbProducer)
	halt := runProducers(t, producers)

	cy := diskCycles{server: "relay", command: "sendMessage", send: send,
		proc: func() *nodeProc { return rl },
		// The operator restarts the relay on the full disk: it stops
		// cleanly and starts again on the same store, at the same
		// addresses (B names its libp2p address as its mailbox); its
		// clients reconnect.
		restart: func() {
			rl.stop(t, 30*time.Second)
			listen := rl.started.Addrs[0][:strings.Index(rl.started.Addrs[0], "/p2p/")]
			rl = startCommand(t, "relay", "full-relay-again", "--data", filepath.Join(full, "r"), "--ws", rl.started.WS, "--api", rl.started.API, "--listen", listen, "--capabilities", caps)
			subUp()
		},
	}.run(t, filepath.Join(full, "filler"), producers, p)
	halt()
	for i := range 3 {
		if why := send(fmt.Sprintf("after-%d", i)); why != "" {
			t.Fatalf("sendMessage after space returned: %s", why)
		}
	}

	// Every message acknowledged reached the subscriber, and is in the
	// relay's bus history (read on its local API, page by page).
	admin, err := rpc.Dial(context.Background(), "ws://"+rl.started.API+"/")
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	notDelivered := func() []string {
		subMu.Lock()
		defer subMu.Unlock()
		var out []string
		for _, topic := range acked {
			if !got[topic] {
				out = append(out, topic)
			}
		}
		return out
	}
	notInHistory := func() ([]string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		in := map[string]bool{}
		before := ""
		for {
			var page []bus.StoredMessage
			if err := admin.Call(ctx, bus.MethodBusHistory, bus.HistoryParams{Topic: "df:*", Limit: 500, Before: before}, &page); err != nil {
				return nil, err
			}
			for _, m := range page {
				in[m.Topic] = true
			}
			if len(page) < 500 {
				break
			}
			before = page[len(page)-1].ID
		}
		var out []string
		for _, topic := range acked {
			if !in[topic] {
				out = append(out, topic)
			}
		}
		return out, nil
	}
	if err := wait.Until(60*time.Second, func() error {
		if m := notDelivered(); len(m) > 0 {
			return fmt.Errorf("%d of %d acknowledged messages not delivered to the subscriber: %v", len(m), len(acked), head(m, 20))
		}
		m, err := notInHistory()
		if err != nil {
			return err
		}
		if len(m) > 0 {
			return fmt.Errorf("%d of %d acknowledged messages not in the relay's history: %v", len(m), len(acked), head(m, 20))
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
	missHist, err := notInHistory()
	if err != nil {
		t.Fatal(err)
	}
	lost := len(notDelivered())
	for _, pr := range producers {
		cy.refused += pr.refused
	}

	// B comes back: every note S acknowledged reaches it, from the
	// relay's mailbox or from S's outbox.
	startNode(t, "b-again", append(bArgs, "--bootstrap", sNode.started.Addrs[0])...)
	mbAcked := append([]string{"mb-first."}, mbProducer.acked...)
	seqRE := regexp.MustCompile(`"seq":"(mb-[a-z0-9]+\.)`)
	mbMissing := func() []string {
		data, _ := os.ReadFile(filepath.Join(dir, "received.jsonl"))
		in := map[string]bool{}
		for _, m := range seqRE.FindAllStringSubmatch(string(data), -1) {
			in[m[1]] = true
		}
		var out []string
		for _, seq := range mbAcked {
			if !in[seq] {
				out = append(out, seq)
			}
		}
		return out
	}
	if err := wait.Until(90*time.Second, func() error {
		if m := mbMissing(); len(m) > 0 {
			return fmt.Errorf("%d of %d notes S acknowledged have not reached B: %v", len(m), len(mbAcked), head(m, 20))
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
	mbLost := len(mbMissing())
	handed := strings.Count(sNode.stderr.String(), "message handed over to a mailbox")
	kept := strings.Count(sNode.stderr.String(), "message kept in the outbox: no mailbox took it")
	figures(t, scenario, "mailbox: %d notes acknowledged as queued by a sender, %d handed over to the relay's mailbox, %d hand-overs it did not take (kept in the sender's outbox), %d delivered, %d lost",
		len(mbAcked), handed, kept, len(mbAcked)-mbLost, mbLost)
	figures(t, scenario, "%d fill/free cycles, restarted %d time(s) while full; %d sends refused while full, %d acknowledged, %d delivered, %d in history, %d lost; calls ok %d/%d; topics ok %d/%d",
		diskFullCycles, cy.restarted, cy.refused, len(acked), len(acked)-lost, len(acked)-len(missHist), max(lost, len(missHist)), cy.calls.ok, cy.calls.n, cy.topics.ok, cy.topics.n)
	t.Logf("sendMessage on a full disk: %s", cy.lastWhy)
	p.check(t, cy.calls, cy.topics)
}

// alive reports whether p has not exited.
func alive(p *nodeProc) bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// tally counts dfProbes that worked out of those tried.
type tally struct{ ok, n int }

// dfProbes are calls and topic messages between two agents, each through
// its own local API: a (on the disk that fills) and b (live).
type dfProbes struct {
	a, b       *rpc.Client
	idA, idB   string
	mu         sync.Mutex
	got        map[string]bool // topic messages received, by text
	subscribed bool
}

func newDFProbes(t *testing.T, apiA, idA, apiB, idB string) *dfProbes {
	t.Helper()
	p := &dfProbes{idA: idA, idB: idB, got: map[string]bool{}}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, c := range []struct {
		api string
		cl  **rpc.Client
	}{{apiA, &p.a}, {apiB, &p.b}} {
		cl, err := rpc.Dial(ctx, "ws://"+c.api+"/")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cl.Close() })
		*c.cl = cl
	}
	handler := func(m protocol.TopicMessage) {
		var pl struct {
			Text string `json:"text"`
		}
		if json.Unmarshal(m.Payload, &pl) == nil {
			p.mu.Lock()
			p.got[pl.Text] = true
			p.mu.Unlock()
		}
	}
	if _, err := p.a.Subscribe(ctx, "dfa:*", handler); err != nil {
		t.Fatal(err)
	}
	if _, err := p.b.Subscribe(ctx, "dfb:*", handler); err != nil {
		t.Fatal(err)
	}
	return p
}

// call calls echo on to through cl, and reports whether it answered.
func (p *dfProbes) call(cl *rpc.Client, to, text string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	params := json.RawMessage(`{"text":"` + text + `"}`)
	resp, err := cl.MeshCall(ctx, protocol.CallRequest{To: to, Action: "echo", Params: params, Timeout: 15 * time.Second}, nil)
	if err != nil {
		return err
	}
	if resp.Status != protocol.StatusSuccess || string(resp.Result) != string(params) {
		return fmt.Errorf("echo answered %s %s", resp.Status, resp.Result)
	}
	return nil
}

// publish publishes text on topic through cl.
func (p *dfProbes) publish(cl *rpc.Client, topic, text string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := cl.Publish(ctx, topic, json.RawMessage(`{"text":"`+text+`"}`), nil, 5*time.Second)
	return err
}

func (p *dfProbes) received(text string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.got[text]
}

// warm waits until calls and topic messages go both ways.
func (p *dfProbes) warm(t *testing.T) {
	t.Helper()
	for _, dir := range []struct {
		cl     *rpc.Client
		to     string
		prefix string
	}{{p.a, p.idB, "dfb"}, {p.b, p.idA, "dfa"}} {
		wait.For(t, 60*time.Second, func() error { return p.call(dir.cl, dir.to, "warm") })
		i := 0
		wait.For(t, 60*time.Second, func() error {
			i++
			text := fmt.Sprintf("warm-%s-%d", dir.prefix, i)
			if err := p.publish(dir.cl, dir.prefix+":warm", text); err != nil {
				return err
			}
			if err := wait.Until(2*time.Second, func() error {
				if !p.received(text) {
					return errors.New("not received")
				}
				return nil
			}); err != nil {
				return fmt.Errorf("%s:warm not received yet", dir.prefix)
			}
			return nil
		})
	}
}

// run makes diskFullProbes calls and publishes each way and counts those
// that worked (a publish works when its subscriber receives it within
// 20 s).
func (p *dfProbes) run(t *testing.T) (calls, topics tally) {
	t.Helper()
	var texts []string
	for i := range diskFullProbes {
		for _, dir := range []struct {
			cl     *rpc.Client
			to     string
			prefix string
		}{{p.a, p.idB, "dfb"}, {p.b, p.idA, "dfa"}} {
			calls.n++
			if err := p.call(dir.cl, dir.to, fmt.Sprintf("full-%d", i)); err != nil {
				t.Logf("call to %s while full: %v", dir.to, err)
			} else {
				calls.ok++
			}
			text := fmt.Sprintf("full-%s-%d", dir.prefix, i)
			topics.n++
			if err := p.publish(dir.cl, dir.prefix+":full", text); err != nil {
				t.Logf("publish %s:full while full: %v", dir.prefix, err)
				continue
			}
			texts = append(texts, text)
		}
	}
	_ = wait.Until(20*time.Second, func() error {
		for _, text := range texts {
			if !p.received(text) {
				return errors.New("not all received")
			}
		}
		return nil
	})
	for _, text := range texts {
		if p.received(text) {
			topics.ok++
		}
	}
	return calls, topics
}

// check fails the test unless every call and topic message worked.
func (p *dfProbes) check(t *testing.T, calls, topics tally) {
	t.Helper()
	if calls.ok != calls.n {
		t.Errorf("calls while the disk was full: %d of %d answered", calls.ok, calls.n)
	}
	if topics.ok != topics.n {
		t.Errorf("topic messages while the disk was full: %d of %d received", topics.ok, topics.n)
	}
}

// rpcCode is err's JSON-RPC error code, 0 when it has none.
func rpcCode(err error) int {
	var re *rpc.Error
	if errors.As(err, &re) {
		return re.Code
	}
	return 0
}
