// Command code-review runs seed 002's code-review flow between a reviewer
// and a requester on loopback, and writes every signed envelope that
// crossed the wire to a transcript directory, each file verifiable
// offline with meshagent verify. main.go is the seed 002 flow;
// transcript.go records what crossed the wire and writes it. See README.md.
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
	"strings"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/sign"
)

// ReviewCapability is the reviewer's seed 002 custom capability.
const ReviewCapability = "reviewer:code-review"

// reviewInput and reviewOutput are ReviewCapability's schemas.
const (
	reviewInput = `{"type":"object","required":["diff","language"],"additionalProperties":false,"properties":{
 "diff":{"type":"string","minLength":1,"maxLength":65536},"language":{"enum":["go","javascript","python"]}}}`
	reviewOutput = `{"type":"object","required":["rating","suggestions","files"],"properties":{
 "rating":{"enum":["good","needs-work"]},"suggestions":{"type":"array","items":{"type":"string"}},
 "files":{"type":"array","items":{"type":"string"}}}}`
)

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
	var err error
	if *dir == "" {
		*dir, err = os.MkdirTemp("", "code-review-transcript-")
	}
	if err == nil {
		err = run(ctx, os.Stdout, *dir)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "code-review:", err)
		os.Exit(1)
	}
}

// review is the reviewer's handler: a small, deterministic reviewer of
// the lines a unified diff adds.
func review(_ context.Context, c *node.Call) (json.RawMessage, error) {
	var p struct {
		Diff     string `json:"diff"`
		Language string `json:"language"`
	}
	if err := protocol.DecodeStrict(c.Request.Params, &p); err != nil {
		return nil, protocol.Errorf(protocol.CodeInvalidMessage, "params: %v", err)
	}
	files, suggestions, tests := []string{}, []string{}, false
	for l := range strings.SplitSeq(p.Diff, "\n") {
		added, isAdded := strings.CutPrefix(l, "+")
		switch {
		case strings.HasPrefix(l, "+++ "):
			f := strings.TrimPrefix(l, "+++ b/")
			files, tests = append(files, f), tests || strings.Contains(f, "_test.")
		case isAdded && strings.Contains(added, "TODO"):
			suggestions = append(suggestions, "resolve the TODO before merging: "+strings.TrimSpace(added))
		case isAdded && p.Language == "go" && strings.Contains(added, "fmt.Println"):
			suggestions = append(suggestions, "log with log/slog, not fmt.Println, and do not log user names")
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
	quiet := slog.New(slog.DiscardHandler)
	loopback := ma.StringCast("/ip4/127.0.0.1/tcp/0")

	requesterKey, err := sign.GenerateKey()
	if err != nil {
		return err
	}
	requesterID, _ := peer.IDFromPrivateKey(requesterKey)
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

	// The requester's host is wrapped in a tap that records every frame of
	// the hello and request streams it opens, both ways, as it crosses.
	h, err := libp2p.New(libp2p.Identity(requesterKey), libp2p.ListenAddrs(loopback))
	if err != nil {
		return fmt.Errorf("requester host: %w", err)
	}
	tap := &wireTap{Host: h}
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
	params, _ := json.Marshal(map[string]string{"diff": sampleDiff, "language": "go"})
	fmt.Fprintf(out, "request: %s on a diff of src/auth.go\n", ReviewCapability)
	resp, err := requester.Call(ctx, protocol.CallRequest{
		To: reviewer.AgentID(), Action: ReviewCapability, Params: params, Timeout: 10 * time.Second,
		Progress: func(r *protocol.Response) { fmt.Fprintf(out, "progress: %s\n", r.Result) },
	})
	if err != nil {
		return fmt.Errorf("review: %w", err)
	}
	var result struct {
		Rating             string
		Suggestions, Files []string
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

	// The transcript: every envelope that crossed the wire, verified.
	return writeTranscript(out, transcriptDir, tap.Envelopes(), names)
}
