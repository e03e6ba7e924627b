package cli

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/meshagent/meshagent/bus"
	"github.com/meshagent/meshagent/daemon"
	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/rpc"
	"github.com/meshagent/meshagent/sign"
)

// selfSigned writes a self-signed certificate for 127.0.0.1 and its key
// (PEM) under dir and returns their paths and a pool trusting it.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "meshagent test relay"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	writeFile(t, certFile, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})))
	writeFile(t, keyFile, string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})))
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

const (
	opsToken    = "ops-token-0123456789abcdef"
	bridgeToken = "bridge-token-0123456789abcdef"
)

// TestRelayTokensAndTLS runs `meshagent relay` with --tokens and a
// self-signed certificate: its public listener speaks wss only, refuses an
// upgrade without a valid token (401), takes one in the URL or a header,
// grants each token its topics and methods, and rereads the file when it
// changes.
func TestRelayTokensAndTLS(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, pool := selfSigned(t, dir)
	tokens := filepath.Join(dir, "tokens.json")
	writeFile(t, tokens, `{"tokens": [
		{"name": "ops", "token": "`+opsToken+`", "methods": ["admin"]},
		{"name": "bridge", "token": "`+bridgeToken+`", "topics": ["inbound:*"]}
	]}`)
	rn := startCommand(t, "relay", "--ws", "127.0.0.1:0", "--tokens", tokens, "--tls-cert", certFile, "--tls-key", keyFile, "--capabilities-poll", "100ms")
	wss := "wss://" + rn.started.WS + "/"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	trust := rpc.WithTLSConfig(&tls.Config{RootCAs: pool})
	dial := func(url string, opts ...rpc.ClientOption) (*rpc.Client, error) {
		c, err := rpc.Dial(ctx, url, append([]rpc.ClientOption{trust}, opts...)...)
		if err == nil {
			t.Cleanup(func() { _ = c.Close() })
		}
		return c, err
	}

	bridge, err := dial(wss + "?token=" + bridgeToken)
	if err != nil {
		t.Fatalf("bridge over wss with ?token=: %v", err)
	}
	ops, err := dial(wss, rpc.WithHTTPHeader(http.Header{"Authorization": {"Bearer " + opsToken}}))
	if err != nil {
		t.Fatalf("ops over wss with a Bearer header: %v", err)
	}
	for name, url := range map[string]string{
		"no token":    wss,
		"wrong token": wss + "?token=wrong-token-0123456789abcdef",
	} {
		if _, err := dial(url); err == nil || !strings.Contains(err.Error(), "401") {
			t.Errorf("%s: %v, want HTTP 401", name, err)
		}
	}
	// The lobby is behind the same tokens.
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	for token, want := range map[string]int{"": http.StatusUnauthorized, "?token=nope-0123456789abcdef": http.StatusUnauthorized, "?token=" + bridgeToken: http.StatusSwitchingProtocols} {
		ws, resp, err := websocket.Dial(ctx, wss+"lobby"+token, &websocket.DialOptions{HTTPClient: hc})
		if err == nil {
			_ = ws.CloseNow()
		}
		if resp == nil || resp.StatusCode != want {
			t.Errorf("lobby with %q: %v %v, want HTTP %d", token, resp, err, want)
		}
	}
	if _, err := rpc.Dial(ctx, wss+"?token="+opsToken); err == nil {
		t.Error("a client that does not trust the certificate connected")
	}
	if _, err := rpc.Dial(ctx, "ws://"+rn.started.WS+"/?token="+opsToken); err == nil {
		t.Error("plain ws:// to the TLS listener connected")
	}

	if err := bridge.Call(ctx, bus.MethodSubscribe, map[string]string{"topic": "inbound:*"}, nil); err != nil {
		t.Errorf("bridge subscribe inbound:*: %v", err)
	}
	send := map[string]any{"topic": "outbound:1", "payload": map[string]string{"type": "plaintext_message", "text": "x"}}
	if err := bridge.Call(ctx, bus.MethodSendMessage, send, nil); rpcCode(err) != rpc.CodeForbidden {
		t.Errorf("bridge sendMessage outbound:1: %v, want -32020", err)
	}
	if err := bridge.Call(ctx, bus.MethodBusHistory, nil, nil); rpcCode(err) != rpc.CodeForbidden {
		t.Errorf("bridge bus.history: %v, want -32020", err)
	}
	if err := ops.Call(ctx, bus.MethodBusHistory, nil, nil); err != nil {
		t.Errorf("ops bus.history: %v", err)
	}
	if err := ops.Call(ctx, rpc.MethodMeshCall, map[string]any{"agentId": rn.started.AgentID, "capability": "x"}, nil); rpcCode(err) != rpc.CodeForbidden {
		t.Errorf("ops mesh.call: %v, want -32020", err)
	}

	// The file changes: bridge's token is gone, ops may call mesh agents.
	writeFile(t, tokens, `{"tokens": [{"name": "ops", "token": "`+opsToken+`", "methods": ["admin", "mesh.call"]}]}`)
	wait.For(t, 10*time.Second, func() error {
		if _, err := dial(wss + "?token=" + bridgeToken); err == nil || !strings.Contains(err.Error(), "401") {
			return fmt.Errorf("bridge's token after the reload: %v, want 401", err)
		}
		return nil
	})
	select { // the reload closed it
	case <-bridge.Done():
	case <-ctx.Done():
		t.Fatal("the revoked connection is still open")
	}
	if err := bridge.Err(); err == nil || !strings.Contains(err.Error(), "credential revoked") {
		t.Errorf("revoked bridge: %v, want closed for a revoked credential", err)
	}
	err = ops.Call(ctx, rpc.MethodMeshCall, map[string]any{"agentId": rn.started.AgentID, "capability": "x", "timeoutMs": 2000}, nil)
	if rpcCode(err) == rpc.CodeForbidden {
		t.Errorf("ops mesh.call after its grant was added: %v", err)
	}
}

func rpcCode(err error) int {
	var re *rpc.Error
	if errors.As(err, &re) {
		return re.Code
	}
	return 0
}

func TestRelayPublicFlags(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, _ := selfSigned(t, dir)
	bad := filepath.Join(dir, "bad.json")
	writeFile(t, bad, `{"tokens": [{"name": "a", "token": "short"}]}`)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--tls-cert", certFile}, "--tls-cert and --tls-key go together"},
		{[]string{"--tls-key", keyFile}, "--tls-cert and --tls-key go together"},
		{[]string{"--tls-cert", keyFile, "--tls-key", keyFile}, "cannot load the certificate"},
		{[]string{"--tokens", bad}, "16 to 512 bytes"},
		{[]string{"--tokens", filepath.Join(dir, "missing.json")}, "invalid --tokens"},
	} {
		res := runCLI(t, "", append([]string{"relay", "--data", t.TempDir(), "--ws", "127.0.0.1:0", "--no-mdns"}, tc.args...)...)
		res.wantCode(t, ExitUsage)
		res.wantStderr(t, tc.want)
	}
}

// TestPublicWarnings: a non-loopback --ws without tokens, or with tokens
// but no TLS, is logged as the risk it is.
func TestPublicWarnings(t *testing.T) {
	tk, err := rpc.ParseTokens([]byte(`{"tokens": [{"name": "a", "token": "` + opsToken + `"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		p    daemon.Public
		want string
	}{
		{daemon.Public{Addr: "0.0.0.0:7892"}, "open to anyone"},
		{daemon.Public{Addr: "192.0.2.1:7892", Tokens: tk}, "tokens travel in clear text"},
		{daemon.Public{Addr: "0.0.0.0:7892", Tokens: tk, TLS: &tls.Config{}}, ""},
		{daemon.Public{Addr: "127.0.0.1:7892"}, ""},
	} {
		var buf bytes.Buffer
		publicWarnings(tc.p, slog.New(slog.NewTextHandler(&buf, nil)))
		if tc.want == "" && buf.Len() != 0 || tc.want != "" && !strings.Contains(buf.String(), tc.want) {
			t.Errorf("%+v logged %q, want %q", tc.p, buf.String(), tc.want)
		}
	}
}

// TestRelaySeed002Bindings: a relay's public listener serves seed 002's
// POST /agentprotocol behind its tokens: no token is a 401, a token
// without the agentprotocol grant a 403, a granted one gets the relay's
// signed hello.
func TestRelaySeed002Bindings(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens.json")
	writeFile(t, tokens, `{"tokens": [
		{"name": "seed002", "token": "`+opsToken+`", "methods": ["agentprotocol"]},
		{"name": "bridge", "token": "`+bridgeToken+`", "topics": ["inbound:*"]}
	]}`)
	rn := startCommand(t, "relay", "--ws", "127.0.0.1:0", "--tokens", tokens)
	k, err := sign.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	client, err := sign.NewSigner(k)
	if err != nil {
		t.Fatal(err)
	}
	hello := func() []byte {
		env, err := protocol.NewEnvelope(protocol.TypeHello, &protocol.Recipient{AgentID: rn.started.AgentID}, map[string]any{"version": "0.1", "features": []string{}})
		if err != nil {
			t.Fatal(err)
		}
		env.From.AgentID = client.PublicKeyBase64()
		body, err := protocol.MarshalCanonical(env)
		if err != nil {
			t.Fatal(err)
		}
		doc, err := protocol.SignedJSON(body, client.Sign(body))
		if err != nil {
			t.Fatal(err)
		}
		return doc
	}
	for _, tc := range []struct {
		name, token string
		want        int
	}{
		{"no token", "", http.StatusUnauthorized},
		{"a token without the grant", bridgeToken, http.StatusForbidden},
		{"a granted token", opsToken, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, "http://"+rn.started.WS+"/agentprotocol", bytes.NewReader(hello()))
			req.Header.Set("Content-Type", "application/json")
			if tc.token != "" {
				req.Header.Set("Authorization", "Bearer "+tc.token)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Fatalf("HTTP %d, want %d: %s", resp.StatusCode, tc.want, body)
			}
			if tc.want != http.StatusOK {
				return
			}
			env, _, err := protocol.OpenJSON(body)
			if err != nil || env.Type != protocol.TypeHello || env.To == nil || env.To.AgentID != client.PublicKeyBase64() {
				t.Fatalf("answer %s (%v): want the relay's signed hello to the client, named as it named itself", body, err)
			}
			if from, err := env.Sender(); err != nil || from.String() != rn.started.AgentID {
				t.Fatalf("signed by %v (%v), want the relay %s", from, err, rn.started.AgentID)
			}
		})
	}
}

// TestBusTokenStaysOffScreen: the bus commands never print the token of
// --bus: a relay that refuses it says so, with the token masked, and so
// does a bus that is not there.
func TestBusTokenStaysOffScreen(t *testing.T) {
	const wrong = "wrong-token-0123456789abcdef"
	tokens := filepath.Join(t.TempDir(), "tokens.json")
	writeFile(t, tokens, `{"tokens": [{"name": "ops", "token": "`+opsToken+`", "methods": ["admin"]}]}`)
	rn := startCommand(t, "relay", "--ws", "127.0.0.1:0", "--tokens", tokens)
	url := "ws://" + rn.started.WS + "/"
	for _, u := range []string{url, url + "?token=" + wrong} {
		res := runCLI(t, "", "history", "--bus", u)
		res.wantCode(t, ExitFailure)
		res.wantStderr(t, "refused the token: give one its tokens file holds")
		if strings.Contains(res.stderr, wrong) {
			t.Errorf("history --bus %s printed the token: %s", u, res.stderr)
		}
	}
	res := runCLI(t, "", "history", "--bus", url+"?token="+opsToken)
	res.wantCode(t, ExitOK)

	res = runCLI(t, "", "history", "--bus", "ws://"+freeAddr(t)+"/?token="+wrong)
	res.wantCode(t, ExitFailure)
	res.wantStderr(t, "no bus is listening at ", "/?token=xxxxx")
	if strings.Contains(res.stderr, wrong) {
		t.Errorf("history printed the token: %s", res.stderr)
	}
}
