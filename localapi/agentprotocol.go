package localapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/sign"
)

// Paths of seed 002's HTTP and WebSocket bindings.
const (
	AgentProtocolPath   = "/agentprotocol"
	AgentProtocolWSPath = "/agentprotocol/ws"
)

// Bounds of the seed 002 bindings.
const (
	// MaxEnvelopeBytes bounds one envelope a client sends (an HTTP body or
	// a WebSocket message).
	MaxEnvelopeBytes = 1 << 20
	// MaxEnvelopeCalls bounds the requests all clients of the bindings
	// have in flight at once; past it a request is answered RATE_LIMITED
	// at once rather than queued.
	MaxEnvelopeCalls = 256
	// MaxEnvelopeConns bounds the WebSocket connections open at once; a
	// further one is answered HTTP 503 before the upgrade.
	MaxEnvelopeConns = 64
	// EnvelopeConnIdle closes a WebSocket connection that sent nothing
	// and has nothing in flight for this long.
	EnvelopeConnIdle = 5 * time.Minute
	// MaxEnvelopeCallsPerConn bounds one WebSocket connection's requests
	// in flight; past it the connection's reads wait (back-pressure).
	MaxEnvelopeCallsPerConn = 16
	// MaxEnvelopeTimeout caps the timeout a request may ask for.
	MaxEnvelopeTimeout = 10 * time.Minute
	// DefaultEnvelopeTimeout is a request's timeout when it names none.
	DefaultEnvelopeTimeout = 30 * time.Second
	// VouchPrefix starts the name by which the node vouches for an
	// envelope's signer when it calls the mesh for it: a provider admits
	// it as "<node id>/agentprotocol:<signer id>" in its ACLs and policy.
	VouchPrefix = "agentprotocol:"
)

// Envelopes is what the seed 002 bindings need of a node. *node.Node
// satisfies it.
type Envelopes interface {
	AgentID() string
	Signer() *sign.Signer
	Capabilities() []protocol.Capability
	Call(ctx context.Context, req protocol.CallRequest) (*protocol.Response, error)
}

// AgentProtocol serves seed 002's transport bindings for a node: one
// signed envelope in, the node's signed answer out. Every envelope is
// verified (canonical form, signature by the key in from.agentId,
// timestamp within the replay window, id not seen before) before
// anything in it is acted on. The signer may be any key: the node relays
// its requests into the mesh and vouches for it (VouchPrefix), as a relay
// does for its lobby and bus clients.
//
//   - hello: answered with the node's hello (its capabilities).
//   - request: to.agentId names the provider (this node or any agent the
//     node can reach; either id form). The answer is a response envelope
//     signed by the node, addressed to the sender, with the sender's
//     correlationId; the provider's own signed answer (a receipt meshagent
//     verify accepts) is in metadata.receipt when the provider sent one.
//     Over WebSocket, in_progress responses come first.
//   - notify, response, error: refused (INVALID_MESSAGE): the bindings
//     relay requests, they are not an inbox.
//
// A refusal is an error envelope signed by the node, addressed to the id
// the sender claimed (or, when the input names no agent id at all, the
// plain error payload {"code","message"}); over HTTP its status code says
// why (400 bad input, 401 bad signature, 413 too large, 429 at
// the bound of calls in flight).
type AgentProtocol struct {
	mesh  Envelopes
	guard *sign.ReplayGuard
	log   *slog.Logger
	calls chan struct{}
	conns chan struct{}
}

// NewAgentProtocol returns the bindings for mesh; log may be nil.
func NewAgentProtocol(mesh Envelopes, log *slog.Logger) *AgentProtocol {
	if log == nil {
		log = slog.Default()
	}
	return &AgentProtocol{
		mesh:  mesh,
		guard: sign.NewReplayGuard(0, 0),
		log:   log,
		calls: make(chan struct{}, MaxEnvelopeCalls),
		conns: make(chan struct{}, MaxEnvelopeConns),
	}
}

// OwnsAgentProtocol reports whether path is one of the bindings' paths.
func OwnsAgentProtocol(path string) bool {
	return path == AgentProtocolPath || path == AgentProtocolWSPath
}

// ServeHTTP serves POST /agentprotocol and the WebSocket at
// /agentprotocol/ws.
func (a *AgentProtocol) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case AgentProtocolPath:
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			writeError(w, http.StatusMethodNotAllowed, "POST one signed AgentProtocol envelope")
			return
		}
		doc, err := io.ReadAll(io.LimitReader(r.Body, MaxEnvelopeBytes+1))
		if err != nil {
			writeError(w, http.StatusBadRequest, "read body: "+err.Error())
			return
		}
		answer, status := a.Handle(r.Context(), doc, nil)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(status)
		_, _ = w.Write(answer)
	case AgentProtocolWSPath:
		a.serveWS(w, r)
	default:
		http.NotFound(w, r)
	}
}

// Handle processes one envelope in the embedded JSON form and returns the
// node's signed answer and the HTTP status that goes with it. progress,
// when set, receives each in_progress answer before Handle returns.
func (a *AgentProtocol) Handle(ctx context.Context, doc []byte, progress func([]byte)) ([]byte, int) {
	if len(doc) > MaxEnvelopeBytes {
		return a.refuse("", "", protocol.Errorf(protocol.CodeInvalidMessage, "envelope larger than %d bytes", MaxEnvelopeBytes), http.StatusRequestEntityTooLarge)
	}
	env, _, err := protocol.OpenJSON(doc)
	if err != nil {
		status := http.StatusBadRequest
		if protocol.CodeOf(err) == protocol.CodeInvalidSignature {
			status = http.StatusUnauthorized
		}
		return a.refuse(claimedSender(doc), "", err, status)
	}
	signer, err := env.Sender()
	if err != nil {
		return a.refuse("", "", err, http.StatusBadRequest)
	}
	// Answers name the sender as it named itself (a peer id or a base64
	// key); the replay guard and the vouching use the peer id.
	sender := env.From.AgentID
	ts, err := env.Time()
	if err != nil {
		return a.refuse(sender, "", protocol.Errorf(protocol.CodeInvalidMessage, "timestamp: %v", err), http.StatusBadRequest)
	}
	if err := a.guard.Check(signer.String(), env.ID, ts, time.Now()); err != nil {
		return a.refuse(sender, "", protocol.Errorf(protocol.CodeInvalidMessage, "%v", err), http.StatusBadRequest)
	}
	switch env.Type {
	case protocol.TypeHello:
		return a.hello(sender)
	case protocol.TypeRequest:
		return a.request(ctx, sender, signer.String(), env, progress)
	default:
		return a.refuse(sender, "", protocol.Errorf(protocol.CodeInvalidMessage, "a %s envelope is not accepted here: send hello or request", env.Type), http.StatusBadRequest)
	}
}

// helloPayload is the payload of the node's hello (seed 002).
type helloPayload struct {
	Features []string `json:"features"`
	Version  string   `json:"version"`
}

func (a *AgentProtocol) hello(to string) ([]byte, int) {
	caps := a.mesh.Capabilities()
	names := make([]string, len(caps))
	for i, c := range caps {
		names[i] = c.Name
	}
	env, err := protocol.NewEnvelope(protocol.TypeHello, &protocol.Recipient{AgentID: to}, helloPayload{Features: []string{"signed-messages", "streaming"}, Version: "0.1"})
	if err != nil {
		return a.internal(err)
	}
	env.From.Capabilities = names
	return a.seal(env, http.StatusOK)
}

func (a *AgentProtocol) request(ctx context.Context, sender, signer string, env *protocol.Envelope, progress func([]byte)) ([]byte, int) {
	req, err := protocol.DecodeRequest(env)
	if err != nil {
		return a.refuse(sender, req.CorrelationID, err, http.StatusBadRequest)
	}
	if env.To == nil || env.To.AgentID == "" {
		return a.refuse(sender, req.CorrelationID, protocol.Errorf(protocol.CodeInvalidMessage, "to.agentId must name the provider"), http.StatusBadRequest)
	}
	target, err := sign.ParseAgentID(env.To.AgentID)
	if err != nil {
		return a.refuse(sender, req.CorrelationID, protocol.Errorf(protocol.CodeInvalidMessage, "to.agentId: %v", err), http.StatusBadRequest)
	}
	select {
	case a.calls <- struct{}{}:
		defer func() { <-a.calls }()
	default:
		return a.refuse(sender, req.CorrelationID, protocol.Errorf(protocol.CodeRateLimited, "%d requests in flight through this node; try again", MaxEnvelopeCalls), http.StatusTooManyRequests)
	}
	timeout := DefaultEnvelopeTimeout
	if req.Timeout > 0 {
		timeout = min(time.Duration(req.Timeout)*time.Millisecond, MaxEnvelopeTimeout)
	}
	var receipt json.RawMessage
	call := protocol.CallRequest{
		To:         target.String(),
		Action:     req.Action,
		Params:     req.Params,
		Timeout:    timeout,
		OnBehalfOf: VouchPrefix + signer,
		Signed:     func(doc json.RawMessage) { receipt = doc },
	}
	if progress != nil {
		call.Progress = func(r *protocol.Response) {
			b, status := a.response(sender, req.CorrelationID, r, nil)
			if status == http.StatusOK {
				progress(b)
			}
		}
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := a.mesh.Call(ctx, call)
	if err != nil {
		// The provider's refusal or the mesh's: an answer, not bad input.
		return a.refuse(sender, req.CorrelationID, err, http.StatusOK)
	}
	return a.response(sender, req.CorrelationID, resp, receipt)
}

// response is the node's response envelope to sender carrying r under the
// sender's correlationId, with the provider's receipt in metadata.
func (a *AgentProtocol) response(sender, correlationID string, r *protocol.Response, receipt json.RawMessage) ([]byte, int) {
	out := *r
	out.CorrelationID = correlationID
	env, err := protocol.NewEnvelope(protocol.TypeResponse, &protocol.Recipient{AgentID: sender}, &out)
	if err != nil {
		return a.internal(err)
	}
	if receipt != nil {
		md, err := protocol.MarshalCanonical(map[string]json.RawMessage{"receipt": receipt})
		if err != nil {
			return a.internal(err)
		}
		env.Metadata = md
	}
	return a.seal(env, http.StatusOK)
}

// refuse is the node's error envelope for err, to sender when known.
func (a *AgentProtocol) refuse(sender, correlationID string, err error, status int) ([]byte, int) {
	pe := protocol.AsError(err)
	payload := protocol.Error{Code: pe.Code, CorrelationID: correlationID, Message: pe.Message, Details: pe.Details}
	if payload.CorrelationID == "" {
		payload.CorrelationID = pe.CorrelationID
	}
	if sender == "" {
		// Nobody to address a signed envelope to: the plain error.
		b, _ := json.Marshal(payload)
		return b, status
	}
	env, nerr := protocol.NewEnvelope(protocol.TypeError, &protocol.Recipient{AgentID: sender}, payload)
	if nerr != nil {
		return a.internal(nerr)
	}
	b, _ := a.seal(env, status)
	return b, status
}

// seal signs env as the node. When the envelope goes to a sender that
// wrote its own id as seed 002's base64 public key, the node's id is
// written so too: a client built from the seed alone verifies the answer
// with the key in from.agentId, with no peer-id decoding.
func (a *AgentProtocol) seal(env *protocol.Envelope, status int) ([]byte, int) {
	s := a.mesh.Signer()
	var body, sig []byte
	var err error
	if env.To != nil && isBase64ID(env.To.AgentID) {
		env.From.AgentID = s.PublicKeyBase64()
		if err = env.Validate(); err == nil {
			body, err = protocol.MarshalCanonical(env)
		}
		if err == nil {
			sig = s.Sign(body)
		}
	} else {
		body, sig, err = protocol.Seal(s, env)
	}
	if err != nil {
		return a.internal(err)
	}
	doc, err := protocol.SignedJSON(body, sig)
	if err != nil {
		return a.internal(err)
	}
	return doc, status
}

// claimedSender is the from.agentId an envelope that did not verify
// claims, when it is an agent id at all, so that the refusal can be
// addressed to it; "" otherwise. Nothing else of the document is trusted.
func claimedSender(doc []byte) string {
	var claim struct {
		From struct {
			AgentID string `json:"agentId"`
		} `json:"from"`
	}
	if json.Unmarshal(doc, &claim) != nil {
		return ""
	}
	if _, err := sign.ParseAgentID(claim.From.AgentID); err != nil {
		return ""
	}
	return claim.From.AgentID
}

// isBase64ID reports whether id is written as seed 002's base64 public key
// rather than a peer id.
func isBase64ID(id string) bool {
	return len(id) == 44 && id[43] == '='
}

// internal answers when the node cannot even build its answer: plain
// JSON, since signing is what failed.
func (a *AgentProtocol) internal(err error) ([]byte, int) {
	a.log.Error("agentprotocol: answer", "err", err)
	b, _ := json.Marshal(map[string]string{"error": "INTERNAL_ERROR: " + err.Error()})
	return b, http.StatusInternalServerError
}

// serveWS serves one WebSocket client: each text message is an envelope,
// each answer (progress first) a message back. Requests of a connection
// run concurrently up to MaxEnvelopeCallsPerConn; writes are serialized.
func (a *AgentProtocol) serveWS(w http.ResponseWriter, r *http.Request) {
	select {
	case a.conns <- struct{}{}:
		defer func() { <-a.conns }()
	default:
		writeError(w, http.StatusServiceUnavailable, fmt.Sprintf("%d WebSocket clients are connected; try again later", MaxEnvelopeConns))
		return
	}
	// Accept refuses a browser page of another origin (its Origin header
	// names another host), as the local API's WebSocket does.
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	defer c.CloseNow()
	c.SetReadLimit(MaxEnvelopeBytes)
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()

	var (
		wmu  sync.Mutex
		wg   sync.WaitGroup
		slot = make(chan struct{}, MaxEnvelopeCallsPerConn)
	)
	write := func(b []byte) {
		wmu.Lock()
		defer wmu.Unlock()
		wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
		defer wcancel()
		if err := c.Write(wctx, websocket.MessageText, b); err != nil {
			cancel() // a client that stops reading is disconnected
		}
	}
	defer wg.Wait()
	for {
		// Idle: nothing in flight and nothing sent for EnvelopeConnIdle.
		rctx, rcancel := context.WithTimeout(ctx, EnvelopeConnIdle)
		if len(slot) > 0 {
			rcancel()
			rctx, rcancel = ctx, func() {}
		}
		typ, doc, err := c.Read(rctx)
		rcancel()
		if err != nil {
			var ce websocket.CloseError
			if !errors.As(err, &ce) && ctx.Err() == nil {
				a.log.Debug("agentprotocol ws: read", "err", err)
			}
			if errors.Is(err, websocket.ErrMessageTooBig) || websocket.CloseStatus(err) == websocket.StatusMessageTooBig {
				c.Close(websocket.StatusMessageTooBig, fmt.Sprintf("an envelope is at most %d bytes", MaxEnvelopeBytes))
			}
			return
		}
		if typ != websocket.MessageText {
			b, _ := a.refuse("", "", protocol.Errorf(protocol.CodeInvalidMessage, "send each envelope as a text message"), http.StatusBadRequest)
			write(b)
			continue
		}
		select {
		case slot <- struct{}{}:
		case <-ctx.Done():
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slot }()
			answer, _ := a.Handle(ctx, doc, write)
			write(answer)
		}()
	}
}
