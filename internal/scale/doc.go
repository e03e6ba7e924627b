// Package scale measures how the mesh grows with the number of agents,
// beside raw kad-dht and raw GossipSub at the same size in the same run.
//
// The harness is a test (TestScale, run by make scale, skipped unless the
// -scale flag is given) so that it can start nodes the way the package
// tests do; production code never imports this package. For each size N
// it starts N agents on loopback in one process, each bootstrapped to one
// or two random earlier agents with mDNS off and connected to them before
// the next starts (as the raw hosts are, so that both kinds are measured
// from the same sparse graph, not one of them while it forms), and
// records the figures of Row. -scale.kinds and -scale.discovery narrow a
// run to one kind or to the discovery figures. It then builds the same shape with plain libp2p hosts running
// kad-dht and GossipSub with their defaults and records the same figures.
// WriteCSV and Plot turn the rows into a CSV and one PNG per figure, both
// kinds side by side against N.
//
// In-process nodes share one Go runtime, scheduler and garbage collector
// and talk over loopback TCP: there is no network latency or loss, the
// CPU of every node competes for the same cores, and memory and CPU per
// node are the process's figures divided by N. The per-node figures are
// therefore upper bounds on idle cost (the runtime's fixed overhead is
// shared) and the latencies are lower bounds on what a real network adds.
//
// DHT hops are not exposed by kad-dht: a lookup queries up to alpha peers
// at a time and stops when the closest peers have answered, so the path
// length is not defined for one lookup. The harness counts instead the
// peers a lookup sent a query to (kad-dht's SendingQuery query events),
// which is what a lookup costs and what grows with log N.
package scale
