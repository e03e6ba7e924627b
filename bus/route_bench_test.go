package bus

import (
	"fmt"
	"testing"
)

// BenchmarkRoute routes a topic that every subscription of the table
// matches, each under a pattern of its own.
//
//	go test ./bus -run '^$' -bench Route -benchmem
func BenchmarkRoute(b *testing.B) {
	for _, n := range []int{1, 4, 10, 32, 100} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			t := &subTable{}
			for i := range n {
				t.subs = append(t.subs, &subscription{pattern: fmt.Sprintf("bench:r*%d*", i)})
			}
			topic := "bench:r"
			for i := range n {
				topic += fmt.Sprint(i)
			}
			b.ReportAllocs()
			for b.Loop() {
				if got := t.route(topic); len(got) == 0 {
					b.Fatal("nothing routed")
				}
			}
		})
	}
}
