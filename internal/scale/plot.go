package scale

import (
	"fmt"
	"image/color"
	"math"
	"path/filepath"
	"slices"

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
func Plot(dir string, rows []Row) error {
	for _, f := range figures {
		p := plot.New()
		p.Title.Text = f.title
		p.X.Label.Text = "nodes (N)"
		p.Y.Label.Text = f.unit
		p.Legend.Top = true
		p.Legend.Left = true
		kinds := f.kinds
		if kinds == nil {
			kinds = []string{KindMesh, KindRaw, KindMeshProcs, KindRawProcs}
		}
		lines := 0
		for _, sr := range seriesOf(rows, kinds) {
			var pts plotter.XYs
			for _, r := range rows {
				if v := f.value(r); r.Kind == sr.kind && r.network() == sr.net && !math.IsNaN(v) && !math.IsInf(v, 0) {
					pts = append(pts, plotter.XY{X: float64(r.N), Y: v})
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
			switch {
			case sr.kind == KindMeshProcs || sr.kind == KindRawProcs:
				line.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
			case sr.net != NetLoopback && sr.net != NetMock && sr.net != NetSim:
				// an in-memory network with latency: dotted, hollow marks
				line.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
				dots.Shape = draw.RingGlyph{}
			case sr.net == NetMock || sr.net == NetSim:
				dots.Shape = draw.SquareGlyph{}
			}
			p.Add(line, dots)
			label := sr.kind
			if sr.net != NetLoopback {
				label += " (" + sr.net + ")"
			}
			p.Legend.Add(label, line, dots)
			lines++
		}
		if lines == 0 {
			continue
		}
		if err := p.Save(6*vg.Inch, 4*vg.Inch, filepath.Join(dir, f.file)); err != nil {
			return fmt.Errorf("scale: plot %s: %w", f.file, err)
		}
	}
	return nil
}
