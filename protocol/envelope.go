package protocol

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshagent/meshagent/sign"
)

// MessageType is the type of an envelope.
type MessageType string

// The message types of seed 002.
const (
	TypeHello    MessageType = "hello"
	TypeRequest  MessageType = "request"
	TypeResponse MessageType = "response"
	TypeNotify   MessageType = "notify"
	TypeError    MessageType = "error"
)

// Valid reports whether t is a known message type.
func (t MessageType) Valid() bool {
	switch t {
	case TypeHello, TypeRequest, TypeResponse, TypeNotify, TypeError:
		return true
	}
	return false
}

// Limits on envelope fields, so that a hostile peer cannot make a receiver
// index or log unbounded strings.
const (
	MaxIDLen   = 128
	MaxNameLen = 256
)

// TimestampLayout is how envelopes carry time: RFC 3339 in UTC with
// milliseconds, the form JavaScript's Date.prototype.toISOString prints.
// Receivers accept any RFC 3339 time.
const TimestampLayout = "2006-01-02T15:04:05.000Z07:00"

// Sender is the "from" object of an envelope. Fields are in canonical key
// order.
type Sender struct {
	AgentID      string   `json:"agentId"`
	Capabilities []string `json:"capabilities,omitempty"`
	Name         string   `json:"name,omitempty"`
}

// Recipient is the "to" object of an envelope. A direct message names
// AgentID; a topic message sets Broadcast and Topic.
type Recipient struct {
	AgentID   string `json:"agentId,omitempty"`
	Broadcast bool   `json:"broadcast"`
	Topic     string `json:"topic,omitempty"`
}

// Envelope is the AgentProtocol message (seed 002). Fields are declared in
// canonical key order so that encoding them is canonical in the common
// case. Signature is set only in the embedded (edge) form; between nodes
// the signature travels beside the canonical bytes.
type Envelope struct {
	From      Sender          `json:"from"`
	ID        string          `json:"id"`
	Metadata  json.RawMessage `json:"metadata,omitempty"`
	Payload   json.RawMessage `json:"payload"`
	Protocol  string          `json:"protocol"`
	Signature string          `json:"signature,omitempty"`
	Timestamp string          `json:"timestamp"`
	To        *Recipient      `json:"to,omitempty"`
	Type      MessageType     `json:"type"`
}

// NewID returns a random UUID (version 4) for an envelope id.
func NewID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	var out [36]byte
	hex.Encode(out[0:8], b[0:4])
	out[8] = '-'
	hex.Encode(out[9:13], b[4:6])
	out[13] = '-'
	hex.Encode(out[14:18], b[6:8])
	out[18] = '-'
	hex.Encode(out[19:23], b[8:10])
	out[23] = '-'
	hex.Encode(out[24:], b[10:])
	return string(out[:])
}

// FormatTime formats t as an envelope timestamp.
func FormatTime(t time.Time) string { return t.UTC().Format(TimestampLayout) }

// New returns an unsigned envelope of type typ with a fresh id and the
// current time. payload is marshalled to canonical JSON; a json.RawMessage
// payload is canonicalised.
func NewEnvelope(typ MessageType, to *Recipient, payload any) (*Envelope, error) {
	p, err := MarshalCanonical(payload)
	if err != nil {
		return nil, fmt.Errorf("protocol: payload: %w", err)
	}
	return &Envelope{
		Protocol:  Version,
		ID:        NewID(),
		Timestamp: FormatTime(time.Now()),
		To:        to,
		Type:      typ,
		Payload:   p,
	}, nil
}

// MarshalCanonical encodes v as RFC 8785 canonical JSON.
func MarshalCanonical(v any) ([]byte, error) {
	if b, ok := fastMarshal(v); ok {
		return b, nil
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	b = b[:len(b)-1] // Encode appends a newline
	return sign.Canonicalize(b)
}

// Time parses the envelope's timestamp.
func (e *Envelope) Time() (time.Time, error) {
	if !isRFC3339(e.Timestamp) {
		return time.Time{}, Errorf(CodeInvalidMessage, "timestamp %q is not RFC 3339", truncate(e.Timestamp, 40))
	}
	t, err := time.Parse(time.RFC3339Nano, e.Timestamp)
	if err != nil {
		return time.Time{}, Errorf(CodeInvalidMessage, "timestamp %q is not RFC 3339", truncate(e.Timestamp, 40))
	}
	return t, nil
}

// isRFC3339 checks the syntax YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM).
// time.Parse alone also accepts a one-digit hour, a comma before the
// fraction and offsets up to ±99:59, which other implementations refuse.
func isRFC3339(s string) bool {
	digits := func(i, n int) bool {
		if i+n > len(s) {
			return false
		}
		for _, c := range []byte(s[i : i+n]) {
			if c < '0' || c > '9' {
				return false
			}
		}
		return true
	}
	if len(s) < len("2006-01-02T15:04:05Z") || !digits(0, 4) || s[4] != '-' || !digits(5, 2) || s[7] != '-' ||
		!digits(8, 2) || s[10] != 'T' || !digits(11, 2) || s[13] != ':' || !digits(14, 2) || s[16] != ':' || !digits(17, 2) {
		return false
	}
	i := 19
	if s[i] == '.' {
		j := i + 1
		for j < len(s) && s[j] >= '0' && s[j] <= '9' {
			j++
		}
		if j == i+1 {
			return false
		}
		i = j
	}
	switch {
	case s[i:] == "Z":
		return true
	case len(s)-i != 6 || (s[i] != '+' && s[i] != '-') || !digits(i+1, 2) || s[i+3] != ':' || !digits(i+4, 2):
		return false
	}
	return s[i+1:i+3] <= "23" && s[i+4:i+6] <= "59"
}

// Validate checks the structure every receiver relies on. It does not check
// the signature.
func (e *Envelope) Validate() error {
	switch {
	case e.Protocol != Version:
		return Errorf(CodeInvalidMessage, "protocol %q is not %q", truncate(e.Protocol, 40), Version)
	case e.ID == "" || len(e.ID) > MaxIDLen:
		return Errorf(CodeInvalidMessage, "id must be 1 to %d bytes", MaxIDLen)
	case !e.Type.Valid():
		return Errorf(CodeInvalidMessage, "unknown message type %q", truncate(string(e.Type), 40))
	case e.From.AgentID == "":
		return Errorf(CodeInvalidMessage, "from.agentId is required")
	case len(e.From.Name) > MaxNameLen:
		return Errorf(CodeInvalidMessage, "from.name longer than %d bytes", MaxNameLen)
	case len(e.Payload) == 0 || e.Payload[0] != '{':
		return Errorf(CodeInvalidMessage, "payload must be a JSON object")
	case len(e.Metadata) > 0 && e.Metadata[0] != '{':
		return Errorf(CodeInvalidMessage, "metadata must be a JSON object")
	}
	if _, err := e.Time(); err != nil {
		return err
	}
	if e.Type != TypeNotify && (e.To == nil || e.To.AgentID == "") && e.Type != TypeHello {
		return Errorf(CodeInvalidMessage, "to.agentId is required for a %s", e.Type)
	}
	return nil
}

// Sender returns the normalised agent id of from.agentId.
func (e *Envelope) Sender() (peer.ID, error) {
	id, err := sign.ParseAgentID(e.From.AgentID)
	if err != nil {
		return "", Errorf(CodeInvalidMessage, "from.agentId: %v", err)
	}
	return id, nil
}

// Seal signs the envelope as s: it sets from.agentId to the signer's id and
// returns the canonical bytes and the signature. The envelope's Signature
// field is cleared; use SignedJSON for the embedded form.
func Seal(s *sign.Signer, e *Envelope) (body, sig []byte, err error) {
	e.From.AgentID = s.IDString()
	e.Signature = ""
	if err := e.Validate(); err != nil {
		return nil, nil, err
	}
	body, err = MarshalCanonical(e)
	if err != nil {
		return nil, nil, Errorf(CodeInvalidMessage, "encode envelope: %v", err)
	}
	return body, s.Sign(body), nil
}

// frameHeadroom is room for the longest uvarint prefix and a signature.
const frameHeadroom = binary.MaxVarintLen64 + sign.SignatureSize

// SealFrame signs the envelope as Seal does and returns it as a direct
// stream frame, uvarint(len) ‖ signature ‖ canonical bytes, built in one
// buffer.
func SealFrame(s *sign.Signer, e *Envelope) ([]byte, error) {
	e.From.AgentID = s.IDString()
	e.Signature = ""
	if err := e.Validate(); err != nil {
		return nil, err
	}
	buf, ok := e.appendCanonical(frameHeadroom)
	if !ok {
		body, sig, err := Seal(s, e)
		if err != nil {
			return nil, err
		}
		return AppendSignedFrame(make([]byte, 0, frameHeadroom+len(body)), sig, body), nil
	}
	return signFrame(s, buf), nil
}

// signFrame signs the canonical bytes after buf's frameHeadroom and puts
// the frame prefix and the signature before them.
func signFrame(s *sign.Signer, buf []byte) []byte {
	body := buf[frameHeadroom:]
	sig := s.Sign(body)
	n := len(sig) + len(body)
	var prefix [binary.MaxVarintLen64]byte
	pl := binary.PutUvarint(prefix[:], uint64(n))
	start := frameHeadroom - sign.SignatureSize - pl
	copy(buf[start:], prefix[:pl])
	copy(buf[start+pl:], sig)
	return buf[start:]
}

// SealPayloadFrame is SealFrame for an envelope whose payload is still to
// be encoded: payload is encoded as MarshalCanonical encodes it, for a
// *Request or a *Response straight into the frame, and e.Payload is set
// to the encoded bytes, which may be part of the frame. The frame is the
// one SealFrame returns for the envelope with that payload. An error
// encoding the payload is INVALID_MESSAGE.
func SealPayloadFrame(s *sign.Signer, e *Envelope, payload any) ([]byte, error) {
	return SealPayloadFrameInto(nil, s, e, payload)
}

// SealPayloadFrameInto is SealPayloadFrame building the frame in buf's
// array when it has room (buf's length and contents do not matter), so
// that a sender may reuse one buffer for frame after frame, each once it
// is written: an io.Writer keeps nothing of what it is given. The frame,
// and e.Payload, are then part of buf's array, and change with it.
func SealPayloadFrameInto(buf []byte, s *sign.Signer, e *Envelope, payload any) ([]byte, error) {
	e.From.AgentID = s.IDString()
	e.Signature = ""
	buf, pa, pz, ok := e.appendCanonicalWith(buf[:0], frameHeadroom, payload)
	if !ok {
		p, err := MarshalCanonical(payload)
		if err != nil {
			return nil, Errorf(CodeInvalidMessage, "protocol: payload: %v", err)
		}
		e.Payload = p
		return SealFrame(s, e)
	}
	e.Payload = buf[pa:pz:pz]
	if err := e.Validate(); err != nil {
		return nil, err
	}
	return signFrame(s, buf), nil
}

// Open verifies and decodes an envelope received as canonical bytes with a
// detached signature. signer is the agent the bytes came from (on a direct
// stream, the authenticated remote peer): the signature is checked against
// its key before anything is parsed, and from.agentId must name it. The
// envelope shares no memory with body, so a reader may reuse body's buffer
// once Open returns (TestOpenOwnership).
func Open(body, sig []byte, signer peer.ID) (*Envelope, error) {
	return open(body, sig, signer)
}

func open(body, sig []byte, signer peer.ID) (*Envelope, error) {
	if err := sign.Verify(signer, body, sig); err != nil {
		return nil, Errorf(CodeInvalidSignature, "signature does not verify for %s", signer)
	}
	e, err := decodeCanonical(body)
	if err != nil {
		return nil, err
	}
	from, err := e.Sender()
	if err != nil {
		return nil, err
	}
	if from != signer {
		return nil, Errorf(CodeInvalidSignature, "from.agentId %s is not the signer %s", truncate(e.From.AgentID, 64), signer)
	}
	return e, nil
}

// signerPrefix is how every envelope Open accepts begins: canonical bytes
// sort "from" before the other members seed 002 allows, and "agentId"
// before the other members of from, which Validate requires.
const signerPrefix = `{"from":{"agentId":"`

// ClaimedSigner returns the agent that signed body if body is an envelope
// Open can accept: its from.agentId, found by an exact scan of the bytes
// and nothing more, so that a receiver that cannot name the signer from
// the connection (GossipSub relays other agents' messages) still verifies
// the signature before parsing anything. Open checks the claim. Bytes that
// do not begin as a canonical envelope does are INVALID_MESSAGE.
func ClaimedSigner(body []byte) (peer.ID, error) {
	rest, ok := bytes.CutPrefix(body, []byte(signerPrefix))
	// An agent id (a peer ID or a base64 key) never needs escaping, so the
	// first quote ends it; a backslash means it is not one.
	end := bytes.IndexByte(rest, '"')
	if !ok || end <= 0 || bytes.IndexByte(rest[:end], '\\') >= 0 {
		return "", Errorf(CodeInvalidMessage, "envelope does not begin with from.agentId")
	}
	id, err := sign.ParseAgentID(string(rest[:end]))
	if err != nil {
		return "", Errorf(CodeInvalidMessage, "from.agentId: %v", err)
	}
	return id, nil
}

// OpenJSON verifies and decodes an envelope in the embedded form (a JSON
// object with a "signature" member), as read from files, the bus or the
// lobby. The signing key is the one inlined in from.agentId. It returns the
// envelope and the canonical signed bytes.
func OpenJSON(doc []byte) (*Envelope, []byte, error) {
	body, sig, err := sign.Detach(doc)
	if err != nil {
		if errors.Is(err, sign.ErrInvalidSignature) {
			return nil, nil, Errorf(CodeInvalidSignature, "%v", err)
		}
		return nil, nil, Errorf(CodeInvalidMessage, "%v", err)
	}
	e, err := decodeCanonical(body)
	if err != nil {
		return nil, nil, err
	}
	from, err := e.Sender()
	if err != nil {
		return nil, nil, err
	}
	if err := sign.Verify(from, body, sig); err != nil {
		return nil, nil, Errorf(CodeInvalidSignature, "signature does not verify for %s", from)
	}
	e.Signature = sign.EncodeSignature(sig)
	return e, body, nil
}

// SignedJSON returns the embedded form of a sealed envelope.
func SignedJSON(body, sig []byte) ([]byte, error) { return sign.Attach(body, sig) }

// decodeCanonical decodes and checks signed envelope bytes.
func decodeCanonical(body []byte) (*Envelope, error) {
	if err := sign.CheckCanonical(body); err != nil {
		return nil, Errorf(CodeInvalidMessage, "signed bytes: %v", err)
	}
	e, err := decodeEnvelope(body)
	if err != nil {
		return nil, envelopeError(err)
	}
	if err := e.Validate(); err != nil {
		return nil, err
	}
	return e, nil
}

// DecodeRequest decodes and checks the payload of a request envelope. Every
// member's JSON type is checked (DecodePayload). The returned *Request is
// never nil, even with an error, so that the error can carry whatever
// correlationId did decode. Its params share e.Payload's bytes.
func DecodeRequest(e *Envelope) (*Request, error) {
	var r Request
	if err := decodePayload(e.Payload, "request payload", &r, AllowUnknown(), shareRaw()); err != nil {
		return &r, err
	}
	switch {
	case r.CorrelationID == "" || len(r.CorrelationID) > MaxIDLen:
		return &r, Errorf(CodeInvalidMessage, "correlationId must be 1 to %d bytes", MaxIDLen)
	case r.Action == "" || len(r.Action) > MaxCapabilityNameLen:
		return &r, Errorf(CodeInvalidMessage, "action must be 1 to %d bytes", MaxCapabilityNameLen)
	case r.Timeout < 0:
		return &r, Errorf(CodeInvalidMessage, "timeout must not be negative")
	case r.Detach < 0 || r.Detach > MaxDetachMs:
		return &r, Errorf(CodeInvalidMessage, "detach must be 0 to %d milliseconds (7 days)", int64(MaxDetachMs))
	case len(r.Params) > 0 && r.Params[0] != '{' && string(r.Params) != "null":
		return &r, Errorf(CodeInvalidMessage, "params must be a JSON object")
	}
	return &r, nil
}

// DecodeResponse decodes a response or error envelope into the final or
// progress response, or the *Error it carries. Its result and an error's
// details share e.Payload's bytes.
func DecodeResponse(e *Envelope) (*Response, error) {
	switch e.Type {
	case TypeResponse:
		var r Response
		if err := decodePayload(e.Payload, "response payload", &r, AllowUnknown(), shareRaw()); err != nil {
			return nil, err
		}
		if r.CorrelationID == "" {
			return nil, Errorf(CodeInvalidMessage, "response without correlationId")
		}
		switch r.Status {
		case StatusSuccess, StatusError, StatusInProgress:
		default:
			return nil, Errorf(CodeInvalidMessage, "response status %q unknown", truncate(string(r.Status), 40))
		}
		return &r, nil
	case TypeError:
		var pe Error
		if err := decodePayload(e.Payload, "error payload", &pe, AllowUnknown(), shareRaw()); err != nil {
			return nil, err
		}
		if !pe.Code.Valid() {
			// Keep the remote's message but do not invent a code.
			pe.Message = fmt.Sprintf("%s (remote code %q)", pe.Message, truncate(string(pe.Code), 40))
			pe.Code = CodeInternalError
		}
		return &Response{CorrelationID: pe.CorrelationID, Status: StatusError}, &pe
	default:
		return nil, Errorf(CodeInvalidMessage, "expected a response, got %s", e.Type)
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
