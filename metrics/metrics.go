package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// OutcomeSuccess is the outcome label of a call that succeeded; every other
// outcome is a protocol error code (a fixed set).
const OutcomeSuccess = "success"

// OtherCapability is the capability label of a call for a capability the
// node does not serve, so a caller cannot grow the label set.
const OtherCapability = "other"

// Metrics is the set of meshagent collectors in one registry. A nil
// *Metrics records nothing, so instrumented code needs no checks.
type Metrics struct {
	// Registry holds every collector of the process.
	Registry *prometheus.Registry

	callsServed    *prometheus.CounterVec
	handlerSeconds *prometheus.HistogramVec
	callsSent      *prometheus.CounterVec
	callSeconds    *prometheus.HistogramVec
	refusals       *prometheus.CounterVec
}

// Refusal reasons, the fixed label set of meshagent_refusals_total.
const (
	RefusedRateLimit = "rate_limit" // request rate or size over the requester's limit
	RefusedACL       = "acl"        // requester not in authorized_requester_ids
	RefusedSchema    = "schema"     // params do not match input_schema
	RefusedSignature = "signature"  // bad signature or key/id mismatch
	RefusedReplay    = "replay"     // message id seen inside the window, or timestamp outside the skew
	RefusedPolicy    = "policy"     // the node's policy does not allow it
	RefusedInvalid   = "invalid"    // malformed or misaddressed message
)

// New creates a registry with the Go and process collectors and the
// meshagent collectors registered.
func New() *Metrics {
	reg := prometheus.NewRegistry()
	m := &Metrics{
		Registry: reg,
		callsServed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshagent_calls_served_total",
			Help: "Requests this node answered, by capability and outcome (success or a protocol error code).",
		}, []string{"capability", "outcome"}),
		handlerSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "meshagent_call_handler_seconds",
			Help:    "Time from a request's receipt to its final answer on this node, by capability.",
			Buckets: prometheus.DefBuckets,
		}, []string{"capability"}),
		callsSent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshagent_calls_sent_total",
			Help: "Requests this node sent, by outcome (success or a protocol error code).",
		}, []string{"outcome"}),
		callSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "meshagent_call_latency_seconds",
			Help:    "Round-trip time of requests this node sent, by outcome.",
			Buckets: prometheus.DefBuckets,
		}, []string{"outcome"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshagent_refusals_total",
			Help: "Messages refused before any handler ran, by reason (rate_limit, acl, schema, signature, replay, policy, invalid).",
		}, []string{"reason"}),
	}
	for _, r := range []string{RefusedRateLimit, RefusedACL, RefusedSchema, RefusedSignature, RefusedReplay, RefusedPolicy, RefusedInvalid} {
		m.refusals.WithLabelValues(r) // every reason is exported from the start, at 0
	}
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.callsServed, m.handlerSeconds, m.callsSent, m.callSeconds, m.refusals,
	)
	return m
}

// ObserveServed records a request answered for capability with outcome,
// which took d. capability must be one the node serves or OtherCapability.
func (m *Metrics) ObserveServed(capability, outcome string, d time.Duration) {
	if m == nil {
		return
	}
	m.callsServed.WithLabelValues(capability, outcome).Inc()
	m.handlerSeconds.WithLabelValues(capability).Observe(d.Seconds())
}

// ObserveSent records a request sent with outcome, which took d.
func (m *Metrics) ObserveSent(outcome string, d time.Duration) {
	if m == nil {
		return
	}
	m.callsSent.WithLabelValues(outcome).Inc()
	m.callSeconds.WithLabelValues(outcome).Observe(d.Seconds())
}

// ObserveRefused records a message refused for reason, one of the
// Refused… constants.
func (m *Metrics) ObserveRefused(reason string) {
	if m == nil {
		return
	}
	m.refusals.WithLabelValues(reason).Inc()
}

// Gauge registers a gauge named name whose value is read from f at each
// scrape (connected peers, bus clients, outbox depth). A name registered
// twice is an error.
func (m *Metrics) Gauge(name, help string, f func() float64) error {
	if m == nil {
		return nil
	}
	return m.Registry.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f))
}

// CounterFunc registers a counter named name whose value is read from f
// at each scrape, for a count its owner keeps (items a mailbox displaced).
// A name registered twice is an error.
func (m *Metrics) CounterFunc(name, help string, f func() float64) error {
	if m == nil {
		return nil
	}
	return m.Registry.Register(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, f))
}
