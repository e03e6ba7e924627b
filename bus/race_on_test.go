//go:build race

package bus

// raceEnabled: the race detector moves values to the heap that escape
// analysis keeps on the stack, so allocation counts do not hold under it
// (make test runs the TestAllocs tests again without it).
const raceEnabled = true
