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
// With -scale.procs each agent runs in a process of its own: the test
// binary starts itself again as TestScaleAgent, which builds one agent
// with the same function the in-process harness uses for each of its N,
// and the harness drives the N children over a line protocol (JSON, one
// request or reply a line, decoded strictly) on their stdin and stdout:
// addrs, find, subscribe, publish, stats, close. A child reports each
// message it receives with its own receive time (the wall clock, which
// the processes share), so the pipe's latency is not in the publish
// figures; its stats are its own GossipSub counts, CPU time (getrusage)
// and memory. A child exits when its stdin ends, so a harness that dies
// leaves none behind, and the harness kills any left when the test ends.
// The rows' kinds are then mesh-procs and raw-procs.
//
// In-process nodes share one Go runtime, scheduler and garbage collector
// and talk over loopback TCP: there is no network latency or loss, the
// CPU of every node competes for the same cores, and memory and CPU per
// node are what the process gained since the nodes started, divided by
// N. The runtime's fixed cost is then shared, so these per-node figures
// are below what an agent on its own costs, and the latencies are lower
// bounds on what a real network adds. In processes, idle CPU and memory
// per node are the median over the agents of each one's own figures,
// the runtime's fixed cost included: what one agent costs on its own.
// The agents still share the machine's cores and loopback.
//
// With -scale.net mock (make scale SCALENET=mock) the in-process agents
// run on go-libp2p's in-memory network, p2p/net/mock, instead of loopback
// TCP: no sockets, so no descriptor limit, and no transport security or
// stream multiplexer, so a node costs less CPU and memory than on a real
// transport. Every pair of agents is linked (mocknet dials only over a
// link), each link with -scale.latency one way and -scale.bw bytes/s. The
// mesh's nodes are built on the mocknet host (node.WithHost) and the raw
// baseline's kad-dht and GossipSub on another, so both kinds see the same
// network. Mocknet has no bandwidth reporter: the gossip sent is counted
// by the kind tracer instead (each RPC's length prefix and protobuf, the
// bytes go-libp2p-pubsub writes). A row's Net says which network it ran
// on.
//
// Mocknet's latency is not a real link's: a stream delivers its writes
// in order and, once 256 bytes are buffered, holds the next write until
// the buffered ones have arrived, so a stream carries about one write
// of 256 bytes or more per latency (a window of one, where TCP's is
// many). A mesh envelope is over 256 bytes and a raw message is not, so
// at a publish rate near 1/latency the mesh's streams queue before the
// raw ones do: with 50 ms, publish at 5 messages/s or less
// (-scale.rate) for figures about the mesh rather than about mocknet.
//
// With -scale.net sim (make scale SCALENET=sim) they run on go-libp2p's
// simulated packet network instead (x/simlibp2p over marcopolo/simnet,
// which go-libp2p and go-libp2p-pubsub test with): every agent is a QUIC
// endpoint behind an access link of -scale.bw bytes/s each way (12.5M,
// 100 Mbit/s, when unset: simnet paces packets by a rate), queued with
// fq_codel, and every packet takes -scale.latency. QUIC pipelines its
// writes under a congestion window as TCP does, so this is the network
// for figures with WAN latency: at 50 ms the mesh delivers 20 messages a
// second to all where mocknet's window of one held it to 5. Transport
// security is QUIC's TLS, as on a real network; gossip is counted by the
// kind tracer, as on mocknet.
//
// With -scale.synctest as well (make scale SCALESYNCTEST=1) each cluster
// runs in a testing/synctest bubble: time there is virtual and moves only
// when every goroutine of the cluster waits, so discovery and delivery
// times are the network's and the protocols' alone, the same on a loaded
// 2-core machine as on an idle one, and a run takes only the CPU it
// needs. The price: CPU never delays anything, so the figures are those
// of agents each with a fast CPU of its own, and idle CPU is per virtual
// second. Rows say "virtual" in their network.
//
// -scale.join K (make scale SCALEJOIN=K) starts the in-process agents K
// at a time instead of one after another: node 0 alone, then batches of
// K, each agent bootstrapped to agents of the batches before its own,
// and the provider alone last. A large cluster's start is otherwise
// what its run spends most on: every running agent's traffic goes on
// while each next one joins, so its cost grows faster than N². At
// N = 100 on the simulated network with 50 ms, 20 at a time start in
// 1.4 virtual seconds and 32 s of CPU where one at a time took 16.2 and
// 157. A mesh started in batches forms all at once, so its first
// heartbeats come at the configured pace: measure it settled
// (-scale.settle). With K = 1 the bootstrap graph is the same as before.
//
// -scale.joingap D (make scale SCALEJOINGAP=D) starts a batch every D,
// virtual with -scale.synctest: agents arrive at a pace.
// Without it a virtual-time start takes a second or two whatever N is,
// and every agent's first lookups, each connecting it to dozens of peers
// within the connection manager's grace period, come at once: at N = 300,
// 50 at once, the process passed 12.8 GB resident in its discovery phase
// and was still growing, where with 10 s between batches it peaked at
// 6.7 GB and finished. A start logs, at each tenth of N, its time, CPU,
// live heap, resident memory and goroutines, which say early whether a
// large cluster will fit.
//
// On the simulated network every agent of both kinds has the same
// connection manager, with the watermarks of -scale.conns (make scale
// SCALECONNS=LOW:HIGH; 32:64 when unset) and the node's grace period
// (10 s) and trim interval (1 s); a mesh node is given the same limits
// (node.WithConnLimits), so that its own trim at HighWater inbound agrees.
// An agent then holds at most about HIGH connections, each with QUIC's
// buffers, and memory per agent stops growing with N once N passes HIGH.
// The node's own defaults (96:192) would bound nothing below N = 192.
// -scale.conns libp2p gives every host go-libp2p's default manager
// instead (160:192, one minute's grace), as the harness had before: below
// N = 192 an agent then keeps every connection it makes. Rows on the
// simulated network name their watermarks ("conns 32:64").
//
// -scale.settle (make scale SCALESETTLE=120s) waits a quiet window after
// discovery, both kinds alike, before the publish window: a mesh whose
// agents all started at once heartbeats at the configured pace until they
// have heard each other, so without it the window measures the mesh's
// formation as well. -scale.payload pads each published message to that
// many bytes, the same for both kinds, since the mesh's signed envelope
// weighs more beside a 10-byte payload than beside an agent's message.
// Rows name both in their network ("settled 2m0s", "payload 256B"), so
// that runs with and without them never share a line of a plot. The
// window's cost is logged: what each agent sent per second while nothing
// was published, by GossipSub kind and topic.
//
// -scale.cpuprofile writes a CPU profile of each phase (discovery, the
// settle window, the publish window) and the live heap when memory is
// taken, per kind and size: go tool pprof -diff_base on the raw kind's
// heap shows what a mesh agent holds beyond raw libp2p's. In a synctest
// bubble the profiler is started from a goroutine outside it (pprof's
// writer would otherwise be in the bubble, never idle, and stop its
// clock).
//
// make scale-plot (-scale.merge a.csv,b.csv) merges earlier runs' CSVs
// into one CSV and its plots, refusing two rows of one point: the curves
// from 10 to 1,000 agents come from runs of their own, since the largest
// takes more than an hour. -scale.kinds raw,mesh (make scale
// SCALEKINDS=raw,mesh) measures the baseline first.
//
// DHT hops are not exposed by kad-dht: a lookup queries up to alpha peers
// at a time and stops when the closest peers have answered, so the path
// length is not defined for one lookup. The harness counts instead the
// peers a lookup sent a query to (kad-dht's SendingQuery query events),
// which is what a lookup costs and what grows with log N.
package scale
