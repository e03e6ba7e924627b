package beadctx

import (
	"fmt"
	"strings"
	"testing"
)

// BenchmarkLatePatch measures the worst case of a late patch: a full
// document (about 60 KiB) and a full log, and a patch that sorts first,
// so the document is recomputed from its base.
func BenchmarkLatePatch(b *testing.B) {
	d := NewDoc()
	pad := strings.Repeat("x", 56<<10)
	_, _ = d.Add(mustPatch(b, 1, 0, "a", OpSet, `{"pad":"`+pad+`"}`))
	for i := range MaxPatches {
		_, _ = d.Add(mustPatch(b, int64(1000+i), 0, "a", OpPatch, fmt.Sprintf(`{"k%d":{"n":%d}}`, i%64, i)))
	}
	b.ResetTimer()
	for i := range b.N {
		if _, err := d.Add(mustPatch(b, 1500, uint32(i+1), "b", OpPatch, `{"late":true}`)); err != nil {
			b.Fatal(err)
		}
	}
}
