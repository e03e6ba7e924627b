package scale

import (
	"cmp"
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
)

// Kinds of a Row: the mesh's own stack, and the raw libp2p baseline; in
// the test process, or each agent in a process of its own (-procs).
const (
	KindMesh      = "mesh"
	KindRaw       = "raw"
	KindMeshProcs = "mesh-procs"
	KindRawProcs  = "raw-procs"
)

// Row holds one kind's figures at one size. Durations are in milliseconds.
type Row struct {
	Kind string
	// Net is the network the agents ran on: "loopback" (TCP on
	// 127.0.0.1), "mock" (mocknet, in memory) or "mock 50ms" (with that
	// one-way latency on every link, and a bandwidth when one was set).
	// Empty reads as loopback.
	Net string
	N   int
	// AllDiscoverMs is the time from the last node's start until every
	// node has found the capability's provider (NaN when some did not
	// within the step's bound); Discovered counts those that did.
	AllDiscoverMs float64
	Discovered    int
	// Discovery of the provider from random nodes: a lookup and, for the
	// mesh, the signed hello that confirms it (a connect for raw).
	DiscoverP50Ms, DiscoverP99Ms float64
	// QueriedPerLookup is the mean number of peers a lookup queried.
	QueriedPerLookup float64
	// Time from publish until every subscriber has the message, at the
	// paced rate, over the messages that reached every subscriber.
	PublishP50Ms, PublishP99Ms float64
	// DeliveryRatio is deliveries over messages × subscribers.
	DeliveryRatio float64
	// RPCs (stream writes) and bytes sent on the GossipSub protocols per
	// node per published message, heartbeats and gossip included.
	MsgsPerNodePerPub, BytesPerNodePerPub float64
	// Idle CPU (percent of one core) and memory (heap and stacks, MiB)
	// per node: in the test process its figures over N, in processes the
	// median of the agents' own.
	IdleCPUPercent, MemMiBPerNode float64
	// RSSMiBPerNode is resident memory per node, counted as memory is;
	// in the test process only a floor (it can even be negative), as the
	// runtime keeps pages an earlier cluster freed.
	RSSMiBPerNode float64
}

// header names Row's fields in CSV order.
var header = []string{"kind", "n", "all_discover_ms", "discovered", "discover_p50_ms", "discover_p99_ms",
	"queried_per_lookup", "publish_p50_ms", "publish_p99_ms", "delivery_ratio",
	"msgs_per_node_per_pub", "bytes_per_node_per_pub", "idle_cpu_percent", "mem_mib_per_node", "rss_mib_per_node", "net"}

func (r Row) values() []float64 {
	return []float64{r.AllDiscoverMs, float64(r.Discovered), r.DiscoverP50Ms, r.DiscoverP99Ms,
		r.QueriedPerLookup, r.PublishP50Ms, r.PublishP99Ms, r.DeliveryRatio,
		r.MsgsPerNodePerPub, r.BytesPerNodePerPub, r.IdleCPUPercent, r.MemMiBPerNode, r.RSSMiBPerNode}
}

// network is Net, with loopback for empty.
func (r Row) network() string {
	if r.Net == "" {
		return "loopback"
	}
	return r.Net
}

// WriteCSV writes rows with a header line.
func WriteCSV(w io.Writer, rows []Row) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(header); err != nil {
		return fmt.Errorf("scale: csv: %w", err)
	}
	for _, r := range rows {
		rec := []string{r.Kind, strconv.Itoa(r.N)}
		for _, v := range r.values() {
			rec = append(rec, strconv.FormatFloat(v, 'g', 6, 64))
		}
		rec = append(rec, r.network())
		if err := cw.Write(rec); err != nil {
			return fmt.Errorf("scale: csv: %w", err)
		}
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("scale: csv: %w", err)
	}
	return nil
}

// ReadCSV reads rows WriteCSV wrote: the same header, then one record a
// row. A record of the wrong width, a kind that is none of the four, a
// size below 1 or a figure that is not a number is an error naming its
// line: the rows become plots a reader trusts.
func ReadCSV(r io.Reader) ([]Row, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = len(header)
	got, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("scale: csv header: %w", err)
	}
	if !slices.Equal(got, header) {
		return nil, fmt.Errorf("scale: csv header %q is not %q", got, header)
	}
	var rows []Row
	for line := 2; ; line++ {
		rec, err := cr.Read()
		if err == io.EOF {
			return rows, nil
		}
		if err != nil {
			return nil, fmt.Errorf("scale: csv: %w", err)
		}
		r := Row{Kind: rec[0], Net: rec[len(rec)-1]}
		if !slices.Contains([]string{KindMesh, KindRaw, KindMeshProcs, KindRawProcs}, r.Kind) {
			return nil, fmt.Errorf("scale: csv line %d: kind %q is none of %s, %s, %s, %s", line, r.Kind, KindMesh, KindRaw, KindMeshProcs, KindRawProcs)
		}
		if r.N, err = strconv.Atoi(rec[1]); err != nil || r.N < 1 {
			return nil, fmt.Errorf("scale: csv line %d: n %q is not a size", line, rec[1])
		}
		vals := make([]float64, len(rec)-3)
		for i, f := range rec[2 : len(rec)-1] {
			if vals[i], err = strconv.ParseFloat(f, 64); err != nil {
				return nil, fmt.Errorf("scale: csv line %d: %s %q is not a number", line, header[i+2], f)
			}
		}
		discovered := vals[1]
		if discovered != math.Trunc(discovered) || discovered < 0 || discovered > float64(r.N) {
			return nil, fmt.Errorf("scale: csv line %d: discovered %v is not a count of at most n", line, discovered)
		}
		r.AllDiscoverMs, r.Discovered, r.DiscoverP50Ms, r.DiscoverP99Ms = vals[0], int(discovered), vals[2], vals[3]
		r.QueriedPerLookup, r.PublishP50Ms, r.PublishP99Ms, r.DeliveryRatio = vals[4], vals[5], vals[6], vals[7]
		r.MsgsPerNodePerPub, r.BytesPerNodePerPub, r.IdleCPUPercent, r.MemMiBPerNode, r.RSSMiBPerNode = vals[8], vals[9], vals[10], vals[11], vals[12]
		rows = append(rows, r)
	}
}

// Merge joins the rows of several runs, ordered by network, kind and N,
// for plots across them (N = 10 … 1,000 from runs of their own). Two rows
// of one kind, network and size are an error: a plot would show one of
// them, and which would not be said.
func Merge(runs ...[]Row) ([]Row, error) {
	var out []Row
	for _, rows := range runs {
		for _, r := range rows {
			if slices.ContainsFunc(out, func(o Row) bool { return o.Kind == r.Kind && o.N == r.N && o.network() == r.network() }) {
				return nil, fmt.Errorf("scale: merge: two rows of %s at N = %d on %s", r.Kind, r.N, r.network())
			}
			out = append(out, r)
		}
	}
	slices.SortStableFunc(out, func(a, b Row) int {
		return cmp.Or(cmp.Compare(a.network(), b.network()), cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.N, b.N))
	})
	return out, nil
}

// Median returns a row whose every figure is the median of that figure
// over runs of one kind at one size (each figure on its own, so the
// result need not be any single run), which is what a table of several
// noisy runs should quote. A NaN (not every node discovered within the
// bound) sorts above every number: it is the worst outcome. With an even
// number of runs it takes the upper middle. Median panics on no runs.
func Median(runs []Row) Row {
	m := Row{Kind: runs[0].Kind, Net: runs[0].Net, N: runs[0].N}
	fields := func(r *Row) []*float64 {
		return []*float64{&r.AllDiscoverMs, &r.DiscoverP50Ms, &r.DiscoverP99Ms, &r.QueriedPerLookup,
			&r.PublishP50Ms, &r.PublishP99Ms, &r.DeliveryRatio, &r.MsgsPerNodePerPub,
			&r.BytesPerNodePerPub, &r.IdleCPUPercent, &r.MemMiBPerNode, &r.RSSMiBPerNode}
	}
	out := fields(&m)
	vals := make([]float64, len(runs))
	for i := range out {
		for j := range runs {
			vals[j] = *fields(&runs[j])[i]
		}
		slices.SortFunc(vals, func(a, b float64) int {
			switch {
			case math.IsNaN(a) && math.IsNaN(b):
				return 0
			case math.IsNaN(a):
				return 1
			case math.IsNaN(b):
				return -1
			}
			return cmp.Compare(a, b)
		})
		*out[i] = vals[len(vals)/2]
	}
	discovered := make([]int, len(runs))
	for j, r := range runs {
		discovered[j] = r.Discovered
	}
	slices.Sort(discovered)
	m.Discovered = discovered[len(discovered)/2]
	return m
}

// Networks a run's agents talk over (-scale.net).
const (
	// NetLoopback is TCP on 127.0.0.1 with noise and yamux: real sockets.
	NetLoopback = "loopback"
	// NetMock is go-libp2p's in-memory network (p2p/net/mock): no
	// sockets, no transport security or multiplexer, every link with
	// the run's latency and bandwidth.
	NetMock = "mock"
	// NetSim is go-libp2p's simulated packet network (x/simlibp2p on
	// marcopolo/simnet): QUIC, with its TLS and congestion control, over
	// per-agent access links of the run's bandwidth and packets of the
	// run's latency. No sockets either.
	NetSim = "sim"
)
