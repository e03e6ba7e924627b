// Package metrics holds a process's Prometheus registry and the meshagent
// collectors, and serves /metrics, /healthz and /readyz over HTTP.
//
// One Registry per process (never the global default) is created by New and
// passed to the parts that record into it through their functional options.
// Label values are bounded: capability names are those the node serves (a
// call for anything else is recorded as "other"), outcomes are the fixed set
// of protocol error codes plus "success". No agent or message ids are labels.
// The package imports nothing of the project.
package metrics
