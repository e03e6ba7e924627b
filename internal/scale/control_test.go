package scale

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/libp2p/go-libp2p/core/peer"
)

// The control protocol between the harness and an agent in a process of
// its own: JSON lines, a request on the child's stdin, a reply on its
// stdout. Replies carry their request's id; a message the agent received
// on the probe topic comes unasked, as a reply with id 0 and op "msg".
// Both ends decode strictly (unknown fields, trailing data and unknown
// ops are errors): a line is still input.

// Ops of a request, and of the unasked reply.
const (
	opAddrs     = "addrs"     // the agent's addresses and id, and whether it joined
	opFind      = "find"      // look the provider up and reach it
	opSubscribe = "subscribe" // report every message received on the probe topic
	opPublish   = "publish"   // publish a payload on the probe topic
	opStats     = "stats"     // bytes, RPCs, kinds, CPU and memory
	opClose     = "close"     // close the agent and exit
	opMsg       = "msg"       // a message received (child to harness only)
)

// agentEnv names the environment variable that makes TestScaleAgent an
// agent: it holds the agent's spec as JSON.
const agentEnv = "MESHAGENT_SCALE_AGENT"

// agentSpec is what a child builds: one agent as startMesh or startRaw
// builds its i-th.
type agentSpec struct {
	Kind     string          `json:"kind"` // KindMesh or KindRaw
	Index    int             `json:"index"`
	Boot     []peer.AddrInfo `json:"boot"`
	Provider bool            `json:"provider"`
	// Join waits, for the mesh, until the agent is connected to its
	// bootstrap peers before it answers addrs.
	Join bool `json:"join"`
	// ProvideBoundMs bounds the raw provider's provides.
	ProvideBoundMs int64 `json:"provide_bound_ms"`
}

// request is one line from the harness to an agent.
type request struct {
	ID        uint64 `json:"id"`
	Op        string `json:"op"`
	Want      string `json:"want,omitempty"`       // find: the provider's id
	TimeoutMs int64  `json:"timeout_ms,omitempty"` // find, publish
	Payload   []byte `json:"payload,omitempty"`    // publish
	Take      bool   `json:"take,omitempty"`       // stats: start the kind counts afresh
	Mem       bool   `json:"mem,omitempty"`        // stats: collect, then measure memory
}

// reply is one line from an agent to the harness.
type reply struct {
	ID  uint64 `json:"id"`
	Op  string `json:"op,omitempty"` // opMsg for a message received, else empty
	Err string `json:"err,omitempty"`
	// addrs
	Info    *peer.AddrInfo `json:"info,omitempty"`
	AgentID string         `json:"agent_id,omitempty"`
	// JoinErr says the agent did not connect to its bootstrap peers.
	JoinErr string `json:"join_err,omitempty"`
	// find
	Found   bool `json:"found,omitempty"`
	Queried int  `json:"queried,omitempty"`
	// msg: the payload and when the agent received it (wall clock,
	// UnixNano: the processes share a machine and its clock, so the
	// harness compares it with its publish times and the pipe's latency
	// is not counted).
	Payload []byte `json:"payload,omitempty"`
	AtNs    int64  `json:"at_ns,omitempty"`
	// stats
	Stats *agentStats `json:"stats,omitempty"`
}

// agentStats is an agent's own figures.
type agentStats struct {
	RPCs  int64            `json:"rpcs"`  // GossipSub RPCs sent so far
	Bytes int64            `json:"bytes"` // and their bytes
	Kinds map[string]int64 `json:"kinds,omitempty"`
	// CPUNs is the process's user and system CPU time, WallNs the wall
	// clock it was read at.
	CPUNs  int64 `json:"cpu_ns"`
	WallNs int64 `json:"wall_ns"`
	// Heap and stacks after a collection, and RSS (with mem).
	HeapBytes uint64 `json:"heap_bytes,omitempty"`
	RSSBytes  uint64 `json:"rss_bytes,omitempty"`
}

// errProtocol marks a line the other end should not have sent.
var errProtocol = errors.New("scale: control protocol")

// decodeStrict decodes one JSON value from line into v, refusing unknown
// fields and anything after the value.
func decodeStrict(line []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: %q: %w", errProtocol, clip(line), err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: %q: data after the value", errProtocol, clip(line))
	}
	return nil
}

// decodeRequest decodes and checks a request line.
func decodeRequest(line []byte) (request, error) {
	var r request
	if err := decodeStrict(line, &r); err != nil {
		return r, err
	}
	switch r.Op {
	case opAddrs, opFind, opSubscribe, opPublish, opStats, opClose:
	default:
		return r, fmt.Errorf("%w: unknown op %q", errProtocol, r.Op)
	}
	if r.ID == 0 {
		return r, fmt.Errorf("%w: %s without an id", errProtocol, r.Op)
	}
	return r, nil
}

// decodeReply decodes and checks a reply line.
func decodeReply(line []byte) (reply, error) {
	var r reply
	if err := decodeStrict(line, &r); err != nil {
		return r, err
	}
	if (r.ID == 0) != (r.Op == opMsg) || (r.Op != "" && r.Op != opMsg) {
		return r, fmt.Errorf("%w: reply id %d with op %q", errProtocol, r.ID, r.Op)
	}
	return r, nil
}

func clip(b []byte) []byte {
	if len(b) > 200 {
		return b[:200]
	}
	return b
}

// TestControlDecodeStrict: a line with an unknown field, data after the
// value, an unknown op or no id is refused; a message is the only reply
// without an id.
func TestControlDecodeStrict(t *testing.T) {
	for _, tc := range []struct {
		line string
		ok   bool
	}{
		{`{"id":1,"op":"find","want":"x","timeout_ms":10}`, true},
		{`{"id":2,"op":"stats","take":true,"mem":true}`, true},
		{`{"id":1,"op":"find","wants":"x"}`, false},
		{`{"id":1,"op":"find"} {"id":2,"op":"find"}`, false},
		{`{"id":1,"op":"find"}x`, false},
		{`{"id":1,"op":"exec"}`, false},
		{`{"op":"stats"}`, false},
		{`{"id":1,"op":"msg"}`, false},
		{`[1]`, false},
		{``, false},
	} {
		_, err := decodeRequest([]byte(tc.line))
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, errProtocol)) {
			t.Errorf("request %q: %v", tc.line, err)
		}
	}
	for _, tc := range []struct {
		line string
		ok   bool
	}{
		{`{"id":3,"found":true,"queried":7}`, true},
		{`{"id":0,"op":"msg","payload":"e30=","at_ns":1}`, true},
		{`{"id":0}`, false},
		{`{"id":3,"op":"msg"}`, false},
		{`{"id":3,"op":"find"}`, false},
		{`{"id":3,"stats":{"rpcs":1,"bytes":2,"cpu_ns":3,"wall_ns":4,"extra":5}}`, false},
	} {
		_, err := decodeReply([]byte(tc.line))
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, errProtocol)) {
			t.Errorf("reply %q: %v", tc.line, err)
		}
	}
}
