// Command code-review runs seed 002's code-review flow between two agents
// in one process on loopback: a reviewer that offers the capability
// "reviewer:code-review" (input and output JSON Schemas, an ACL naming the
// requester) and a requester that exchanges signed hellos with it, asks it
// to review a diff, and then sends a request that violates the input
// schema, which the reviewer refuses with INVALID_MESSAGE.
//
// Every envelope the requester sends or receives on its direct streams is
// recorded as it crossed the wire, signature included, and written to the
// transcript directory in seed 002's file-exchange naming
// ({from}-{to}-{timestamp}-{id}.json), plus transcript.jsonl holding them
// all in wire order. Each file verifies offline: meshagent verify < FILE.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/sign"
)

// ReviewCapability is the capability the reviewer offers (a seed 002
// custom capability URI).
const ReviewCapability = "reviewer:code-review"

// reviewInput is the input schema of ReviewCapability.
const reviewInput = `{
  "type": "object",
  "required": ["diff", "language"],
  "properties": {
    "diff": {"type": "string", "minLength": 1, "maxLength": 65536},
    "language": {"type": "string", "enum": ["go", "javascript", "python"]}
  },
  "additionalProperties": false
}`

// reviewOutput is the output schema of ReviewCapability (seed 002's
// response result: a rating and suggestions).
const reviewOutput = `{
  "type": "object",
  "required": ["rating", "suggestions", "files"],
  "properties": {
    "rating": {"type": "string", "enum": ["good", "needs-work"]},
    "suggestions": {"type": "array", "items": {"type": "string"}},
    "files": {"type": "array", "items": {"type": "string"}}
  }
}`

// sampleDiff is the change the requester asks to have reviewed.
const sampleDiff = `--- a/src/auth.go
+++ b/src/auth.go
@@ -10,6 +10,11 @@ func Login(user, pass string) (*Session, error) {
 	if user == "" {
 		return nil, ErrNoUser
 	}
+	// TODO: rate-limit failed logins
+	fmt.Println("login attempt", user)
+	if !checkPassword(user, pass) {
+		return nil, ErrBadPassword
+	}
 	return newSession(user), nil
 }
`

func main() {
	dir := flag.String("transcript", "", "directory to write the signed envelopes to (default: a new temporary directory)")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if *dir == "" {
		d, err := os.MkdirTemp("", "code-review-transcript-")
		if err != nil {
			fmt.Fprintln(os.Stderr, "code-review:", err)
			os.Exit(1)
		}
		*dir = d
	}
	if err := run(ctx, os.Stdout, *dir); err != nil {
		fmt.Fprintln(os.Stderr, "code-review:", err)
		os.Exit(1)
	}
}

// review is the reviewer's handler: a small, deterministic reviewer of
// unified diffs.
func review(_ context.Context, c *node.Call) (json.RawMessage, error) {
	var p struct {
		Diff     string `json:"diff"`
		Language string `json:"language"`
	}
	if err := json.Unmarshal(c.Request.Params, &p); err != nil {
		return nil, fmt.Errorf("decode params: %w", err)
	}
	files := []string{}
	var suggestions []string
	tests := false
	line := 0
	for l := range strings.SplitSeq(p.Diff, "\n") {
		switch {
		case strings.HasPrefix(l, "+++ "):
			f := strings.TrimPrefix(strings.TrimPrefix(l, "+++ "), "b/")
			files = append(files, f)
			tests = tests || strings.HasSuffix(f, "_test.go") || strings.Contains(f, ".test.")
		case strings.HasPrefix(l, "--- "):
		case strings.HasPrefix(l, "@@"):
			// @@ -a,b +c,d @@: new-file lines start at c.
			if _, after, ok := strings.Cut(l, "+"); ok {
				_, _ = fmt.Sscanf(after, "%d", &line)
				line--
			}
		case strings.HasPrefix(l, "+"):
			line++
			added := strings.TrimSpace(l[1:])
			if strings.Contains(added, "TODO") {
				suggestions = append(suggestions, fmt.Sprintf("line %d: resolve the TODO before merging (%s)", line, added))
			}
			if p.Language == "go" && strings.Contains(added, "fmt.Println") {
				suggestions = append(suggestions, fmt.Sprintf("line %d: log with log/slog, not fmt.Println, and do not log user names", line))
			}
		case strings.HasPrefix(l, "-"):
		default:
			line++
		}
	}
	_ = c.Progress(json.RawMessage(fmt.Sprintf(`{"stage":"diff read","files":%d}`, len(files))))
	if !tests {
		suggestions = append(suggestions, "add tests: the diff touches no test file")
	}
	rating := "good"
	if len(suggestions) > 0 {
		rating = "needs-work"
	}
	return json.Marshal(map[string]any{"rating": rating, "suggestions": suggestions, "files": files})
}

func run(ctx context.Context, out io.Writer, transcriptDir string) error {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	loopback := ma.StringCast("/ip4/127.0.0.1/tcp/0")

	requesterKey, err := sign.GenerateKey()
	if err != nil {
		return err
	}
	requesterID, err := peer.IDFromPrivateKey(requesterKey)
	if err != nil {
		return fmt.Errorf("requester id: %w", err)
	}
	reviewerKey, err := sign.GenerateKey()
	if err != nil {
		return err
	}

	reviewer, err := node.New(node.WithIdentity(reviewerKey), node.WithName("reviewer"), node.WithListenAddrs(loopback),
		node.WithMDNS(false), node.WithDHT(false), node.WithLogger(quiet), node.WithServices(node.Service{
			Capability: protocol.Capability{
				Name:                   ReviewCapability,
				Description:            "reviews a unified diff: a rating and suggestions",
				Keywords:               []string{"code-review"},
				InputSchema:            json.RawMessage(reviewInput),
				OutputSchema:           json.RawMessage(reviewOutput),
				AuthorizedRequesterIDs: []string{requesterID.String()},
			},
			Handler: node.HandlerFunc(review),
		}))
	if err != nil {
		return fmt.Errorf("reviewer: %w", err)
	}
	defer reviewer.Close()

	// The requester's host is wrapped in a tap that records every frame
	// of the hello and request streams as it is written or read.
	h, err := libp2p.New(libp2p.Identity(requesterKey), libp2p.ListenAddrs(loopback))
	if err != nil {
		return fmt.Errorf("requester host: %w", err)
	}
	tap := newWireTap(h)
	defer h.Close()
	requester, err := node.New(node.WithIdentity(requesterKey), node.WithHost(tap), node.WithName("requester"),
		node.WithMDNS(false), node.WithDHT(false), node.WithLogger(quiet), node.WithBootstrap(reviewer.Addrs()...))
	if err != nil {
		return fmt.Errorf("requester: %w", err)
	}
	defer requester.Close()
	names := map[string]string{reviewer.AgentID(): "reviewer", requester.AgentID(): "requester"}
	fmt.Fprintln(out, "reviewer: ", reviewer.AgentID())
	fmt.Fprintln(out, "requester:", requester.AgentID())

	// hello <-> hello: the capabilities become known.
	caps, err := requester.WaitHello(ctx, reviewer.ID())
	if err != nil {
		return fmt.Errorf("no hello from the reviewer: %w", err)
	}
	for _, c := range caps {
		fmt.Fprintf(out, "hello: reviewer offers %s (%s)\n", c.Name, c.Description)
	}

	// request -> in_progress response(s) -> response.
	params, err := json.Marshal(map[string]string{"diff": sampleDiff, "language": "go"})
	if err != nil {
		return fmt.Errorf("encode params: %w", err)
	}
	fmt.Fprintf(out, "request: %s on a diff of src/auth.go\n", ReviewCapability)
	resp, err := requester.Call(ctx, protocol.CallRequest{
		To: reviewer.AgentID(), Action: ReviewCapability, Params: params, Timeout: 10 * time.Second,
		Progress: func(r *protocol.Response) { fmt.Fprintf(out, "progress: %s\n", r.Result) },
	})
	if err != nil {
		return fmt.Errorf("review: %w", err)
	}
	var result struct {
		Rating      string   `json:"rating"`
		Suggestions []string `json:"suggestions"`
		Files       []string `json:"files"`
	}
	if err := json.Unmarshal(resp.Result, &result); err != nil {
		return fmt.Errorf("decode review: %w", err)
	}
	fmt.Fprintf(out, "response: %s, rating %s, %d suggestions on %s\n", resp.Status, result.Rating, len(result.Suggestions), strings.Join(result.Files, ", "))
	for _, s := range result.Suggestions {
		fmt.Fprintf(out, "  - %s\n", s)
	}

	// A request that violates the input schema: no diff.
	_, err = requester.Call(ctx, protocol.CallRequest{
		To: reviewer.AgentID(), Action: ReviewCapability, Params: json.RawMessage(`{"language":"go"}`), Timeout: 10 * time.Second,
	})
	if err == nil {
		return errors.New("the reviewer accepted a request without a diff")
	}
	fmt.Fprintf(out, "schema-violating request: %s\n", protocol.CodeOf(err))

	// The transcript: every signed envelope of the exchange, as sent.
	envelopes := tap.Envelopes()
	if err := writeTranscript(transcriptDir, envelopes); err != nil {
		return err
	}
	fmt.Fprintf(out, "transcript: %d signed envelopes in %s\n", len(envelopes), transcriptDir)
	for _, doc := range envelopes {
		e, _, err := protocol.OpenJSON(doc)
		if err != nil {
			return fmt.Errorf("an envelope of the transcript does not verify: %w", err)
		}
		fmt.Fprintf(out, "  %-8s %-9s -> %-9s verified %s\n", e.Type, names[e.From.AgentID], names[recipient(e)], summary(e))
	}
	return nil
}

func recipient(e *protocol.Envelope) string {
	if e.To == nil {
		return ""
	}
	return e.To.AgentID
}

// summary describes an envelope's payload in a few words.
func summary(e *protocol.Envelope) string {
	var p struct {
		Action        string `json:"action"`
		CorrelationID string `json:"correlationId"`
		Status        string `json:"status"`
		Code          string `json:"code"`
	}
	_ = json.Unmarshal(e.Payload, &p)
	switch e.Type {
	case protocol.TypeRequest:
		return "action " + p.Action
	case protocol.TypeResponse:
		return "status " + p.Status
	case protocol.TypeError:
		return "code " + p.Code
	}
	return ""
}

// writeTranscript writes each envelope to dir in seed 002's file-exchange
// naming, {from-agent-id}-{to-agent-id}-{timestamp}-{id}.json (colons
// dropped from the timestamp), and all of them, one per line in wire
// order, to transcript.jsonl.
func writeTranscript(dir string, envelopes []json.RawMessage) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("transcript directory: %w", err)
	}
	var all []byte
	for _, doc := range envelopes {
		var e protocol.Envelope
		if err := json.Unmarshal(doc, &e); err != nil {
			return fmt.Errorf("transcript: %w", err)
		}
		name := fmt.Sprintf("%s-%s-%s-%s.json", e.From.AgentID, recipient(&e), strings.ReplaceAll(e.Timestamp, ":", ""), e.ID)
		if err := os.WriteFile(filepath.Join(dir, name), append(doc, '\n'), 0o644); err != nil {
			return fmt.Errorf("transcript: %w", err)
		}
		all = append(append(all, doc...), '\n')
	}
	if err := os.WriteFile(filepath.Join(dir, "transcript.jsonl"), all, 0o644); err != nil {
		return fmt.Errorf("transcript: %w", err)
	}
	return nil
}
