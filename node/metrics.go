package node

import (
	"time"

	"github.com/meshagent/meshagent/metrics"
	"github.com/meshagent/meshagent/protocol"
)

// outcome is a call's metrics label: success or its protocol error code
// (a fixed set).
func outcome(err error) string {
	if err == nil {
		return metrics.OutcomeSuccess
	}
	return string(protocol.CodeOf(err))
}

// observeServed records a request answered. The capability label is the
// action only when this node serves it (or it is a built-in), so a caller
// cannot grow the label set.
func (n *Node) observeServed(action, requester string, err error, start time.Time) {
	n.recordCall(protocol.CallServed, action, requester, err, start)
	m := n.cfg.Metrics
	if m == nil {
		return
	}
	label := action
	if !n.services.serves(action) {
		label = metrics.OtherCapability
	}
	m.ObserveServed(label, outcome(err), time.Since(start))
}

// observeSent records a request sent, to agent (the provider; "" when
// none was found).
func (n *Node) observeSent(action, agent string, err error, start time.Time) {
	n.recordCall(protocol.CallSent, action, agent, err, start)
	n.cfg.Metrics.ObserveSent(outcome(err), time.Since(start))
}

// refused records a message refused before any handler ran.
func (n *Node) refused(reason string) { n.cfg.Metrics.ObserveRefused(reason) }
