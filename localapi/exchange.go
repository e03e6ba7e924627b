package localapi

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/meshagent/meshagent/protocol"
)

// Bounds and pace of the directory exchange.
const (
	// ExchangeInterval is how often the exchange directory is scanned.
	ExchangeInterval = 200 * time.Millisecond
	// MaxExchangeFilesPerScan bounds the files one scan takes up.
	MaxExchangeFilesPerScan = 256
	// MaxExchangeInFlight bounds the requests from files running at once;
	// further files wait for the next scan.
	MaxExchangeInFlight = 16
)

// Subdirectories of the exchange directory that requests are moved to.
const (
	ExchangeProcessed = "processed"
	ExchangeRejected  = "rejected"
)

// Exchange is seed 002's file exchange binding on a directory: a file
// named {from}-{to}-{timestamp}-{id}.json whose {to} is this node is one
// signed envelope for it, handled as POST /agentprotocol would be; the
// answer is written beside it as {node}-{from}-{timestamp}-{id}.json.
//
// Ids in file names are file-safe: a peer id (12D3KooW…), or a base64
// public key in the URL-safe alphabet without padding (seed 002's base64
// may hold "/"). The node names itself in its answers the way the request
// named it. Files of other agents, and files not ending in .json (write
// NAME.tmp, then rename it, so a half-written file is never read), are
// left alone.
//
// Each request is handled at most once, across restarts too: it is first
// moved to processed/ (the claim), then handled, then answered. A request
// that cannot be handled (too large, unreadable, not a verified envelope)
// is moved to rejected/ with NAME.reason saying why, and answered with an
// error envelope when its sender can be addressed. A crash between the
// claim and the answer leaves a request unanswered, never run twice.
type Exchange struct {
	dir   string
	ap    *AgentProtocol
	names map[string]bool // this node's file-safe ids
	log   *slog.Logger

	cancel context.CancelFunc
	wg     sync.WaitGroup
	slots  chan struct{}
}

// StartExchange serves the file exchange on dir (created if missing, with
// its subdirectories) until Close. selfID is the node's peer id and
// pubKeyB64 its base64 public key.
func StartExchange(ap *AgentProtocol, dir, selfID, pubKeyB64 string, log *slog.Logger) (*Exchange, error) {
	if log == nil {
		log = slog.Default()
	}
	for _, d := range []string{dir, filepath.Join(dir, ExchangeProcessed), filepath.Join(dir, ExchangeRejected)} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("exchange: %w", err)
		}
	}
	raw, err := base64.StdEncoding.DecodeString(pubKeyB64)
	if err != nil {
		return nil, fmt.Errorf("exchange: public key: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	x := &Exchange{
		dir:    dir,
		ap:     ap,
		names:  map[string]bool{selfID: true, base64.RawURLEncoding.EncodeToString(raw): true},
		log:    log,
		cancel: cancel,
		slots:  make(chan struct{}, MaxExchangeInFlight),
	}
	x.wg.Go(func() { x.loop(ctx) })
	return x, nil
}

// Close stops scanning and waits for the requests in flight to end.
func (x *Exchange) Close() error {
	x.cancel()
	x.wg.Wait()
	return nil
}

func (x *Exchange) loop(ctx context.Context) {
	t := time.NewTicker(ExchangeInterval)
	defer t.Stop()
	for {
		x.scan(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// scan takes up the requests addressed to this node.
func (x *Exchange) scan(ctx context.Context) {
	entries, err := os.ReadDir(x.dir)
	if err != nil {
		x.log.Warn("exchange: read directory", "dir", x.dir, "err", err)
		return
	}
	taken := 0
	for _, e := range entries {
		if taken == MaxExchangeFilesPerScan || ctx.Err() != nil {
			return
		}
		name := e.Name()
		from, to, ok := exchangeParties(name)
		if !ok || !e.Type().IsRegular() || !x.names[to] || x.names[from] {
			continue
		}
		select {
		case x.slots <- struct{}{}:
		default:
			return // all slots busy: the next scan
		}
		// The claim: once moved, no other scan (or restart) sees it.
		claimed := filepath.Join(x.dir, ExchangeProcessed, name)
		if err := os.Rename(filepath.Join(x.dir, name), claimed); err != nil {
			<-x.slots
			x.log.Warn("exchange: claim", "file", name, "err", err)
			continue
		}
		taken++
		x.wg.Go(func() {
			defer func() { <-x.slots }()
			x.handle(ctx, name, from, to, claimed)
		})
	}
}

// exchangeParties splits {from}-{to}-{timestamp}-{id}.json. The URL-safe
// base64 alphabet has "-" in it, so an id is read by its length: a peer id
// of an Ed25519 key (52 characters, 12D3KooW…) or a base64url key (43).
func exchangeParties(name string) (from, to string, ok bool) {
	rest, isJSON := strings.CutSuffix(name, ".json")
	if !isJSON {
		return "", "", false
	}
	if from, rest, ok = cutFileID(rest); !ok {
		return "", "", false
	}
	if to, rest, ok = cutFileID(rest); !ok || rest == "" {
		return "", "", false
	}
	return from, to, true
}

// cutFileID cuts a file-safe agent id and the "-" after it from s.
func cutFileID(s string) (id, rest string, ok bool) {
	n := 43
	if strings.HasPrefix(s, "12D3KooW") {
		n = 52
	}
	if len(s) <= n || s[n] != '-' {
		return "", "", false
	}
	return s[:n], s[n+1:], true
}

func (x *Exchange) handle(ctx context.Context, name, from, to, path string) {
	doc, err := readBounded(path)
	var answer []byte
	status := http.StatusOK
	if err != nil {
		answer, status = x.ap.refuse("", "", protocol.Errorf(protocol.CodeInvalidMessage, "%v", err), http.StatusBadRequest)
	} else {
		answer, status = x.ap.Handle(ctx, doc, nil)
	}
	if status != http.StatusOK {
		reason := string(answer)
		if err != nil {
			reason = err.Error()
		}
		rejected := filepath.Join(x.dir, ExchangeRejected, name)
		if rerr := os.Rename(path, rejected); rerr != nil {
			x.log.Warn("exchange: move aside", "file", name, "err", rerr)
		}
		if werr := os.WriteFile(rejected+".reason", []byte(reason+"\n"), 0o600); werr != nil {
			x.log.Warn("exchange: write reason", "file", name, "err", werr)
		}
		x.log.Info("exchange: request refused", "file", name, "status", status)
	}
	if !isEnvelope(answer) {
		return // nobody to address it to
	}
	out := fmt.Sprintf("%s-%s-%d-%s.json", to, from, time.Now().UnixMilli(), protocol.NewID())
	if err := writeAtomic(filepath.Join(x.dir, out), answer); err != nil {
		x.log.Warn("exchange: write answer", "file", out, "err", err)
	}
}

// isEnvelope reports whether an answer is a signed envelope (rather than
// the plain error of input that named nobody).
func isEnvelope(b []byte) bool { return strings.Contains(string(b), `"signature":`) }

func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	doc, err := io.ReadAll(io.LimitReader(f, MaxEnvelopeBytes+1))
	if err != nil {
		return nil, err
	}
	if len(doc) > MaxEnvelopeBytes {
		return nil, errors.New("file larger than an envelope may be")
	}
	return doc, nil
}

// writeAtomic writes name.tmp and renames it, so readers never see half a
// file.
func writeAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
