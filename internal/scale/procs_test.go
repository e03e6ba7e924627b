package scale

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// callBound bounds a request that does not carry its own bound (addrs
// aside, which waits for the agent to join): a stats or a subscribe.
const callBound = 30 * time.Second

// procCluster is N agents of one kind, each in a process of its own (the
// test binary again, running TestScaleAgent), driven over the control
// protocol.
type procCluster struct {
	t    testing.TB
	name string
	kids []*child
	prov int
	want string // the provider's id
}

// startProcs starts the agents one after the other, in the shape and
// order startMesh and startRaw use: each bootstrapped to its peers'
// addresses and (the mesh) connected to them before the next starts.
func startProcs(t *testing.T, rng *rand.Rand, kind string, n int, provideBound time.Duration) *procCluster {
	c := &procCluster{t: t, name: kind + "-procs", prov: n - 1}
	t.Cleanup(c.close)
	overloaded := false // as in startMesh
	var infos []peer.AddrInfo
	for i, boot := range sparse(rng, n, 1) {
		spec := agentSpec{Kind: kind, Index: i, Provider: i == c.prov, Join: !overloaded, ProvideBoundMs: provideBound.Milliseconds()}
		for _, j := range boot {
			spec.Boot = append(spec.Boot, infos[j])
		}
		k, err := startChild(spec)
		if err != nil {
			t.Fatalf("N=%d: agent %d: %v", n, i, err)
		}
		c.kids = append(c.kids, k)
		ctx, cancel := context.WithTimeout(context.Background(), joinBound+callBound)
		r, err := k.call(ctx, request{Op: opAddrs})
		cancel()
		if err == nil && r.Info == nil {
			err = fmt.Errorf("%w: addrs without an address", errProtocol)
		}
		if err != nil {
			t.Fatalf("N=%d: agent %d: %v; its stderr ends:\n%s", n, i, err, k.stderr.String())
		}
		if r.JoinErr != "" {
			t.Logf("N=%d: %s; the nodes after it start without waiting", n, r.JoinErr)
			overloaded = true
		}
		infos = append(infos, *r.Info)
		if i == c.prov {
			c.want = r.AgentID
		}
	}
	return c
}

func (c *procCluster) kind() string  { return c.name }
func (c *procCluster) size() int     { return len(c.kids) }
func (c *procCluster) provider() int { return c.prov }

// bound is what remains of ctx's deadline, for the agent's own context.
func bound(ctx context.Context) int64 {
	if d, ok := ctx.Deadline(); ok {
		return max(time.Until(d).Milliseconds(), 1)
	}
	return 0
}

func (c *procCluster) find(ctx context.Context, i int) (bool, int, error) {
	r, err := c.kids[i].call(ctx, request{Op: opFind, Want: c.want, TimeoutMs: bound(ctx)})
	return r.Found, r.Queried, err
}

func (c *procCluster) subscribe(i int, got func([]byte, time.Time)) error {
	k := c.kids[i]
	k.mu.Lock()
	k.got = got
	k.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), callBound)
	defer cancel()
	_, err := k.call(ctx, request{Op: opSubscribe})
	return err
}

// publish sends the payload to the publisher's process: the harness's
// publish time therefore includes one pipe write (tens of microseconds).
func (c *procCluster) publish(ctx context.Context, from int, payload []byte) error {
	_, err := c.kids[from].call(ctx, request{Op: opPublish, Payload: payload, TimeoutMs: bound(ctx)})
	return err
}

// statsAll asks every agent for its stats at once.
func (c *procCluster) statsAll(req request) ([]agentStats, error) {
	ctx, cancel := context.WithTimeout(context.Background(), callBound)
	defer cancel()
	out := make([]agentStats, len(c.kids))
	errs := make([]error, len(c.kids))
	var wg sync.WaitGroup
	for i, k := range c.kids {
		wg.Go(func() {
			r, err := k.call(ctx, req)
			if err == nil && r.Stats == nil {
				err = fmt.Errorf("%w: stats without figures", errProtocol)
			}
			if err != nil {
				errs[i] = fmt.Errorf("agent %d: stats: %w", i, err)
				return
			}
			out[i] = *r.Stats
		})
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

func (c *procCluster) sent() (msgs, bytes int64, err error) {
	st, err := c.statsAll(request{Op: opStats})
	for _, s := range st {
		msgs += s.RPCs
		bytes += s.Bytes
	}
	return msgs, bytes, err
}

// takeKinds sums the agents' counts; "distinct" counts are each agent's
// own, so their sum counts a message once per agent that sent it.
func (c *procCluster) takeKinds() (map[string]int64, error) {
	st, err := c.statsAll(request{Op: opStats, Take: true})
	sum := map[string]int64{}
	for _, s := range st {
		for k, v := range s.Kinds {
			sum[k] += v
		}
	}
	return sum, err
}

// idle returns the median over the agents of each one's own figures: its
// CPU over the window, and its whole heap, stacks and RSS, the runtime's
// fixed cost included, which is what an agent costs on its own.
func (c *procCluster) idle(window time.Duration) (cpuPercent, memMiB, rssMiB float64) {
	nan := math.NaN()
	before, err := c.statsAll(request{Op: opStats})
	if err != nil {
		c.t.Logf("N=%d: idle: %v", c.size(), err)
		return nan, nan, nan
	}
	<-time.After(window) // an idle window, not a wait for a condition
	after, err := c.statsAll(request{Op: opStats, Mem: true})
	if err != nil {
		c.t.Logf("N=%d: idle: %v", c.size(), err)
		return nan, nan, nan
	}
	var cpu, mem, rss []float64
	for i := range after {
		b, a := before[i], after[i]
		cpu = append(cpu, 100*float64(a.CPUNs-b.CPUNs)/float64(a.WallNs-b.WallNs))
		mem = append(mem, float64(a.HeapBytes)/(1<<20))
		rss = append(rss, float64(a.RSSBytes)/(1<<20))
	}
	return median(cpu), median(mem), median(rss)
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// close stops every agent at once: a close, the end of its stdin, and a
// kill if it has not exited within a few seconds.
func (c *procCluster) close() {
	var wg sync.WaitGroup
	for _, k := range c.kids {
		wg.Go(k.stop)
	}
	wg.Wait()
}

// child is one agent's process and the harness's end of its protocol.
type child struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	wmu    sync.Mutex // stdin, one line at a time
	stderr tailBuffer

	mu      sync.Mutex
	next    uint64
	pending map[uint64]chan reply
	got     func([]byte, time.Time)

	done chan struct{} // closed when the reader has ended and the process exited
	err  error         // why; read after done
}

// startChild starts the test binary as the agent spec names.
func startChild(spec agentSpec) (*child, error) {
	js, err := json.Marshal(spec)
	if err != nil {
		return nil, fmt.Errorf("scale: agent spec: %w", err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestScaleAgent$", "-test.count=1", "-test.timeout=0")
	cmd.Env = append(os.Environ(), agentEnv+"="+string(js))
	k := &child{cmd: cmd, pending: map[uint64]chan reply{}, done: make(chan struct{})}
	cmd.Stderr = &k.stderr
	if k.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, fmt.Errorf("scale: agent: %w", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("scale: agent: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("scale: agent: %w", err)
	}
	go k.read(stdout) // ends when the process's stdout does; stop waits for it
	return k, nil
}

// read dispatches the agent's replies until its stdout ends, then reaps
// the process. A line that breaks the protocol ends the agent.
func (k *child) read(r io.Reader) {
	defer close(k.done)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var err error
	for err == nil && sc.Scan() {
		var rep reply
		if rep, err = decodeReply(sc.Bytes()); err != nil {
			break
		}
		k.mu.Lock()
		if rep.Op == opMsg {
			got := k.got
			k.mu.Unlock()
			if got != nil {
				got(rep.Payload, time.Unix(0, rep.AtNs))
			}
			continue
		}
		ch := k.pending[rep.ID]
		delete(k.pending, rep.ID)
		k.mu.Unlock()
		if ch != nil {
			ch <- rep // buffered: the caller may have gone
		}
	}
	if err == nil {
		err = sc.Err()
	}
	if err != nil {
		_ = k.cmd.Process.Kill()
	}
	werr := k.cmd.Wait()
	k.err = errors.Join(err, werr)
	if k.err == nil {
		k.err = errors.New("the agent exited")
	}
}

// call sends req and waits for its reply; an error the agent reports
// comes back as an error.
func (k *child) call(ctx context.Context, req request) (reply, error) {
	ch := make(chan reply, 1)
	k.mu.Lock()
	k.next++
	req.ID = k.next
	k.pending[req.ID] = ch
	k.mu.Unlock()
	forget := func() {
		k.mu.Lock()
		delete(k.pending, req.ID)
		k.mu.Unlock()
	}
	line, err := json.Marshal(req)
	if err != nil {
		forget()
		return reply{}, fmt.Errorf("scale: %s: %w", req.Op, err)
	}
	k.wmu.Lock()
	_, err = k.stdin.Write(append(line, '\n'))
	k.wmu.Unlock()
	if err != nil {
		forget()
		return reply{}, fmt.Errorf("scale: %s: %w", req.Op, err)
	}
	var r reply
	select {
	case r = <-ch:
	case <-ctx.Done():
		forget()
		return reply{}, fmt.Errorf("scale: %s: %w", req.Op, ctx.Err())
	case <-k.done:
		select {
		case r = <-ch:
		default:
			return reply{}, fmt.Errorf("scale: %s: %w", req.Op, k.err)
		}
	}
	if r.Err != "" {
		return r, fmt.Errorf("scale: %s: %s", req.Op, r.Err)
	}
	return r, nil
}

func (k *child) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = k.call(ctx, request{Op: opClose})
	_ = k.stdin.Close()
	select {
	case <-k.done:
	case <-ctx.Done():
		_ = k.cmd.Process.Kill()
		<-k.done
	}
}

// tailBuffer keeps the last 4 KiB written to it: a child's stderr, shown
// when the child fails.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - 4096; over > 0 {
		b.buf = slices.Clone(b.buf[over:])
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}
