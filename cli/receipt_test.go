package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshagent/meshagent/internal/meshtest"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/sign"
)

// taskOf returns the task id call printed on stderr.
func taskOf(t *testing.T, stderr string) string {
	t.Helper()
	rest, ok := strings.CutPrefix(stderr, "task ")
	id, _, ok2 := strings.Cut(rest, " ")
	if !ok || !ok2 {
		t.Fatalf("no task id on stderr: %q", stderr)
	}
	return id
}

// TestCallReceipt drives `call --receipt` through a node's local API and
// checks what it printed with `verify`.
func TestCallReceipt(t *testing.T) {
	provider := meshtest.Node(t, 0, node.WithServices(node.Service{Capability: protocol.Capability{Name: "echo"}, Handler: node.EchoHandler()}))
	n := meshtest.Node(t, 1)
	meshtest.Connect(t, n, provider)
	api := serveAPI(t, n)
	to := provider.AgentID()

	verify := func(t *testing.T, doc string, args ...string) result {
		t.Helper()
		return runCLI(t, doc, append([]string{"verify"}, args...)...)
	}

	t.Run("after the result", func(t *testing.T) {
		res := runCLI(t, "", "call", to, "echo", "--params", `{"text":"hi"}`, "--api", api, "--receipt")
		res.wantCode(t, ExitOK)
		result, receipt, ok := strings.Cut(res.stdout, "}\n{")
		if !ok || result != "{\n  \"text\": \"hi\"\n" {
			t.Fatalf("stdout %q", res.stdout)
		}
		receipt = "{" + receipt
		task := taskOf(t, res.stderr)
		v := verify(t, receipt, "--provider", to, "--correlation-id", task)
		v.wantCode(t, ExitOK)
		if want := "valid: receipt signed by " + to + " for request " + task + " (success)\n"; v.stdout != want {
			t.Errorf("verify said %q, want %q", v.stdout, want)
		}
		// Plain verify checks the signature alone, as it always has.
		verify(t, receipt).wantCode(t, ExitOK)

		v = verify(t, receipt, "--provider", n.AgentID(), "--correlation-id", task)
		v.wantCode(t, ExitCodeFor(protocol.CodeInvalidSignature))
		v.wantStderr(t, "not a valid receipt: INVALID_SIGNATURE: the receipt is signed by "+to+", not by the provider "+n.AgentID())
		v = verify(t, receipt, "--provider", to, "--task", "another-task")
		v.wantCode(t, ExitCodeFor(protocol.CodeInvalidMessage))
		v.wantStderr(t, `not a valid receipt: INVALID_MESSAGE: the receipt answers request "`+task+`", not "another-task"`)

		tampered := strings.Replace(receipt, `"text":"hi"`, `"text":"ho"`, 1)
		v = verify(t, tampered, "--provider", to, "--correlation-id", task)
		v.wantCode(t, ExitCodeFor(protocol.CodeInvalidSignature))
		v.wantStderr(t, "not a valid receipt: INVALID_SIGNATURE: signature does not verify for "+to)

		verify(t, receipt, "--provider", "nobody").wantCode(t, ExitUsage)
	})

	t.Run("in the JSON line", func(t *testing.T) {
		res := runCLI(t, "", "call", to, "echo", "--params", `{"n":1}`, "--api", api, "--receipt", "--json")
		res.wantCode(t, ExitOK)
		var line struct {
			CorrelationID string          `json:"correlationId"`
			Receipt       json.RawMessage `json:"receipt"`
			AgentID       *string         `json:"agentId"`
		}
		if err := json.Unmarshal([]byte(res.stdout), &line); err != nil || line.Receipt == nil || line.AgentID != nil {
			t.Fatalf("stdout %q: %v", res.stdout, err)
		}
		verify(t, string(line.Receipt), "--provider", to, "--correlation-id", line.CorrelationID).wantCode(t, ExitOK)
		// The whole line is accepted too.
		verify(t, res.stdout, "--provider", to, "--correlation-id", line.CorrelationID).wantCode(t, ExitOK)

		// Without --receipt, the line is the plain response.
		res = runCLI(t, "", "call", to, "echo", "--params", `{"n":1}`, "--api", api, "--json")
		res.wantCode(t, ExitOK)
		if strings.Contains(res.stdout, "receipt") {
			t.Errorf("stdout %q", res.stdout)
		}
	})

	t.Run("to a file", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "receipt.json")
		res := runCLI(t, "", "call", to, "echo", "--params", `{"n":2}`, "--api", api, "--receipt-out", file)
		res.wantCode(t, ExitOK)
		if res.stdout != "{\n  \"n\": 2\n}\n" {
			t.Errorf("stdout %q", res.stdout)
		}
		task := taskOf(t, res.stderr)
		res.wantStderr(t, "receipt written to "+file, "meshagent verify --provider "+to+" --correlation-id "+task)
		doc, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		verify(t, string(doc), "--provider", to, "--correlation-id", task).wantCode(t, ExitOK)
	})
}

// FuzzVerifyReceipt runs verify's receipt parser (a receipt, or a call's
// JSON line carrying one) over inputs grown from receipts signed by test
// keys: it must never panic, and whatever it accepts must be a final
// response signed by the expected provider for the expected request.
func FuzzVerifyReceipt(f *testing.F) {
	provider := meshtest.ID(f, 2)
	want := receiptWant{provider: provider.String(), correlationID: "task-1"}
	for _, resp := range []protocol.Response{
		{CorrelationID: "task-1", Status: protocol.StatusSuccess, Result: json.RawMessage(`{"text":"hi"}`)},
		{CorrelationID: "task-1", Status: protocol.StatusError},
		{CorrelationID: "task-2", Status: protocol.StatusSuccess},
		{CorrelationID: "task-1", Status: protocol.StatusInProgress},
	} {
		doc := fuzzReceipt(f, 2, resp)
		f.Add(doc)
		f.Add(append(append([]byte(`{"correlationId":"task-1","receipt":`), doc...), '}'))
		f.Add(bytes.Replace(doc, []byte(`"status"`), []byte(`"status" `), 1))
	}
	f.Add(fuzzReceipt(f, 3, protocol.Response{CorrelationID: "task-1", Status: protocol.StatusSuccess}))
	f.Add([]byte(`{"receipt":{"signature":""}}`))
	f.Fuzz(func(t *testing.T, doc []byte) {
		r, err := checkReceipt(doc, want)
		if err != nil {
			if pe := protocol.AsError(err); pe.Code != protocol.CodeInvalidMessage && pe.Code != protocol.CodeInvalidSignature {
				t.Fatalf("error code %s: %v", pe.Code, err)
			}
			return
		}
		if r.Provider != provider || r.Response.CorrelationID != "task-1" || !r.Response.Status.Final() || r.Envelope.Type != protocol.TypeResponse {
			t.Fatalf("accepted %+v %+v", r.Provider, r.Response)
		}
	})
}

// fuzzReceipt is resp signed by test key key for test key 1.
func fuzzReceipt(tb testing.TB, key int, resp protocol.Response) []byte {
	tb.Helper()
	e, err := protocol.NewEnvelope(protocol.TypeResponse, &protocol.Recipient{AgentID: meshtest.ID(tb, 1).String()}, resp)
	if err != nil {
		tb.Fatal(err)
	}
	signer, err := sign.NewSigner(meshtest.Key(tb, key))
	if err != nil {
		tb.Fatal(err)
	}
	body, sig, err := protocol.Seal(signer, e)
	if err != nil {
		tb.Fatal(err)
	}
	doc, err := protocol.SignedJSON(body, sig)
	if err != nil {
		tb.Fatal(err)
	}
	return doc
}
