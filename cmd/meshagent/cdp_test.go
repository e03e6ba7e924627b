//go:build unix

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/meshagent/meshagent/internal/wait"
)

// This file is a tiny Chrome DevTools Protocol client, enough to open a
// page in headless Chromium, read its console, evaluate expressions and
// take a screenshot.

// chromiumPath returns the Chromium (or Chrome) executable, or "".
func chromiumPath() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// browser is a headless Chromium process and a CDP session on its page.
type browser struct {
	ws *websocket.Conn

	mu       sync.Mutex
	nextID   int64
	waiting  map[int64]chan cdpReply
	problems []string // console errors and uncaught exceptions, as text

	done chan struct{} // closed when the read loop returns
}

type cdpReply struct {
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// startBrowser starts headless Chromium at exe with a window of w×h and
// attaches to its page. Everything is stopped by t's cleanup.
func startBrowser(t *testing.T, exe string, w, h int) *browser {
	t.Helper()
	// The profile is not t.TempDir: Chromium's helper processes may still be
	// writing to it for a moment after they are killed, and TempDir's
	// cleanup fails the test on a directory that is not yet empty.
	profile, err := os.MkdirTemp("", "meshagent-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	args := []string{
		"--headless=new", "--disable-gpu", "--no-first-run", "--no-default-browser-check",
		"--disable-extensions", "--disable-background-networking", "--disable-sync", "--hide-scrollbars",
		// It only ever loads the node's own page. Without its sandbox it runs
		// as root and in containers without user namespaces; with a small
		// /dev/shm (containers again) it does not crash.
		"--no-sandbox", "--disable-dev-shm-usage",
		"--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0",
		"--user-data-dir=" + profile, fmt.Sprintf("--window-size=%d,%d", w, h), "about:blank",
	}
	cmd := exec.Command(exe, args...)
	// Its home and temporary files in the profile too (exec keeps the
	// last of a repeated variable), so that removing it leaves nothing.
	cmd.Env = append(env(t), "HOME="+profile, "TMPDIR="+profile)
	// Its own process group, so that its renderer, GPU and zygote helpers
	// are killed with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", exe, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
		// Killed helpers may still be adding files for a moment.
		if err := wait.Until(30*time.Second, func() error { return os.RemoveAll(profile) }); err != nil {
			t.Errorf("remove the browser's profile: %v", err)
		}
	})

	// Chromium prints "DevTools listening on ws://127.0.0.1:PORT/devtools/browser/…".
	found := make(chan string, 1)
	var log strings.Builder
	var logMu sync.Mutex
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			logMu.Lock()
			log.WriteString(line + "\n")
			logMu.Unlock()
			if _, url, ok := strings.Cut(line, "DevTools listening on "); ok {
				select {
				case found <- url:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	var browserURL string
	select {
	case browserURL = <-found:
	case <-exited:
		logMu.Lock()
		defer logMu.Unlock()
		t.Fatalf("chromium exited before listening:\n%s", log.String())
	case <-time.After(60 * time.Second):
		t.Fatal("chromium did not print its DevTools address within 60 s")
	}
	base := "http://" + strings.SplitN(strings.TrimPrefix(browserURL, "ws://"), "/", 2)[0]

	// The page target about:blank opened.
	var targets []struct {
		Type string `json:"type"`
		URL  string `json:"webSocketDebuggerUrl"`
	}
	res, err := (&http.Client{Timeout: 10 * time.Second}).Get(base + "/json/list")
	if err != nil {
		t.Fatal(err)
	}
	err = json.NewDecoder(res.Body).Decode(&targets)
	res.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	pageURL := ""
	for _, tg := range targets {
		if tg.Type == "page" {
			pageURL = tg.URL
			break
		}
	}
	if pageURL == "" {
		t.Fatalf("chromium has no page target: %+v", targets)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, pageURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	ws.SetReadLimit(64 << 20) // screenshots
	b := &browser{ws: ws, waiting: map[int64]chan cdpReply{}, done: make(chan struct{})}
	go b.readLoop()
	t.Cleanup(func() {
		_ = ws.CloseNow()
		<-b.done
	})
	for _, m := range []string{"Runtime.enable", "Log.enable", "Page.enable"} {
		b.call(t, m, nil, nil)
	}
	return b
}

func (b *browser) readLoop() {
	defer close(b.done)
	for {
		_, data, err := b.ws.Read(context.Background())
		if err != nil {
			b.mu.Lock()
			for id, ch := range b.waiting {
				close(ch)
				delete(b.waiting, id)
			}
			b.mu.Unlock()
			return
		}
		var m struct {
			ID     int64           `json:"id"`
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
			cdpReply
		}
		if json.Unmarshal(data, &m) != nil {
			continue
		}
		if m.ID != 0 {
			b.mu.Lock()
			ch := b.waiting[m.ID]
			delete(b.waiting, m.ID)
			b.mu.Unlock()
			if ch != nil {
				ch <- m.cdpReply
			}
			continue
		}
		if p := problem(m.Method, m.Params); p != "" {
			b.mu.Lock()
			b.problems = append(b.problems, p)
			b.mu.Unlock()
		}
	}
}

// problem returns a CDP event as text if it reports a console error or
// warning, an uncaught exception, or a browser-side error (a failed load,
// a CSP violation), else "".
func problem(method string, params json.RawMessage) string {
	switch method {
	case "Runtime.consoleAPICalled":
		var e struct {
			Type string            `json:"type"`
			Args []json.RawMessage `json:"args"`
		}
		_ = json.Unmarshal(params, &e)
		if e.Type == "error" || e.Type == "warning" || e.Type == "assert" {
			return fmt.Sprintf("console.%s %s", e.Type, params)
		}
	case "Runtime.exceptionThrown":
		return "uncaught exception " + string(params)
	case "Log.entryAdded":
		var e struct {
			Entry struct {
				Level string `json:"level"`
				Text  string `json:"text"`
				URL   string `json:"url"`
			} `json:"entry"`
		}
		_ = json.Unmarshal(params, &e)
		if e.Entry.Level == "error" || e.Entry.Level == "warning" {
			return fmt.Sprintf("log %s: %s (%s)", e.Entry.Level, e.Entry.Text, e.Entry.URL)
		}
	}
	return ""
}

// call sends a CDP command and decodes its result into out (may be nil).
func (b *browser) call(t *testing.T, method string, params, out any) {
	t.Helper()
	if err := b.do(method, params, out); err != nil {
		t.Fatal(err)
	}
}

func (b *browser) do(method string, params, out any) error {
	ch := make(chan cdpReply, 1)
	b.mu.Lock()
	b.nextID++
	id := b.nextID
	b.waiting[id] = ch
	b.mu.Unlock()
	msg := map[string]any{"id": id, "method": method}
	if params != nil {
		msg["params"] = params
	}
	data, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.ws.Write(ctx, websocket.MessageText, data); err != nil {
		return fmt.Errorf("%s: %w", method, err)
	}
	select {
	case r, ok := <-ch:
		switch {
		case !ok:
			return fmt.Errorf("%s: the DevTools connection closed", method)
		case r.Error != nil:
			return fmt.Errorf("%s: %s (%d)", method, r.Error.Message, r.Error.Code)
		case out != nil:
			return json.Unmarshal(r.Result, out)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%s: no answer: %w", method, ctx.Err())
	}
}

// eval evaluates a JavaScript expression in the page and returns its
// value as JSON.
func (b *browser) eval(expr string) (json.RawMessage, error) {
	var res struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		ExceptionDetails *struct {
			Text string `json:"text"`
		} `json:"exceptionDetails"`
	}
	if err := b.do("Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true}, &res); err != nil {
		return nil, err
	}
	if res.ExceptionDetails != nil {
		return nil, errors.New("evaluate: " + res.ExceptionDetails.Text)
	}
	return res.Result.Value, nil
}

// screenshot returns a PNG of the whole page.
func (b *browser) screenshot(t *testing.T) []byte {
	t.Helper()
	var res struct {
		Data []byte `json:"data"` // base64 in JSON, decoded by encoding/json
	}
	b.call(t, "Page.captureScreenshot", map[string]any{"format": "png", "captureBeyondViewport": true}, &res)
	return res.Data
}

// consoleProblems returns what the page reported as errors so far.
func (b *browser) consoleProblems() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.problems...)
}
