// Package metrics holds a process's Prometheus registry and the node's
// call collectors, and serves /metrics, /healthz and /readyz over HTTP.
//
// One Registry per process (never the global default) is created by New and
// passed to the parts that record into it through their functional options.
// The node's calls and refusals are recorded here (Observe…); the other
// parts own their figures and their names, as go-libp2p's subsystems do:
// the topic router, the directory, the bus, the lobby and the store each
// take the registry as a prometheus.Registerer (their WithMetrics) and
// register their collectors from their constructor, which fails when a
// name is registered twice; they import nothing of this package.
// go-libp2p's resource manager registers its own (libp2p_rcmgr_…).
//
// Label values are bounded: capability names are those the node serves (a
// call for anything else is recorded as "other"), outcomes are the fixed set
// of protocol error codes plus "success", reasons and operations are fixed
// sets, and a topic family is a label only once the node has joined it.
// No agent or message ids are labels. The package imports nothing of the
// project.
package metrics
