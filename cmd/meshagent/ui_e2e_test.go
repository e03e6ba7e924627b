//go:build unix

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/rpc"
)

// screenshotEnv names where TestStatusPage saves its screenshot; a
// relative path is taken from the module's root (the README's image is
// made with MESHAGENT_UI_SCREENSHOT=docs/ui.png). Unset, it goes to the
// test's temporary directory and is logged.
const screenshotEnv = "MESHAGENT_UI_SCREENSHOT"

// TestStatusPage opens alice's /ui in headless Chromium while bob and
// carol are connected to her, and waits until the page's graph shows
// them both as direct peers, with her capabilities, a bus subscription
// and the calls made, without a single console error.
func TestStatusPage(t *testing.T) {
	exe := chromiumPath()
	if exe == "" {
		t.Skip("chromium is not installed (Debian: apt-get install chromium); the status page is not tested in a browser")
	}
	dir := t.TempDir()
	caps := filepath.Join(dir, "caps.json")
	writeFile(t, caps, `[
		{"name": "echo", "description": "returns its params", "handler": {"builtin": "echo"}},
		{"name": "upper", "description": "upper-cases its params",
		 "input_schema": {"type": "object", "required": ["text"]},
		 "handler": {"exec": ["sh", "-c", "tr a-z A-Z"], "timeout": "10s"}}
	]`)
	bobCaps := filepath.Join(dir, "bob.json")
	writeFile(t, bobCaps, `[{"name": "summarize", "description": "returns its params", "handler": {"builtin": "echo"}}]`)
	a := startNode(t, "alice", "--key", filepath.Join(dir, "a.key"), "--data", filepath.Join(dir, "a"), "--capabilities", caps)
	b := startNode(t, "bob", "--key", filepath.Join(dir, "b.key"), "--data", filepath.Join(dir, "b"), "--capabilities", bobCaps, "--bootstrap", a.started.Addrs[0])
	c := startNode(t, "carol", "--key", filepath.Join(dir, "c.key"), "--data", filepath.Join(dir, "c"), "--bootstrap", a.started.Addrs[0])

	// Some activity for the page to show: calls both ways, one failing,
	// and a bus client subscribed to a topic on alice.
	wait.For(t, 30*time.Second, func() error {
		caps, err := capabilitiesOf(t, a.started.API, b.started.AgentID)
		if err != nil || !strings.Contains(strings.Join(caps, ","), "summarize") {
			return fmt.Errorf("alice does not see bob's capabilities yet: %v %v", caps, err)
		}
		return nil
	})
	meshagent(t, "call", b.started.AgentID, "summarize", "--params", `{"text":"hi"}`, "--api", a.started.API).must(t, 0)
	meshagent(t, "call", a.started.AgentID, "echo", "--params", `{"text":"hi"}`, "--api", c.started.API).must(t, 0)
	meshagent(t, "call", a.started.AgentID, "upper", "--params", `{"txt":"hi"}`, "--api", b.started.API).must(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sub, err := rpc.Dial(ctx, a.started.API)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if err := sub.Call(ctx, "subscribe", map[string]any{"topic": "tasks.*"}, nil); err != nil {
		t.Fatal(err)
	}

	br := startBrowser(t, exe, 1280, 1500)
	page := "http://" + a.started.API + "/ui"
	br.call(t, "Page.navigate", map[string]any{"url": page}, nil)

	// What the page shows, read from its DOM.
	type view struct {
		State       string   `json:"state"`
		Graph       string   `json:"graph"`
		Peers       []string `json:"peers"`
		Kinds       []string `json:"kinds"`
		AgentID     string   `json:"agentId"`
		Served      []string `json:"served"`
		Discovered  string   `json:"discovered"`
		Topics      []string `json:"topics"`
		Calls       []string `json:"calls"`
		DeadLetters string   `json:"deadLetters"`
	}
	const read = `(() => {
		const texts = (sel) => Array.from(document.querySelectorAll(sel), (e) => e.textContent);
		return {
			state: document.getElementById("conn-state").textContent,
			graph: document.getElementById("graph").dataset.peers,
			peers: Array.from(document.querySelectorAll("#graph .peer"), (e) => e.dataset.agent),
			kinds: Array.from(document.querySelectorAll("#graph .peer"), (e) => e.getAttribute("class")),
			agentId: document.getElementById("agent-id").textContent,
			served: texts("#caps-served li"),
			discovered: document.getElementById("caps-discovered").textContent,
			topics: texts("#topic-list li"),
			calls: texts("#call-table tbody tr"),
			deadLetters: document.getElementById("dl-count").textContent,
		};
	})()`
	var v view
	wait.For(t, 30*time.Second, func() error {
		raw, err := br.eval(read)
		if err != nil {
			return err
		}
		if err := json.Unmarshal(raw, &v); err != nil {
			return fmt.Errorf("%s: %v", raw, err)
		}
		switch {
		case v.State != "live":
			return fmt.Errorf("the page is %q, not live", v.State)
		case v.Graph != "2":
			return fmt.Errorf("the graph shows %s connected peers, want 2: %v", v.Graph, v.Kinds)
		case strings.Join(v.Topics, ",") != "tasks.*":
			return fmt.Errorf("topics %v", v.Topics)
		case len(v.Calls) < 3:
			return fmt.Errorf("calls %v", v.Calls)
		}
		return nil
	})
	if v.AgentID != a.started.AgentID {
		t.Errorf("the page shows agent %s, want alice %s", v.AgentID, a.started.AgentID)
	}
	want := map[string]bool{b.started.AgentID: true, c.started.AgentID: true}
	for i, id := range v.Peers {
		if !want[id] || !strings.Contains(v.Kinds[i], "direct") {
			t.Errorf("graph node %s is %q; want bob and carol, direct", id, v.Kinds[i])
		}
	}
	if strings.Join(v.Served, ",") != "echo,upper" || !strings.Contains(v.Discovered, "summarize") {
		t.Errorf("capabilities: served %v, discovered %q", v.Served, v.Discovered)
	}
	calls := strings.Join(v.Calls, "\n")
	for _, s := range []string{"sent", "summarize", "served", "echo", "upper", "INVALID_MESSAGE", "success"} {
		if !strings.Contains(calls, s) {
			t.Errorf("the recent calls lack %q:\n%s", s, calls)
		}
	}
	if v.DeadLetters != "0" {
		t.Errorf("dead letters %q, want 0", v.DeadLetters)
	}

	png := br.screenshot(t)
	out := filepath.Join(t.TempDir(), "ui.png")
	if p := os.Getenv(screenshotEnv); p != "" {
		out = p
		if !filepath.IsAbs(p) {
			out = filepath.Join("..", "..", p)
		}
	}
	if err := os.WriteFile(out, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot of %s: %s (%d bytes)", page, out, len(png))

	// Nothing went wrong in the page, from the first load to now.
	if p := br.consoleProblems(); len(p) > 0 {
		t.Errorf("the page reported %d problems:\n%s", len(p), strings.Join(p, "\n"))
	}
}

// TestStatusPageServed checks, without a browser, that a node and a
// relay serve the page on their local API, that the relay's public
// listener does not, and that the API admits the page's own origin as a
// browser client and refuses any other.
func TestStatusPageServed(t *testing.T) {
	dir := t.TempDir()
	n := startNode(t, "alice", "--key", filepath.Join(dir, "a.key"), "--data", filepath.Join(dir, "a"))
	r := startCommand(t, "relay", "relay", "--key", filepath.Join(dir, "r.key"), "--data", filepath.Join(dir, "r"), "--ws", "127.0.0.1:0")
	for _, api := range []string{n.started.API, r.started.API} {
		for _, path := range []string{"/ui", "/ui/app.js", "/ui/style.css"} {
			if code, body := httpGet(t, "http://"+api+path); code != http.StatusOK || len(body) == 0 {
				t.Errorf("GET %s%s: %d", api, path, code)
			}
		}
		// The page's own origin is admitted; another page's is not.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		c, err := rpc.Dial(ctx, api, rpc.WithHTTPHeader(http.Header{"Origin": {"http://" + api}}))
		if err != nil {
			t.Errorf("%s refuses its own page: %v", api, err)
		} else {
			var st rpc.StatusResult
			if err := c.Call(ctx, rpc.MethodMeshStatus, nil, &st); err != nil {
				t.Errorf("mesh.status from the page's origin: %v", err)
			}
			c.Close()
		}
		if c, err := rpc.Dial(ctx, api, rpc.WithHTTPHeader(http.Header{"Origin": {"http://evil.example"}})); err == nil {
			c.Close()
			t.Errorf("%s admits a foreign page", api)
		}
		cancel()
	}
	if code, _ := httpGet(t, "http://"+r.started.WS+"/ui"); code != http.StatusNotFound {
		t.Errorf("the relay's public listener answers /ui with %d, want 404", code)
	}
}

// TestStatusPageResolvesEscalation: the provider's status page lists the
// detached tasks its exec handler escalated, each with approve and reject
// buttons; clicking approve in headless Chromium approves one (the
// requester's `task wait` gets {"approved":true,…}), clicking reject
// rejects the other (REJECTED), and the list empties.
func TestStatusPageResolvesEscalation(t *testing.T) {
	exe := chromiumPath()
	if exe == "" {
		t.Skip("chromium is not installed (Debian: apt-get install chromium); the status page is not tested in a browser")
	}
	dir := t.TempDir()
	caps := filepath.Join(dir, "caps.json")
	capsJSON, _ := json.Marshal([]any{map[string]any{"name": "approval", "handler": map[string]any{"exec": []string{"sh", "-c", `echo "a human decides"; exit 10`}}}})
	writeFile(t, caps, string(capsJSON))
	provider := startNode(t, "librarian", "--data", filepath.Join(dir, "p"), "--capabilities", caps)
	requester := startNode(t, "agent", "--data", filepath.Join(dir, "r"), "--bootstrap", provider.started.Addrs[0])
	api := requester.started.API
	wait.For(t, 30*time.Second, func() error {
		_, err := capabilitiesOf(t, api, provider.started.AgentID)
		return err
	})
	var ids []string
	for range 2 {
		res := meshagent(t, "call", provider.started.AgentID, "approval", "--detach", "--json", "--api", api).must(t, 0)
		var sub struct {
			TaskID string `json:"taskId"`
		}
		if err := json.Unmarshal([]byte(res.stdout), &sub); err != nil || sub.TaskID == "" {
			t.Fatalf("call --detach printed %q (%v)", res.stdout, err)
		}
		ids = append(ids, sub.TaskID)
	}

	br := startBrowser(t, exe, 1280, 1500)
	br.call(t, "Page.navigate", map[string]any{"url": "http://" + provider.started.API + "/ui"}, nil)
	click := func(id, button string) {
		t.Helper()
		expr := fmt.Sprintf(`(() => { const b = document.querySelector('#esc-table button.%s[data-task="%s"]'); if (!b) return false; b.click(); return true; })()`, button, id)
		wait.For(t, 30*time.Second, func() error {
			raw, err := br.eval(expr)
			if err != nil {
				return err
			}
			if string(raw) != "true" {
				return fmt.Errorf("no %s button for task %s on the page yet", button, id)
			}
			return nil
		})
	}
	click(ids[0], "approve")
	res := meshagent(t, "task", "wait", ids[0], "--timeout", "60s", "--json", "--api", api).must(t, 0)
	if !strings.Contains(res.stdout, `"result":{"approved":true,"reason":"approved on the status page"}`) {
		t.Fatalf("task wait of the approved task printed %q", res.stdout)
	}
	click(ids[1], "reject")
	res = meshagent(t, "task", "wait", ids[1], "--timeout", "60s", "--json", "--api", api)
	if res.code == 0 || !strings.Contains(res.stdout+res.stderr, "rejected on the status page") {
		t.Fatalf("task wait of the rejected task exited %d: %s %s", res.code, res.stdout, res.stderr)
	}
	wait.For(t, 30*time.Second, func() error {
		raw, err := br.eval(`document.getElementById("esc-count").textContent`)
		if err != nil || string(raw) != `"0"` {
			return fmt.Errorf("escalated count %s %v", raw, err)
		}
		return nil
	})
	if p := br.consoleProblems(); len(p) > 0 {
		t.Errorf("the page reported %d problems:\n%s", len(p), strings.Join(p, "\n"))
	}
}
