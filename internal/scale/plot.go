package scale

import (
	"fmt"
	"image/color"
	"math"
	"path/filepath"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// figure is one plot: a Row field against N.
type figure struct {
	file, title, unit string
	value             func(Row) float64
	// kinds are the kinds the figure means something for; nil: all.
	kinds []string
}

var figures = []figure{
	{"all-discover.png", "Time until every node discovers the capability", "ms", func(r Row) float64 { return r.AllDiscoverMs }, nil},
	{"discover-p50.png", "Discovery p50 (lookup + hello/connect)", "ms", func(r Row) float64 { return r.DiscoverP50Ms }, nil},
	{"discover-p99.png", "Discovery p99 (lookup + hello/connect)", "ms", func(r Row) float64 { return r.DiscoverP99Ms }, nil},
	{"queried.png", "Peers queried per DHT lookup", "peers", func(r Row) float64 { return r.QueriedPerLookup }, nil},
	{"publish-p50.png", "Publish to all subscribers p50 at 20 msgs/s", "ms", func(r Row) float64 { return r.PublishP50Ms }, nil},
	{"publish-p99.png", "Publish to all subscribers p99 at 20 msgs/s", "ms", func(r Row) float64 { return r.PublishP99Ms }, nil},
	{"delivery.png", "Delivery ratio", "ratio", func(r Row) float64 { return r.DeliveryRatio }, nil},
	{"msgs-per-node.png", "GossipSub RPCs sent per node per published message", "RPCs", func(r Row) float64 { return r.MsgsPerNodePerPub }, nil},
	{"bytes-per-node.png", "GossipSub bytes sent per node per published message", "bytes", func(r Row) float64 { return r.BytesPerNodePerPub }, nil},
	{"idle-cpu.png", "Idle CPU per node", "% of one core", func(r Row) float64 { return r.IdleCPUPercent }, nil},
	{"memory.png", "Memory per node (heap + stacks)", "MiB", func(r Row) float64 { return r.MemMiBPerNode }, nil},
	// In one process a node's RSS is only a floor, even negative (Row):
	// the figure is the agents' in processes.
	{file: "rss.png", title: "Resident memory per node (RSS)", unit: "MiB", value: func(r Row) float64 { return r.RSSMiBPerNode },
		kinds: []string{KindMeshProcs, KindRawProcs}},
}

// kindColors keeps each kind's colour the same on every plot; a kind in
// processes has its in-process kind's colour and a dashed line.
var kindColors = map[string]color.Color{
	KindMesh:      color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	KindRaw:       color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
	KindMeshProcs: color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	KindRawProcs:  color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
}

// series is one line of a plot: a kind on a network.
type series struct{ kind, net string }

// seriesOf returns the (kind, network) pairs of rows whose kind is in
// kinds, in kinds' order and then in the order rows first show them.
func seriesOf(rows []Row, kinds []string) []series {
	var out []series
	for _, kind := range kinds {
		for _, r := range rows {
			if s := (series{kind, r.network()}); r.Kind == kind && !slices.Contains(out, s) {
				out = append(out, s)
			}
		}
	}
	return out
}

// Plot writes one PNG per figure into dir: each figure against N, one
// line per kind and network. Figures that are NaN (not measured) are left out, and a
// plot with no line (a figure only for kinds not in rows) is not written.
// A kind keeps its colour on every plot; each network has its own dashes
// and kinds in processes their own marks. What every line shares (the
// network's words all rows have) is said once under the axis, not in
// each legend entry; N is on a log scale when the sizes span 20× or
// more (10 to 1,000).
func Plot(dir string, rows []Row) error {
	nets := networks(rows)
	shared := sharedWords(nets)
	for _, f := range figures {
		p := plot.New()
		p.Title.Text = f.title
		p.X.Label.Text = "nodes (N)"
		if len(shared) > 0 {
			p.X.Label.Text += "; all: " + strings.Join(shared, " ")
		}
		p.Y.Label.Text = f.unit
		p.Legend.Top = true
		p.Legend.Left = true
		kinds := f.kinds
		if kinds == nil {
			kinds = []string{KindMesh, KindRaw, KindMeshProcs, KindRawProcs}
		}
		lines, lo, hi := 0, math.Inf(1), 0.0
		for _, sr := range seriesOf(rows, kinds) {
			var pts plotter.XYs
			for _, r := range rows {
				if v := f.value(r); r.Kind == sr.kind && r.network() == sr.net && !math.IsNaN(v) && !math.IsInf(v, 0) {
					pts = append(pts, plotter.XY{X: float64(r.N), Y: v})
					lo, hi = min(lo, float64(r.N)), max(hi, float64(r.N))
				}
			}
			if len(pts) == 0 {
				continue
			}
			line, dots, err := plotter.NewLinePoints(pts)
			if err != nil {
				return fmt.Errorf("scale: plot %s: %w", f.file, err)
			}
			line.Color, dots.Color = kindColors[sr.kind], kindColors[sr.kind]
			line.Dashes = netDashes[slices.Index(nets, sr.net)%len(netDashes)]
			if sr.kind == KindMeshProcs || sr.kind == KindRawProcs {
				dots.Shape = draw.TriangleGlyph{}
			}
			p.Add(line, dots)
			label := sr.kind
			if own := ownWords(sr.net, shared); own != "" {
				label += " (" + own + ")"
			}
			p.Legend.Add(label, line, dots)
			lines++
		}
		if lines == 0 {
			continue
		}
		if hi >= 20*lo {
			p.X.Scale = plot.LogScale{}
			p.X.Tick.Marker = plot.LogTicks{Prec: -1}
		}
		if err := p.Save(6*vg.Inch, 4*vg.Inch, filepath.Join(dir, f.file)); err != nil {
			return fmt.Errorf("scale: plot %s: %w", f.file, err)
		}
	}
	return nil
}

// netDashes are the networks' line styles, in the order rows first show
// the networks: solid, dotted, dashed, dash-dotted.
var netDashes = [][]vg.Length{
	nil,
	{vg.Points(2), vg.Points(2)},
	{vg.Points(6), vg.Points(3)},
	{vg.Points(6), vg.Points(2), vg.Points(1), vg.Points(2)},
}

// networks returns the rows' networks in the order rows first show them.
func networks(rows []Row) []string {
	var out []string
	for _, r := range rows {
		if !slices.Contains(out, r.network()) {
			out = append(out, r.network())
		}
	}
	return out
}

// sharedWords returns the words of the first network that every network
// has, in its order (none for a single network: its legend says it all).
func sharedWords(nets []string) []string {
	if len(nets) < 2 {
		return nil
	}
	var out []string
	for _, w := range strings.Fields(nets[0]) {
		if !slices.ContainsFunc(nets[1:], func(n string) bool { return !slices.Contains(strings.Fields(n), w) }) {
			out = append(out, w)
		}
	}
	return out
}

// ownWords returns net without the shared words.
func ownWords(net string, shared []string) string {
	var own []string
	for _, w := range strings.Fields(net) {
		if !slices.Contains(shared, w) {
			own = append(own, w)
		}
	}
	return strings.Join(own, " ")
}
