package scale

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/meshagent/meshagent/internal/wait"
)

// cluster is N started nodes of one kind, node provider offering the
// capability probed: in the test process, or each in a process of its own.
type cluster interface {
	// kind is the Row's kind: KindMesh, KindRaw or their -procs forms.
	kind() string
	size() int
	provider() int
	// find looks the provider up from node i and reaches it (the mesh's
	// signed hello, a raw connect); it reports whether it was found and
	// how many peers the lookup queried.
	find(ctx context.Context, i int) (found bool, queried int, err error)
	// subscribe calls got with the payload of every message node i
	// receives on the probe topic and the time node i received it.
	subscribe(i int, got func(data []byte, at time.Time)) error
	publish(ctx context.Context, from int, payload []byte) error
	// sent returns the GossipSub RPCs and bytes all nodes sent so far.
	sent() (msgs, bytes int64, err error)
	// takeKinds returns the kind tracers' counts summed over the nodes
	// and starts them afresh.
	takeKinds() (map[string]int64, error)
	// idle waits out an idle window and returns idle CPU (percent of
	// one core) and memory (heap and stacks; RSS) per node.
	idle(window time.Duration) (cpuPercent, memMiB, rssMiB float64)
}

// attemptBound bounds one discovery attempt: each retry of a finder, and
// each sampled lookup (a lookup that fails, fails by then).
const attemptBound = 10 * time.Second

// params bound each step so that a run at small N fits in CI time.
type params struct {
	step      time.Duration // bound of each waiting step
	lookups   int           // discovery samples from random nodes
	rate      int           // publish rate, messages/s
	published int           // messages published at rate
	idle      time.Duration // idle window for CPU
	settle    time.Duration // quiet window before the publish window
	// discoveryOnly skips the topic, CPU and memory figures.
	discoveryOnly bool
}

// sparse returns, for each node i > 0, one or two random earlier nodes
// to bootstrap from: earlier than i's batch, when the nodes start in
// batches of join (the first batch is node 0 alone), so that each node's
// bootstrap peers are up before it starts. join 1 is one node at a time.
func sparse(rng *rand.Rand, n, join int) [][]int {
	boot := make([][]int, n)
	for i := 1; i < n; i++ {
		up := batchStart(i, n, join)
		boot[i] = []int{rng.IntN(up)}
		if up > 1 && rng.IntN(2) == 0 {
			if j := rng.IntN(up); j != boot[i][0] {
				boot[i] = append(boot[i], j)
			}
		}
	}
	return boot
}

// batchStart is the first node of node i's batch (startInBatches').
func batchStart(i, n, join int) int {
	if i == 0 || i == n-1 || join <= 1 {
		return i
	}
	return 1 + (i-1)/join*join
}

// startInBatches starts nodes 0 … n-1: node 0 alone, then batches of
// join nodes at once, each batch once the one before it has started, and
// the last node (the provider) alone once every other has. prepare runs
// for every node of a batch in turn before its starts run (what may not
// run concurrently: the simulated network's endpoints). started, if not
// nil, is told after each batch how many nodes have started.
func startInBatches(n, join int, prepare, start func(i int), started func(k int)) {
	run := func(lo, hi int) {
		for i := lo; i < hi; i++ {
			prepare(i)
		}
		if hi-lo == 1 {
			start(lo)
		} else {
			var wg sync.WaitGroup
			for i := lo; i < hi; i++ {
				wg.Go(func() { start(i) })
			}
			wg.Wait()
		}
		if started != nil {
			started(hi)
		}
	}
	run(0, 1)
	for lo := 1; lo < n-1; lo += max(join, 1) {
		run(lo, min(lo+max(join, 1), n-1))
	}
	if n > 1 {
		run(n-1, n)
	}
}

// heapAndStacks returns the memory the Go runtime holds for live objects
// and goroutine stacks, after a collection.
func heapAndStacks() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc + ms.StackInuse
}

// cpuTime returns the process's user and system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// rssBytes returns the process's resident memory, or 0 where the
// system does not say (it is read from /proc).
func rssBytes() uint64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil {
		return 0
	}
	return pages * uint64(os.Getpagesize())
}

func quantile(ds []time.Duration, p int) float64 {
	if len(ds) == 0 {
		return math.NaN()
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return ms(s[(len(s)-1)*p/100])
}

// payload is a published message's body: a JSON object, as topics
// require, the same bytes for both kinds, padded to -scale.payload bytes.
func payload(m string) []byte {
	b := []byte(`{"m":"` + m + `"}`)
	if pad := *size - len(b) - len(`,"pad":""`); pad > 0 {
		b = append(b[:len(b)-1], `,"pad":"`+strings.Repeat("x", pad)+`"}`...)
	}
	return b
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// measure records c's figures.
func measure(t *testing.T, rng *rand.Rand, c cluster, p params) Row {
	r := Row{Kind: c.kind(), N: c.size()}
	if lc, ok := c.(*localCluster); ok {
		// What the cluster holds as it finishes starting, against what it
		// holds settled (logged when memory is taken): a large cluster's
		// formation, not its settled state, is what decides whether it
		// fits in the machine's memory.
		mean, most, prot, _, conns := lc.connsPerAgent()
		t.Logf("%s N=%d: when started, per agent %.2f MiB of heap and stacks, %.1f connected peers (most %d, protected %.1f), %.1f connections", c.kind(), c.size(), lc.heapPerAgent(), mean, most, prot, conns)
	}
	stopProfile := startProfile(t, c, "discover")
	r.AllDiscoverMs, r.Discovered = allDiscover(t, c, p)
	stopProfile()
	var lat []time.Duration
	var queried, samples int
	for range p.lookups {
		i := rng.IntN(c.size())
		if i == c.provider() {
			continue
		}
		d, q, ok := lookup(c, i, attemptBound)
		if ok {
			lat = append(lat, d)
		}
		queried += q
		samples++
	}
	r.DiscoverP50Ms, r.DiscoverP99Ms = quantile(lat, 50), quantile(lat, 99)
	if samples > 0 {
		r.QueriedPerLookup = float64(queried) / float64(samples)
	}
	// Logged now as well as in the row: a large cluster's settle and
	// publish windows can outlast the session that started it.
	t.Logf("%s N=%d: %d discovered the provider in %.0f ms; lookups p50 %.0f ms, p99 %.0f ms, %.1f peers queried", c.kind(), c.size(), r.Discovered, r.AllDiscoverMs, r.DiscoverP50Ms, r.DiscoverP99Ms, r.QueriedPerLookup)
	if p.discoveryOnly {
		nan := math.NaN()
		r.PublishP50Ms, r.PublishP99Ms, r.DeliveryRatio = nan, nan, nan
		r.MsgsPerNodePerPub, r.BytesPerNodePerPub, r.IdleCPUPercent, r.MemMiBPerNode, r.RSSMiBPerNode = nan, nan, nan, nan, nan
		return r
	}
	pr := subscribeAll(t, c)
	if p.settle > 0 {
		quiet(t, c, p.settle)
	}
	publishPhase(t, c, p, &r, pr)
	// Memory is taken idle, with the subscriptions and routing tables of
	// a node that has discovered and published.
	r.IdleCPUPercent, r.MemMiBPerNode, r.RSSMiBPerNode = c.idle(p.idle)
	writeHeapProfile(t, c)
	if lc, ok := c.(*localCluster); ok {
		mean, most, prot, kb, conns := lc.connsPerAgent()
		t.Logf("%s N=%d: connected peers per agent when memory was taken: mean %.1f, most %d; protected %.1f (kad-dht's buckets %.1f); connections %.1f", c.kind(), c.size(), mean, most, prot, kb, conns)
	}
	return r
}

// allDiscover starts a finder on every node other than the provider,
// each retrying until it finds the provider, and returns when the last
// did, or at the step's bound.
func allDiscover(t *testing.T, c cluster, p params) (float64, int) {
	ctx, cancel := context.WithTimeout(context.Background(), p.step)
	defer cancel()
	start := time.Now()
	var mu sync.Mutex
	var last time.Duration
	found := 0
	var wg sync.WaitGroup
	for i := range c.size() {
		if i == c.provider() {
			continue
		}
		wg.Go(func() {
			for ctx.Err() == nil {
				lctx, lcancel := context.WithTimeout(ctx, attemptBound)
				ok, _, _ := c.find(lctx, i)
				lcancel()
				if ok {
					mu.Lock()
					found++
					last = max(last, time.Since(start))
					mu.Unlock()
					return
				}
				select { // back off before asking again, as a client would
				case <-ctx.Done():
				case <-time.After(200 * time.Millisecond):
				}
			}
		})
	}
	wg.Wait()
	if found < c.size()-1 {
		t.Logf("N=%d: %d of %d nodes discovered the provider within %s", c.size(), found, c.size()-1, p.step)
		return math.NaN(), found
	}
	return ms(last), found
}

// lookup times one find from node i and counts the peers it queried.
func lookup(c cluster, i int, bound time.Duration) (time.Duration, int, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	start := time.Now()
	ok, queried, _ := c.find(ctx, i)
	return time.Since(start), queried, ok
}

// probeRecord is what the publish phase records: the subscribers warmed, each
// message's send time, how many subscribers got it and when the last did.
type probeRecord struct {
	subs       int
	mu         sync.Mutex
	warmed     map[int]bool
	sent       map[int]time.Time
	got        map[int]int
	lat        []time.Duration
	deliveries int
}

// probeFrom is the node that publishes.
const probeFrom = 0

// subscribeAll subscribes every node but the publisher to the probe topic.
// A settled run subscribes before its settle window, so that the window
// also covers what a subscription sets off (GossipSub's grafts, the
// mesh's directory advertisement of the topic, spread over
// dht.AdvertiseSpread) and the publish window measures a formed topic.
func subscribeAll(t *testing.T, c cluster) *probeRecord {
	pr := &probeRecord{subs: c.size() - 1, warmed: map[int]bool{}, sent: map[int]time.Time{}, got: map[int]int{}}
	for i := range c.size() {
		if i == probeFrom {
			continue
		}
		if err := c.subscribe(i, func(data []byte, at time.Time) {
			var m struct {
				M string `json:"m"`
			}
			if json.Unmarshal(data, &m) != nil {
				return
			}
			s := m.M
			pr.mu.Lock()
			defer pr.mu.Unlock()
			if len(s) > 0 && s[0] == 'w' {
				pr.warmed[i] = true
				return
			}
			seq, err := strconv.Atoi(s)
			if err != nil {
				return
			}
			pr.deliveries++
			if pr.got[seq]++; pr.got[seq] == pr.subs {
				pr.lat = append(pr.lat, at.Sub(pr.sent[seq]))
			}
		}); err != nil {
			t.Fatalf("N=%d: subscribe %d: %v", c.size(), i, err)
		}
	}
	return pr
}

// publishPhase warms the probe topic until each subscriber has a message,
// then publishes at the paced rate and records time-to-all, delivery
// ratio and the gossip sent.
func publishPhase(t *testing.T, c cluster, p params, r *Row, pr *probeRecord) {
	ctx, cancel := context.WithTimeout(context.Background(), p.step)
	defer cancel()
	for w := 0; ctx.Err() == nil; w++ {
		pr.mu.Lock()
		ready := len(pr.warmed)
		pr.mu.Unlock()
		if ready == pr.subs {
			break
		}
		if err := c.publish(ctx, probeFrom, payload("w"+strconv.Itoa(w))); err != nil && w == 0 {
			t.Logf("N=%d: warm-up publish: %v", c.size(), err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond): // the warm-up's own pace
		}
	}
	if ctx.Err() != nil {
		pr.mu.Lock()
		ready := len(pr.warmed)
		pr.mu.Unlock()
		t.Logf("N=%d: %d of %d subscribers warmed within %s", c.size(), ready, pr.subs, p.step)
	}
	msgs0, bytes0, err := c.sent()
	if err != nil {
		t.Fatalf("N=%d: %v", c.size(), err)
	}
	if _, err := c.takeKinds(); err != nil {
		t.Fatalf("N=%d: %v", c.size(), err)
	}
	window := time.Now()
	stopProfile := startProfile(t, c, "publish")
	tick := time.NewTicker(time.Second / time.Duration(p.rate))
	for seq := range p.published {
		<-tick.C
		pr.mu.Lock()
		pr.sent[seq] = time.Now()
		pr.mu.Unlock()
		if err := c.publish(ctx, probeFrom, payload(strconv.Itoa(seq))); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Logf("N=%d: publish %d: %v", c.size(), seq, err)
		}
	}
	tick.Stop()
	done := func() error {
		pr.mu.Lock()
		defer pr.mu.Unlock()
		if len(pr.lat) < p.published {
			return fmt.Errorf("%d of %d messages reached every subscriber", len(pr.lat), p.published)
		}
		return nil
	}
	_ = wait.Until(5*time.Second, done) // stragglers get 5 s; the ratio says how many never came
	stopProfile()
	msgs1, bytes1, err := c.sent()
	if err != nil {
		t.Fatalf("N=%d: %v", c.size(), err)
	}
	kinds, err := c.takeKinds()
	if err != nil {
		t.Fatalf("N=%d: %v", c.size(), err)
	}
	pr.mu.Lock()
	defer pr.mu.Unlock()
	r.PublishP50Ms, r.PublishP99Ms = quantile(pr.lat, 50), quantile(pr.lat, 99)
	r.DeliveryRatio = float64(pr.deliveries) / float64(p.published*pr.subs)
	per := float64(c.size() * p.published)
	r.MsgsPerNodePerPub = float64(msgs1-msgs0) / per
	r.BytesPerNodePerPub = float64(bytes1-bytes0) / per
	t.Logf("N=%d: GossipSub sent per node per published message, in %s:%s", c.size(), time.Since(window).Round(time.Millisecond), split(kinds, per))
}

// quiet waits out the settle window and logs what each agent sent in it:
// a settled mesh's cost, which every agent pays whether or not anything
// is published.
func quiet(t *testing.T, c cluster, d time.Duration) {
	msgs0, bytes0, err := c.sent()
	if err != nil {
		t.Fatalf("N=%d: %v", c.size(), err)
	}
	if _, err := c.takeKinds(); err != nil {
		t.Fatalf("N=%d: %v", c.size(), err)
	}
	stopProfile := startProfile(t, c, "settle")
	<-time.After(d) // a quiet window, not a wait for a condition
	stopProfile()
	msgs1, bytes1, err := c.sent()
	if err != nil {
		t.Fatalf("N=%d: %v", c.size(), err)
	}
	kinds, err := c.takeKinds()
	if err != nil {
		t.Fatalf("N=%d: %v", c.size(), err)
	}
	per := float64(c.size()) * d.Seconds()
	t.Logf("N=%d: settle window of %s: per agent per second %.2f GossipSub messages, %.0f bytes sent:%s", c.size(), d, float64(msgs1-msgs0)/per, float64(bytes1-bytes0)/per, split(kinds, per))
}

// writeHeapProfile writes the live heap and the goroutines when memory
// was taken, when -scale.cpuprofile is set, into
// <prefix>-heap-<kind>-<N>.pprof and <prefix>-goroutine-…: what
// each kind's memory per agent is made of (go tool pprof -sample_index
// inuse_space, with -diff_base the other kind's).
func writeHeapProfile(t *testing.T, c cluster) {
	if *profile == "" {
		return
	}
	if _, ok := c.(*localCluster); !ok {
		return
	}
	runtime.GC() // the profile's live heap is the one of the last collection
	// Stacks are the rest of the memory figure: the goroutines say whose.
	for _, name := range []string{"heap", "goroutine"} {
		f, err := os.Create(fmt.Sprintf("%s-%s-%s-%d.pprof", *profile, name, c.kind(), c.size()))
		if err != nil {
			t.Fatal(err)
		}
		err = pprof.Lookup(name).WriteTo(f, 0)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// startProfile profiles the CPU until the returned function is called,
// when -scale.cpuprofile is set, into <prefix>-<phase>-<kind>-<N>.pprof. It profiles the test process, so it
// says nothing of agents in processes of their own.
func startProfile(t *testing.T, c cluster, phase string) func() {
	if *profile == "" {
		return func() {}
	}
	if _, ok := c.(*localCluster); !ok {
		t.Logf("-scale.cpuprofile profiles the test process; the agents of %s are not in it", c.kind())
		return func() {}
	}
	name := fmt.Sprintf("%s-%s-%s-%d.pprof", *profile, phase, c.kind(), c.size())
	if err := cpuProfiler.do(name); err != nil {
		t.Fatal(err)
	}
	return func() {
		if err := cpuProfiler.do(""); err != nil {
			t.Error(err)
		}
	}
}

// cpuProfiler starts and stops pprof's CPU profile from a goroutine of
// its own, started outside any synctest bubble: pprof's writer goroutine,
// started from inside one, would be in it and never durably blocked, and
// the bubble's virtual time would stand still.
// Its channels are made outside every bubble too: a channel made in a
// bubble may not be used from outside it.
var cpuProfiler = profiler{req: make(chan string), done: make(chan error)}

// profiler's requests are the file to profile into, or "" to stop the
// running profile.
type profiler struct {
	req  chan string
	done chan error
}

// run serves requests until ctx is done, stopping a profile left running.
func (p profiler) run(ctx context.Context) {
	var f *os.File
	stop := func() error {
		if f == nil {
			return nil
		}
		pprof.StopCPUProfile()
		err := f.Close()
		f = nil
		return err
	}
	for {
		select {
		case <-ctx.Done():
			_ = stop()
			return
		case file := <-p.req:
			err := stop()
			if file != "" && err == nil {
				if f, err = os.Create(file); err == nil {
					if err = pprof.StartCPUProfile(f); err != nil {
						_ = f.Close()
						f = nil
					}
				}
			}
			p.done <- err
		}
	}
}

// do sends one request and waits for its answer (a moment of real time,
// in which a bubble's clock does not move).
func (p profiler) do(file string) error {
	p.req <- file
	return <-p.done
}
