package scale

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"golang.org/x/sys/unix"

	"github.com/meshagent/meshagent/node"
)

var (
	run     = flag.Bool("scale", false, "run the scale harness (make scale)")
	sizes   = flag.String("scale.n", "10,25", "comma-separated numbers of nodes")
	out     = flag.String("scale.out", "../../docs/scale", "directory for scale.csv and the plots")
	step    = flag.Duration("scale.step", 60*time.Second, "bound of each waiting step")
	lookups = flag.Int("scale.lookups", 40, "discovery samples from random nodes")
	pubs    = flag.Int("scale.published", 100, "messages published at -scale.rate")
	rate    = flag.Int("scale.rate", 20, "publish rate, messages/s (on mocknet with latency keep it below 1/latency: see the package doc)")
	idle    = flag.Duration("scale.idle", 5*time.Second, "idle window for CPU")
	size    = flag.Int("scale.payload", 0, "bytes of each published message's JSON payload, padded with a member the receivers ignore (0: the bare {\"m\":\"<seq>\"}, some 10 bytes), the same for both kinds")
	settle  = flag.Duration("scale.settle", 0, "quiet window after discovery and before the publish window, the same for both kinds: a mesh started at once sends heartbeats at the configured pace until its agents have heard each other (two intervals, 20 s at the default), so the publish window measures a settled mesh only after it")
	seed    = flag.Uint64("scale.seed", 1, "seed of the topology and the samples")
	profile = flag.String("scale.cpuprofile", "", "write a CPU profile of each discovery, settle and publish phase to this prefix + -<phase>-<kind>-<N>.pprof, and the live heap and the goroutines when memory is taken to <prefix>-heap-<kind>-<N>.pprof and <prefix>-goroutine-<kind>-<N>.pprof")
	kinds   = flag.String("scale.kinds", KindMesh+","+KindRaw, "comma-separated kinds measured: mesh, raw, and in processes mesh-procs, raw-procs (all four: the cross-check)")
	disc    = flag.Bool("scale.discovery", false, "measure discovery only (no topics, idle CPU or memory), to iterate on it")
	join    = flag.Int("scale.join", 1, "in-process kinds: agents started at once, each batch bootstrapped to agents of the batches before it (1: one after another, each connected to its bootstrap peers before the next starts); larger batches shorten the start of a large cluster, whose running agents' traffic is what takes its time")
	joinGap = flag.Duration("scale.joingap", 0, "in-process kinds: start a batch of -scale.join agents every this long (virtual with -scale.synctest), so that a large cluster's agents arrive at a pace and the connections of one batch's first lookups are trimmed before the next batch's begin; 0: each batch as soon as the one before has connected")
	runs    = flag.Int("scale.runs", 1, "runs of each size and kind; the CSV and plots hold each figure's median")
	procs   = flag.Bool("scale.procs", false, "run each agent in a process of its own: -scale.kinds mesh and raw become mesh-procs and raw-procs")
	netw    = flag.String("scale.net", NetLoopback, "network of in-process agents: loopback (TCP on 127.0.0.1), mock (go-libp2p's in-memory mocknet, no sockets) or sim (go-libp2p's simulated packet network: QUIC over per-agent links, no sockets)")
	latency = flag.Duration("scale.latency", 0, "mock, sim: one-way latency of every link or packet (e.g. 50ms, a WAN)")
	virtual = flag.Bool("scale.synctest", false, "sim: run each cluster in a testing/synctest bubble, on virtual time, so that latencies do not depend on the machine's load")
	conns   = flag.String("scale.conns", defaultSimConns, "sim: LOW:HIGH watermarks of the connection manager every agent of both kinds has (the node's grace period and trim interval), or libp2p for go-libp2p's default (160:192, which below N = 192 never trims)")
	merge   = flag.String("scale.merge", "", "comma-separated scale.csv files of earlier runs to merge into -scale.out's scale.csv and plots (make scale-plot), instead of running")
	bw      = flag.String("scale.bw", "", "mock: bandwidth of every link, sim: of every agent's uplink and downlink, in bytes/s, with an optional k, M or G (e.g. 12.5M, 100 Mbit/s); empty: unlimited on mock, 12.5M on sim")
)

// TestScale is the harness's entry: for each size it measures each kind
// in turn (the mesh, then the raw baseline; in the test process, in
// processes, or both for the cross-check), closing each before the next,
// and writes the CSV and plots.
func TestScale(t *testing.T) {
	if !*run {
		t.Skip("the scale harness runs with -scale (make scale)")
	}
	p := params{step: *step, lookups: *lookups, rate: max(*rate, 1), published: *pubs, idle: *idle, settle: *settle, discoveryOnly: *disc}
	bandwidth, err := parseBandwidth(*bw)
	if err != nil {
		t.Fatalf("-scale.bw: %v", err)
	}
	mock := *netw == NetMock || *netw == NetSim
	switch {
	case *netw != NetLoopback && !mock:
		t.Fatalf("-scale.net: %q is none of %s, %s and %s", *netw, NetLoopback, NetMock, NetSim)
	case *join < 1:
		t.Fatalf("-scale.join: %d is not a number of agents started at once (1 or more)", *join)
	case *joinGap < 0:
		t.Fatalf("-scale.joingap: %s is not a period (0 or more)", *joinGap)
	case *join > 1 && *procs:
		t.Fatal("-scale.join batches the in-process agents' start: -scale.procs starts its processes one after another")
	case mock && *procs:
		t.Fatalf("-scale.net %s holds every agent in the test process: it does not go with -scale.procs", *netw)
	case !mock && (*latency != 0 || bandwidth != 0):
		t.Fatal("-scale.latency and -scale.bw shape an in-memory network's links: they need -scale.net mock or sim")
	}
	if *netw == NetSim && bandwidth == 0 {
		bandwidth = defaultSimBandwidth // named in the label: simnet always paces
	}
	bound, err := parseConns(*conns)
	if err != nil {
		t.Fatalf("-scale.conns: %v", err)
	}
	if *netw != NetSim && flagSet("scale.conns") {
		t.Fatal("-scale.conns bounds the hosts of the simulated network: it needs -scale.net sim (on loopback the mesh's node has its own connection manager; mocknet's hosts have none)")
	}
	label := netLabel(*netw, *latency, bandwidth)
	if *netw == NetSim && bound != nil {
		label += fmt.Sprintf(" conns %d:%d", bound.LowWater, bound.HighWater)
	}
	switch {
	case *virtual && *netw != NetSim:
		t.Fatal("-scale.synctest needs -scale.net sim: only the simulated network runs inside a bubble")
	case *virtual:
		// Times are virtual, and idle CPU is per virtual second: the
		// label says so wherever a figure goes.
		label += " virtual"
	}
	// What else a row's figures depend on goes in its label too, so that
	// merged runs (make scale-plot) never draw a settled mesh and an
	// unsettled one, or two payloads, as one line.
	if *settle > 0 {
		label += " settled " + settle.String()
	}
	if *size > 0 {
		label += fmt.Sprintf(" payload %dB", *size)
	}
	var measured []string
	inProcess, inProcs := false, false
	for _, kind := range strings.Split(*kinds, ",") {
		if *procs && (kind == KindMesh || kind == KindRaw) {
			kind += "-procs"
		}
		switch kind {
		case KindMesh, KindRaw:
			inProcess = true
		case KindMeshProcs, KindRawProcs:
			inProcs = true
		default:
			t.Fatalf("-scale.kinds: %q is none of %s, %s, %s, %s", kind, KindMesh, KindRaw, KindMeshProcs, KindRawProcs)
		}
		measured = append(measured, kind)
	}
	if *profile != "" {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); cpuProfiler.run(ctx) }()
		defer func() { cancel(); <-done }()
	}
	var rows []Row
	for _, f := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 3 {
			t.Fatalf("-scale.n: %q is not a size of at least 3", f)
		}
		if err := enoughDescriptors(n, inProcess && !mock, inProcs); err != nil {
			t.Fatal(err)
		}
		for _, kind := range measured {
			var done []Row
			for run := range max(*runs, 1) {
				t.Run(fmt.Sprintf("N=%d/%s/%d", n, kind, run+1), bubbled(*virtual, func(t *testing.T) {
					// Each run its own topology and samples, the same for
					// every kind.
					rng := rand.New(rand.NewPCG(*seed+uint64(run), uint64(n)))
					var c cluster
					var mn memNet
					switch *netw {
					case NetMock:
						mn = newMockNet(t, *latency, bandwidth)
					case NetSim:
						mn = newSimNet(t, *latency, bandwidth, bound)
					}
					began, cpu := time.Now(), cpuTime()
					switch kind {
					case KindMesh:
						c = startMesh(t, rng, n, *join, mn)
					case KindRaw:
						c = startRaw(t, rng, n, *join, p.step, mn)
					case KindMeshProcs:
						c = startProcs(t, rng, KindMesh, n, p.step)
					case KindRawProcs:
						c = startProcs(t, rng, KindRaw, n, p.step)
					}
					t.Logf("%s N=%d started in %s (%s of CPU), %d at once", kind, n, time.Since(began).Round(time.Millisecond), (cpuTime() - cpu).Round(time.Second), *join)
					start := time.Now()
					r := measure(t, rng, c, p)
					r.Net = label
					if kind == KindMeshProcs || kind == KindRawProcs {
						r.Net = NetLoopback
					}
					t.Logf("%s N=%d in %s: %+v", c.kind(), n, time.Since(start).Round(time.Second), r)
					done = append(done, r)
				}))
			}
			if len(done) > 0 {
				rows = append(rows, Median(done))
				// After every row, so that a run stopped in its next
				// (an hour long at N = 1,000) keeps what it measured.
				writeRows(t, rows)
			}
		}
	}
	if err := Plot(*out, rows); err != nil {
		t.Fatal(err)
	}
}

// writeRows writes rows to -scale.out's scale.csv.
func writeRows(t *testing.T, rows []Row) {
	if err := os.MkdirAll(*out, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(*out, "scale.csv"))
	if err != nil {
		t.Fatal(err)
	}
	err = WriteCSV(f, rows)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
}

// TestMergeRuns is the harness's other entry (make scale-plot): it merges
// the CSVs of earlier runs into one, with its plots, so that curves run
// across sizes measured apart (N = 1,000 takes a run of its own).
func TestMergeRuns(t *testing.T) {
	if *merge == "" {
		t.Skip("merging runs' CSVs runs with -scale.merge (make scale-plot)")
	}
	var runs [][]Row
	for _, name := range strings.Split(*merge, ",") {
		f, err := os.Open(strings.TrimSpace(name))
		if err != nil {
			t.Fatal(err)
		}
		rows, err := ReadCSV(f)
		_ = f.Close()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		runs = append(runs, rows)
	}
	rows, err := Merge(runs...)
	if err != nil {
		t.Fatal(err)
	}
	writeRows(t, rows)
	if err := Plot(*out, rows); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d rows from %d files into %s", len(rows), len(runs), *out)
}

// defaultSimConns are the watermarks of the agents' connection manager
// on the simulated network unless -scale.conns says otherwise. The node's
// own (DefaultConnLimits: 96, 192) would bound nothing below N = 192, and
// memory per agent grows with its connections (QUIC's buffers for each):
// at 32 to 64 an agent keeps about three GossipSub meshes' worth of
// peers and its DHT neighbours, and memory per agent stops growing with N
// from N = 65 on.
const defaultSimConns = "32:64"

// parseConns reads -scale.conns: "libp2p" (nil: go-libp2p's default
// connection manager) or LOW:HIGH with 0 < LOW < HIGH, the other limits
// the node's defaults. HIGH must stay below the node's MaxInbound, where
// the resource manager refuses peers before any trim.
func parseConns(s string) (*node.ConnLimits, error) {
	if s == "libp2p" {
		return nil, nil
	}
	lo, hi, ok := strings.Cut(s, ":")
	if !ok {
		return nil, fmt.Errorf("%q is neither libp2p nor LOW:HIGH", s)
	}
	l := node.DefaultConnLimits()
	var err error
	if l.LowWater, err = strconv.Atoi(lo); err != nil {
		return nil, fmt.Errorf("%q: low watermark: %w", s, err)
	}
	if l.HighWater, err = strconv.Atoi(hi); err != nil {
		return nil, fmt.Errorf("%q: high watermark: %w", s, err)
	}
	if l.LowWater < 1 || l.HighWater <= l.LowWater || l.HighWater >= l.MaxInbound {
		return nil, fmt.Errorf("%q: need 0 < LOW < HIGH < %d", s, l.MaxInbound)
	}
	return &l, nil
}

// flagSet reports whether the flag name was given on the command line.
func flagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// bubbled runs f in a synctest bubble when virtual: time inside is the
// bubble's, which moves only when every goroutine of the cluster waits,
// so a latency measured there is the network's and the protocols', never
// the CPU's queue.
func bubbled(virtual bool, f func(t *testing.T)) func(t *testing.T) {
	if !virtual {
		return f
	}
	return func(t *testing.T) { synctest.Test(t, f) }
}

// enoughDescriptors refuses a size the limits cannot carry, before it
// starts, rather than failing minutes in with "too many open files". In
// one process every agent ends up connected to nearly every other and
// both ends of each loopback connection are this process's, so N agents
// hold about N² descriptors, plus their listeners and stores (64 each is
// ample). In processes each agent holds its own ~N + 64 (the limit is
// inherited) and the harness three pipes per agent, 3N + 64 in all, the
// larger of the two; the processes and
// their threads count against the user's process limit (16 threads an
// agent is ample). make scale raises the soft limit first.
func enoughDescriptors(n int, inProcess, procs bool) error {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return nil // not knowable here: let the run say
	}
	if need := uint64(n*n + 64*n); inProcess && lim.Cur < need {
		return fmt.Errorf("N=%d needs about %d file descriptors in one process and the limit is %d: raise it (ulimit -n %d; make scale does when it may), or run each agent in a process (-scale.procs)", n, need, lim.Cur, need)
	}
	if !procs {
		return nil
	}
	if need := uint64(3*n + 64); lim.Cur < need {
		return fmt.Errorf("N=%d in processes needs about %d file descriptors in the harness and the limit is %d: raise it (ulimit -n %d)", n, need, lim.Cur, need)
	}
	if err := unix.Getrlimit(unix.RLIMIT_NPROC, &lim); err != nil {
		return nil
	}
	if need := uint64(16 * n); lim.Cur != unix.RLIM_INFINITY && lim.Cur < need {
		return fmt.Errorf("N=%d in processes needs about %d processes and threads and the limit is %d: raise it (ulimit -u %d)", n, need, lim.Cur, need)
	}
	return nil
}
