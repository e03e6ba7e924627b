package node

import (
	"bytes"
	"encoding/json"
	"sync"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshagent/meshagent/metrics"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/sign"
)

// sealFrame builds, signs and frames an envelope of type typ for the agent
// whose id string is to.
func (n *Node) sealFrame(typ protocol.MessageType, to string, payload any) ([]byte, error) {
	return n.sealFrameMeta(typ, to, payload, nil)
}

// sealFrameMeta is sealFrame with the envelope's metadata (canonical JSON
// object, or nil).
func (n *Node) sealFrameMeta(typ protocol.MessageType, to string, payload any, meta json.RawMessage) ([]byte, error) {
	// The payload is encoded into the frame rather than on its own first.
	return protocol.SealPayloadFrame(n.signer, n.header(typ, to, meta), payload)
}

// framePool holds buffers to seal frames in that are written as soon as
// they are sealed and then dropped (a request, a response): a buffer is
// reused once its frame is written, as a stream keeps nothing of what it
// is given to write.
var framePool = sync.Pool{New: func() any { return new([]byte) }}

// maxPooledFrame bounds the buffers kept, so that one large frame does
// not stay in memory for small ones.
const maxPooledFrame = 64 << 10

// sealPooledFrame is sealFrameMeta with a buffer from framePool. Once the
// frame is written, putFrame must return the buffer, and the frame must
// not be used again.
func (n *Node) sealPooledFrame(typ protocol.MessageType, to string, payload any, meta json.RawMessage) (frame []byte, buf *[]byte, err error) {
	buf = framePool.Get().(*[]byte)
	frame, err = protocol.SealPayloadFrameInto(*buf, n.signer, n.header(typ, to, meta), payload)
	return frame, buf, err
}

// putFrame returns the buffer of sealPooledFrame to the pool. When the
// frame did not fit in it, the buffer is replaced by one with room for a
// frame a quarter larger than this one. (The frame's own array will not
// do: the frame begins a few bytes into it, so the next frame of the same
// size would not fit.)
func putFrame(buf *[]byte, frame []byte) {
	if c := cap(frame); c > cap(*buf) && c+c/4 <= maxPooledFrame {
		*buf = make([]byte, 0, c+c/4)
	}
	framePool.Put(buf)
}

// sealJSON builds and signs an envelope as sealFrame does and returns its
// embedded JSON form, for answers that never cross a stream.
func (n *Node) sealJSON(typ protocol.MessageType, to string, payload any) (json.RawMessage, error) {
	e, err := n.envelope(typ, to, payload, nil)
	if err != nil {
		return nil, err
	}
	body, sig, err := protocol.Seal(n.signer, e)
	if err != nil {
		return nil, err
	}
	return protocol.SignedJSON(body, sig)
}

// envelope builds an unsigned envelope from this agent.
func (n *Node) envelope(typ protocol.MessageType, to string, payload any, meta json.RawMessage) (*protocol.Envelope, error) {
	p, err := protocol.MarshalCanonical(payload)
	if err != nil {
		return nil, protocol.Errorf(protocol.CodeInvalidMessage, "protocol: payload: %v", err)
	}
	e := n.header(typ, to, meta)
	e.Payload = p
	return e, nil
}

// header builds an unsigned envelope from this agent, all but its
// payload: protocol.NewEnvelope, but stamped once, by this node's clock.
func (n *Node) header(typ protocol.MessageType, to string, meta json.RawMessage) *protocol.Envelope {
	// The envelope and its recipient in one allocation.
	h := &struct {
		e  protocol.Envelope
		to protocol.Recipient
	}{to: protocol.Recipient{AgentID: to}}
	e := &h.e
	*e = protocol.Envelope{
		Protocol:  protocol.Version,
		ID:        protocol.NewID(),
		Timestamp: protocol.FormatTime(n.cfg.Now()),
		To:        &h.to,
		Type:      typ,
		Metadata:  meta,
	}
	if typ == protocol.TypeHello || typ == protocol.TypeRequest {
		e.From.Name = n.cfg.Name
		e.From.Capabilities = n.services.capabilityNames()
	}
	return e
}

// openFrame verifies and decodes a signed frame read from remote, then
// applies the receiver rules every envelope obeys: addressed to this agent,
// fresh, and not seen before.
func (n *Node) openFrame(frame []byte, remote peer.ID) (*protocol.Envelope, error) {
	sig, body, err := protocol.SplitSigned(frame)
	if err != nil {
		n.refused(metrics.RefusedInvalid)
		return nil, protocol.Errorf(protocol.CodeInvalidMessage, "%v", err)
	}
	e, err := protocol.Open(body, sig, remote)
	if err != nil {
		if protocol.CodeOf(err) == protocol.CodeInvalidSignature {
			n.refused(metrics.RefusedSignature)
		} else {
			n.refused(metrics.RefusedInvalid)
		}
		return nil, err
	}
	if e.To != nil && e.To.AgentID != "" && e.To.AgentID != n.idStr {
		if id, err := sign.ParseAgentID(e.To.AgentID); err != nil || id != n.id {
			n.refused(metrics.RefusedInvalid)
			return nil, protocol.Errorf(protocol.CodeUnknownAgent, "message is addressed to %.64s, not to this agent (%s)", e.To.AgentID, n.idStr)
		}
	}
	ts, err := e.Time()
	if err != nil {
		n.refused(metrics.RefusedInvalid)
		return nil, err
	}
	if err := n.replay.Check(string(remote), e.ID, ts, n.cfg.Now()); err != nil {
		n.refused(metrics.RefusedReplay)
		return nil, protocol.Errorf(protocol.CodeInvalidMessage, "%v", err)
	}
	return e, nil
}

// correlationHint pulls the correlationId out of bytes that failed
// verification, so the error reply can be matched by the caller. It is a
// hint echoed back to the sender, never trusted for anything else.
func correlationHint(frame []byte) string {
	raw, plain := correlationHintRaw(frame)
	if plain {
		return string(raw)
	}
	var s string
	if raw == nil || json.Unmarshal(raw, &s) != nil {
		return ""
	}
	return s
}

// correlationHintRaw finds the correlationId in frame. plain says raw is
// the id itself, printable ASCII that needs no unescaping (as every id
// this package makes); otherwise raw is the id as quoted in the frame, or
// nil when there is none.
func correlationHintRaw(frame []byte) (raw []byte, plain bool) {
	const key = `"correlationId":"`
	i := bytes.Index(frame, []byte(key))
	if i < 0 {
		return nil, false
	}
	rest := frame[i+len(key):]
	j := bytes.IndexByte(rest, '"')
	if j <= 0 || j > protocol.MaxIDLen {
		return nil, false
	}
	for _, c := range rest[:j] {
		if c < 0x20 || c > 0x7e || c == '\\' {
			return frame[i+len(key)-1 : i+len(key)+j+1], false
		}
	}
	return rest[:j], true
}
