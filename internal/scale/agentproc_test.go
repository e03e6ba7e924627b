package scale

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/meshagent/meshagent/internal/meshtest"
)

// TestScaleAgent is one agent of a -scale.procs run: the harness starts
// the test binary again with agentEnv set, and the child builds the one
// agent it names as startMesh or startRaw builds theirs, then serves the
// control protocol on its stdin and stdout until a close or the end of
// its stdin (so a harness that dies leaves no agent behind).
func TestScaleAgent(t *testing.T) {
	env := os.Getenv(agentEnv)
	if env == "" {
		t.Skip("an agent of a -scale.procs run; the harness starts it")
	}
	var spec agentSpec
	if err := decodeStrict([]byte(env), &spec); err != nil {
		t.Fatal(err)
	}
	out, err := protocolOut()
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	s := &agentServer{rep: newGossipReporter(), kt: newKindTracer(), out: bufio.NewWriter(out)}
	switch spec.Kind {
	case KindMesh:
		a, err := newMeshAgent(t, spec.Index, nil, spec.Boot, spec.Provider, spec.Join, s.rep, s.kt)
		s.a = a
		if err != nil {
			s.joinErr = err.Error()
		}
	case KindRaw:
		s.a = newRawAgent(t, spec.Index, nil, spec.Boot, spec.Provider, time.Duration(spec.ProvideBoundMs)*time.Millisecond, s.rep, s.kt)
	default:
		t.Fatalf("%s: kind %q is neither %s nor %s", agentEnv, spec.Kind, KindMesh, KindRaw)
	}
	if err := s.serve(os.Stdin); err != nil {
		t.Fatal(err)
	}
}

// protocolOut returns the child's stdout for the protocol alone and
// points file descriptor 1 at stderr, so that what the test binary
// itself prints (PASS, a failure's log) cannot land between two replies.
func protocolOut() (*os.File, error) {
	fd, err := unix.Dup(1)
	if err != nil {
		return nil, fmt.Errorf("scale: agent: dup stdout: %w", err)
	}
	if err := unix.Dup2(2, 1); err != nil {
		return nil, fmt.Errorf("scale: agent: stdout to stderr: %w", err)
	}
	return os.NewFile(uintptr(fd), "protocol"), nil
}

// agentServer answers the harness for one agent.
type agentServer struct {
	a       agent
	rep     *gossipReporter
	kt      *kindTracer
	joinErr string

	mu  sync.Mutex // out, one line at a time
	out *bufio.Writer
}

// serve answers requests from in, each in a goroutine of its own (finds
// run concurrently), until a close or the end of in, and waits for the
// answers in flight.
func (s *agentServer) serve(in io.Reader) error {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		req, err := decodeRequest(sc.Bytes())
		if err != nil {
			return err
		}
		if req.Op == opClose {
			return s.write(reply{ID: req.ID})
		}
		wg.Go(func() { _ = s.write(s.handle(ctx, req)) })
	}
	return sc.Err()
}

func (s *agentServer) write(r reply) error {
	line, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("scale: agent: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, _ = s.out.Write(line)
	_ = s.out.WriteByte('\n')
	if err := s.out.Flush(); err != nil {
		return fmt.Errorf("scale: agent: %w", err)
	}
	return nil
}

func (s *agentServer) handle(ctx context.Context, req request) reply {
	r := reply{ID: req.ID}
	bound := time.Duration(req.TimeoutMs) * time.Millisecond
	if bound <= 0 {
		bound = attemptBound
	}
	var err error
	switch req.Op {
	case opAddrs:
		info := s.a.info()
		r.Info, r.AgentID, r.JoinErr = &info, s.a.id(), s.joinErr
	case opFind:
		fctx, cancel := context.WithTimeout(ctx, bound)
		r.Found, r.Queried, err = findCounted(fctx, s.a, req.Want)
		cancel()
	case opSubscribe:
		err = s.a.subscribe(func(data []byte, at time.Time) {
			_ = s.write(reply{Op: opMsg, Payload: data, AtNs: at.UnixNano()})
		})
	case opPublish:
		pctx, cancel := context.WithTimeout(ctx, bound)
		err = s.a.publish(pctx, req.Payload)
		cancel()
	case opStats:
		r.Stats = s.stats(req)
	}
	if err != nil {
		r.Err = err.Error()
	}
	return r
}

// stats reads the CPU first, so that the collection mem asks for is not
// in it.
func (s *agentServer) stats(req request) *agentStats {
	st := &agentStats{CPUNs: int64(cpuTime()), WallNs: time.Now().UnixNano()}
	st.RPCs, st.Bytes = s.rep.sent()
	if req.Take {
		st.Kinds = s.kt.take()
	}
	if req.Mem {
		st.HeapBytes, st.RSSBytes = heapAndStacks(), rssBytes()
	}
	return st
}

// TestAgentProcess starts raw agents in processes of their own: one
// answers addrs and stats with its own figures, then exits when sent a
// line the protocol refuses (and the harness says so rather than wait);
// another exits when its stdin ends, as when the harness dies.
func TestAgentProcess(t *testing.T) {
	k, err := startChild(agentSpec{Kind: KindRaw, Index: 0})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.stop)
	ctx := meshtest.Context(t, 30*time.Second)
	r, err := k.call(ctx, request{Op: opAddrs})
	if err != nil {
		t.Fatalf("addrs: %v; stderr:\n%s", err, k.stderr.String())
	}
	if want := meshtest.ID(t, 5000); r.Info == nil || r.Info.ID != want || len(r.Info.Addrs) == 0 || r.AgentID != want.String() {
		t.Fatalf("addrs = %+v, want the id %s with addresses", r, want)
	}
	if r, err = k.call(ctx, request{Op: opStats, Mem: true, Take: true}); err != nil {
		t.Fatal(err)
	}
	if st := r.Stats; st == nil || st.CPUNs <= 0 || st.WallNs <= 0 || st.HeapBytes == 0 || st.RSSBytes == 0 {
		t.Fatalf("stats = %+v", r.Stats)
	}
	k.wmu.Lock()
	_, _ = k.stdin.Write([]byte(`{"id":9,"op":"exec"}` + "\n"))
	k.wmu.Unlock()
	if _, err := k.call(ctx, request{Op: opStats}); err == nil {
		t.Fatal("the agent answered after a line the protocol refuses")
	}

	k2, err := startChild(agentSpec{Kind: KindRaw, Index: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k2.stop)
	if _, err := k2.call(ctx, request{Op: opAddrs}); err != nil {
		t.Fatal(err)
	}
	_ = k2.stdin.Close()
	select {
	case <-k2.done:
	case <-ctx.Done():
		t.Fatal("the agent did not exit when its stdin ended")
	}
}
