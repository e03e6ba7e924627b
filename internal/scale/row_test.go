package scale

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestWriteCSVAndPlot writes two kinds at two sizes, one figure not
// measured, and checks the CSV's shape and that every plot is written.
func TestWriteCSVAndPlot(t *testing.T) {
	rows := []Row{
		{Kind: KindMesh, N: 10, AllDiscoverMs: 12, DeliveryRatio: 1},
		{Kind: KindRaw, N: 10, AllDiscoverMs: 10, DeliveryRatio: 1},
		{Kind: KindMesh, N: 25, AllDiscoverMs: math.NaN(), DeliveryRatio: 0.9},
		{Kind: KindRaw, N: 25, AllDiscoverMs: 20, DeliveryRatio: 1},
	}
	var buf bytes.Buffer
	if err := WriteCSV(&buf, rows); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 5 || !strings.HasPrefix(lines[0], "kind,n,") || !strings.HasPrefix(lines[3], "mesh,25,NaN,") {
		t.Fatalf("csv:\n%s", buf.String())
	}
	for _, l := range lines {
		if got := strings.Count(l, ","); got != len(header)-1 {
			t.Fatalf("line %q has %d commas, want %d", l, got, len(header)-1)
		}
	}
	dir := t.TempDir()
	if err := Plot(dir, rows); err != nil {
		t.Fatal(err)
	}
	for _, f := range figures {
		_, err := os.Stat(filepath.Join(dir, f.file))
		switch {
		case f.file == "rss.png" && !errors.Is(err, fs.ErrNotExist):
			t.Errorf("rss.png written for in-process kinds only (a floor, even negative): %v", err)
		case f.file != "rss.png" && err != nil:
			t.Errorf("%s: %v", f.file, err)
		}
	}
	// In processes RSS is each agent's own: its plot is written.
	procs := []Row{{Kind: KindMeshProcs, N: 10, RSSMiBPerNode: 60}, {Kind: KindMeshProcs, N: 25, RSSMiBPerNode: 62}}
	if err := Plot(dir, procs); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(filepath.Join(dir, "rss.png")); err != nil || st.Size() == 0 {
		t.Errorf("rss.png for agents in processes: %v", err)
	}
}

// Median takes each figure's median on its own, ranks a NaN (not all
// discovered) as the worst, and keeps the kind and size.
func TestMedian(t *testing.T) {
	nan := math.NaN()
	for _, tc := range []struct {
		name string
		all  []float64
		p50  []float64
		want [2]float64
	}{
		{"odd", []float64{3, 1, 2}, []float64{10, 30, 20}, [2]float64{2, 20}},
		{"one NaN is the worst", []float64{nan, 1, 2}, []float64{1, 1, 1}, [2]float64{2, 1}},
		{"two NaN", []float64{nan, 1, nan}, []float64{5, 4, 6}, [2]float64{nan, 5}},
		{"even takes the upper middle", []float64{4, 1, 3, 2}, []float64{1, 2, 3, 4}, [2]float64{3, 3}},
	} {
		runs := make([]Row, len(tc.all))
		for i := range runs {
			runs[i] = Row{Kind: KindMesh, N: 50, AllDiscoverMs: tc.all[i], DiscoverP50Ms: tc.p50[i], Discovered: 40 + i}
		}
		m := Median(runs)
		same := func(a, b float64) bool { return a == b || math.IsNaN(a) && math.IsNaN(b) }
		if m.Kind != KindMesh || m.N != 50 || !same(m.AllDiscoverMs, tc.want[0]) || !same(m.DiscoverP50Ms, tc.want[1]) {
			t.Errorf("%s: Median = %+v, want all %v p50 %v", tc.name, m, tc.want[0], tc.want[1])
		}
		if m.Discovered != 40+len(runs)/2 {
			t.Errorf("%s: Discovered = %d", tc.name, m.Discovered)
		}
	}
}

// The CSV names each row's network, and an in-memory network's label
// carries its latency and bandwidth.
func TestNetLabelAndBandwidth(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteCSV(&buf, []Row{{Kind: KindMesh, N: 10}, {Kind: KindRaw, Net: netLabel(NetMock, 50*time.Millisecond, 12.5e6), N: 10}}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if !strings.HasSuffix(lines[0], ",net") || !strings.HasSuffix(lines[1], ",loopback") || !strings.HasSuffix(lines[2], ",mock 50ms 12.5MB/s") {
		t.Fatalf("csv:\n%s", buf.String())
	}
	if got := netLabel(NetSim, 50*time.Millisecond, defaultSimBandwidth); got != "sim 50ms 12.5MB/s" {
		t.Errorf("netLabel(sim) = %q", got)
	}
	if got := netLabel(NetLoopback, 50*time.Millisecond, 1); got != NetLoopback {
		t.Errorf("netLabel(loopback) = %q", got)
	}
	for _, tc := range []struct {
		in   string
		want float64
		ok   bool
	}{
		{"", 0, true}, {"0", 0, true}, {"1000", 1000, true}, {"12.5M", 12.5e6, true}, {"2k", 2000, true}, {"1G", 1e9, true},
		{"-1", 0, false}, {"fast", 0, false}, {"M", 0, false},
	} {
		got, err := parseBandwidth(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("parseBandwidth(%q) = %v, %v; want %v (ok %v)", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

// TestReadCSV reads back what WriteCSV wrote, and refuses what it never
// writes, naming the line.
func TestReadCSV(t *testing.T) {
	rows := []Row{
		{Kind: KindMesh, Net: "sim 50ms 12.5MB/s virtual", N: 1000, AllDiscoverMs: 2210, Discovered: 999, DeliveryRatio: 1, BytesPerNodePerPub: 4042, MemMiBPerNode: 8.7},
		{Kind: KindRaw, N: 10, AllDiscoverMs: math.NaN(), Discovered: 7, RSSMiBPerNode: -0.5},
	}
	var buf bytes.Buffer
	if err := WriteCSV(&buf, rows); err != nil {
		t.Fatal(err)
	}
	got, err := ReadCSV(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Kind != KindMesh || got[0].N != 1000 || got[0].Discovered != 999 || got[0].BytesPerNodePerPub != 4042 ||
		got[0].Net != rows[0].Net || got[1].network() != NetLoopback || !math.IsNaN(got[1].AllDiscoverMs) || got[1].RSSMiBPerNode != -0.5 {
		t.Fatalf("read back %+v", got)
	}
	head := strings.Join(header, ",") + "\n"
	good := "mesh,10,1,9,1,1,1,1,1,1,1,1,1,1,1,loopback\n"
	for _, tc := range []struct{ name, csv, want string }{
		{"empty", "", "header"},
		{"another header", strings.Replace(head, "n,", "size,", 1) + good, "header"},
		{"short record", head + "mesh,10,1\n", "wrong number of fields"},
		{"unknown kind", head + strings.Replace(good, "mesh", "nats", 1), "line 2: kind"},
		{"size zero", head + good + strings.Replace(good, ",10,", ",0,", 1), "line 3: n"},
		{"figure not a number", head + strings.Replace(good, "10,1,9", "10,fast,9", 1), "all_discover_ms"},
		{"discovered past n", head + strings.Replace(good, "10,1,9", "10,1,11", 1), "discovered"},
		{"discovered fraction", head + strings.Replace(good, "10,1,9", "10,1,8.5", 1), "discovered"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadCSV(strings.NewReader(tc.csv))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one saying %q", err, tc.want)
			}
		})
	}
}

// TestMerge orders rows by network, kind and size, and refuses two of the
// same point.
func TestMerge(t *testing.T) {
	a := []Row{{Kind: KindRaw, N: 1000, Net: "sim"}, {Kind: KindMesh, N: 1000, Net: "sim"}}
	b := []Row{{Kind: KindMesh, N: 100, Net: "sim"}, {Kind: KindMesh, N: 100}}
	got, err := Merge(a, b)
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, r := range got {
		order = append(order, fmt.Sprintf("%s/%s/%d", r.network(), r.Kind, r.N))
	}
	if want := "loopback/mesh/100 sim/mesh/100 sim/mesh/1000 sim/raw/1000"; strings.Join(order, " ") != want {
		t.Fatalf("order %v, want %s", order, want)
	}
	if _, err := Merge(a, a[:1]); err == nil || !strings.Contains(err.Error(), "two rows of raw at N = 1000") {
		t.Fatalf("a point twice: err = %v", err)
	}
}

// FuzzReadCSV: whatever ReadCSV accepts, WriteCSV writes back in a form
// ReadCSV reads to the same text again, and nothing makes it panic.
func FuzzReadCSV(f *testing.F) {
	f.Add(strings.Join(header, ",") + "\nmesh,10,1,9,1,1,1,1,1,1,1,1,1,1,1,loopback\n")
	f.Add(strings.Join(header, ",") + "\nraw,1000,NaN,999,+Inf,1e3,-0,1,1,1,1,1,1,1,1,\"sim, 50ms\"\n")
	f.Fuzz(func(t *testing.T, in string) {
		rows, err := ReadCSV(strings.NewReader(in))
		if err != nil {
			return
		}
		var once, twice bytes.Buffer
		if err := WriteCSV(&once, rows); err != nil {
			t.Fatal(err)
		}
		again, err := ReadCSV(bytes.NewReader(once.Bytes()))
		if err != nil {
			t.Fatalf("reading what WriteCSV wrote: %v\n%s", err, once.String())
		}
		if err := WriteCSV(&twice, again); err != nil {
			t.Fatal(err)
		}
		if once.String() != twice.String() {
			t.Fatalf("not stable:\n%s\n%s", once.String(), twice.String())
		}
	})
}

// TestLegendWords: what every network of a plot shares is said once, and
// each legend entry keeps what sets its network apart.
func TestLegendWords(t *testing.T) {
	for _, tc := range []struct {
		nets       []string
		shared     string
		firstsOwn  string
		secondsOwn string
	}{
		{[]string{"sim 12.5MB/s virtual", "sim 50ms 12.5MB/s virtual"}, "sim 12.5MB/s virtual", "", "50ms"},
		{[]string{"loopback", "sim 50ms"}, "", "loopback", "sim 50ms"},
		{[]string{"mock 50ms"}, "", "mock 50ms", ""},
	} {
		shared := sharedWords(tc.nets)
		if got := strings.Join(shared, " "); got != tc.shared {
			t.Errorf("%q: shared %q, want %q", tc.nets, got, tc.shared)
		}
		if got := ownWords(tc.nets[0], shared); got != tc.firstsOwn {
			t.Errorf("%q: first's own %q, want %q", tc.nets, got, tc.firstsOwn)
		}
		if len(tc.nets) > 1 {
			if got := ownWords(tc.nets[1], shared); got != tc.secondsOwn {
				t.Errorf("%q: second's own %q, want %q", tc.nets, got, tc.secondsOwn)
			}
		}
	}
}
