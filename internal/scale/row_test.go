package scale

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
		if st, err := os.Stat(filepath.Join(dir, f.file)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f.file, err)
		}
	}
}
