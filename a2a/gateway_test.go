package a2a_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshagent/meshagent/a2a"
	"github.com/meshagent/meshagent/internal/meshtest"
	"github.com/meshagent/meshagent/internal/rpctest"
	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/localapi"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/store"
)

func withCard() node.Option {
	return node.WithAgentCard(func(s node.JWSSigner, id, name string, caps []protocol.Capability, params json.RawMessage) (json.RawMessage, error) {
		return a2a.OwnCard(s, id, name, caps, params)
	})
}

// mesh is a gateway in front of node gw, connected to provider prov.
type mesh struct {
	gw, prov *node.Node
	url      string // the gateway's base URL
	api      string // the local API's URL
	g        *a2a.Gateway
	// started receives the context of each run of "slow".
	started chan context.Context
	// release ends the runs of "gated".
	release chan struct{}
}

func newMesh(t *testing.T, opts ...a2a.Option) *mesh {
	t.Helper()
	m := &mesh{started: make(chan context.Context, 4), release: make(chan struct{})}
	services := []node.Service{
		{Capability: protocol.Capability{Name: "upper", Description: "upper-cases text", Keywords: []string{"text"}}, Handler: node.HandlerFunc(func(_ context.Context, c *node.Call) (json.RawMessage, error) {
			var p struct {
				Text string `json:"text"`
			}
			if err := json.Unmarshal(c.Request.Params, &p); err != nil {
				return nil, err
			}
			return json.Marshal(map[string]string{"text": strings.ToUpper(p.Text)})
		})},
		{Capability: protocol.Capability{Name: "fail"}, Handler: node.HandlerFunc(func(context.Context, *node.Call) (json.RawMessage, error) {
			return nil, protocol.Errorf(protocol.CodeInternalError, "it broke")
		})},
		{Capability: protocol.Capability{Name: "count"}, Handler: node.HandlerFunc(func(_ context.Context, c *node.Call) (json.RawMessage, error) {
			for i := 1; i <= 3; i++ {
				if err := c.Progress(json.RawMessage(`{"step":` + string(rune('0'+i)) + `}`)); err != nil {
					return nil, err
				}
			}
			return json.RawMessage(`{"done":true}`), nil
		})},
		{Capability: protocol.Capability{Name: "gated"}, Handler: node.HandlerFunc(func(ctx context.Context, c *node.Call) (json.RawMessage, error) {
			select {
			case <-m.release:
				return json.RawMessage(`{"released":true}`), nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		})},
		{Capability: protocol.Capability{Name: "slow"}, Handler: node.HandlerFunc(func(ctx context.Context, c *node.Call) (json.RawMessage, error) {
			m.started <- ctx
			<-ctx.Done()
			return nil, ctx.Err()
		})},
	}
	m.prov = meshtest.Node(t, 1, withCard(), node.WithServices(services...), node.WithStore(openStore(t)))
	m.gw = meshtest.Node(t, 2, withCard(), node.WithStore(openStore(t)))
	meshtest.Connect(t, m.gw, m.prov)
	api := rpctest.Start(t, m.gw)
	localapi.Register(api.Server, m.gw) // mesh.submit and the tasks, as on a node's local API
	m.api = api.URL
	m.url, m.g = m.gateway(t, opts...)
	return m
}

// gateway starts a gateway in front of m.gw: a second one stands for the
// first after a restart.
func (m *mesh) gateway(t *testing.T, opts ...a2a.Option) (string, *a2a.Gateway) {
	t.Helper()
	cl := rpctest.DialClient(t, m.api)
	var g *a2a.Gateway
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { g.ServeHTTP(w, r) }))
	t.Cleanup(hs.Close)
	g, err := a2a.New(meshtest.Context(t, 10*time.Second), cl, append([]a2a.Option{a2a.WithBaseURL(hs.URL)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	return hs.URL, g
}

func openStore(t *testing.T) *store.Store {
	t.Helper()
	st, err := store.Open(filepath.Join(t.TempDir(), "node.db"), store.WithPruneInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

func (m *mesh) endpoint() string { return m.url + "/agents/" + m.prov.AgentID() + "/" }

func getCard(t *testing.T, url string) (int, a2a.AgentCard) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var card a2a.AgentCard
	if resp.StatusCode == http.StatusOK {
		if err := protocol.DecodeStrict(body, &card); err != nil {
			t.Fatalf("card %s: %v\n%s", url, err, body)
		}
	}
	return resp.StatusCode, card
}

func TestGatewayCards(t *testing.T) {
	m := newMesh(t)
	status, own := getCard(t, m.url+"/.well-known/agent-card.json")
	if status != http.StatusOK {
		t.Fatalf("own card: HTTP %d", status)
	}
	if err := a2a.VerifyCard(own, m.gw.ID()); err != nil {
		t.Fatalf("own card: %v", err)
	}
	status, card := getCard(t, m.endpoint()+".well-known/agent-card.json")
	if status != http.StatusOK {
		t.Fatalf("provider card: HTTP %d", status)
	}
	if err := a2a.VerifyCard(card, m.prov.ID()); err != nil {
		t.Fatalf("the provider's card is not signed by the provider: %v", err)
	}
	if err := a2a.VerifyCard(card, m.gw.ID()); err == nil {
		t.Fatal("the provider's card verifies as the gateway node's")
	}
	if got := card.SupportedInterfaces[0].URL; got != m.endpoint() {
		t.Fatalf("interface URL %s, want %s", got, m.endpoint())
	}
	var ids []string
	for _, s := range card.Skills {
		ids = append(ids, s.ID)
		if len(s.Tags) == 0 || s.Description == "" || s.Name == "" {
			t.Errorf("skill %+v has empty members", s)
		}
	}
	if strings.Join(ids, ",") != "count,fail,gated,slow,upper" {
		t.Fatalf("skills %v, want the provider's capabilities", ids)
	}
	for _, path := range []string{"/agents/nope/.well-known/agent-card.json", "/agents/" + meshtest.ID(t, 9).String() + "/.well-known/agent-card.json", "/elsewhere"} {
		if status, _ := getCard(t, m.url+path); status == http.StatusOK {
			t.Errorf("GET %s = 200", path)
		}
	}
}

type rpcResponse struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  json.RawMessage `json:"result"`
	Error   *a2a.Error      `json:"error"`
}

func post(t *testing.T, url, body string, header ...string) (int, rpcResponse) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("A2A-Version", "1.0")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out rpcResponse
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatalf("response: %v\n%s", err, raw)
		}
	}
	return resp.StatusCode, out
}

func send(skill, data string, extra ...string) string {
	cfg := ""
	if len(extra) > 0 {
		cfg = `,"configuration":` + extra[0]
	}
	return `{"jsonrpc":"2.0","id":7,"method":"SendMessage","params":{"message":{"messageId":"m1","role":"ROLE_USER","parts":[{"data":` + data + `}],"metadata":{"skill":"` + skill + `"}}` + cfg + `}}`
}

func sendResult(t *testing.T, r rpcResponse) a2a.Task {
	t.Helper()
	if r.Error != nil {
		t.Fatalf("error %d: %s", r.Error.Code, r.Error.Message)
	}
	var res a2a.SendMessageResponse
	if err := protocol.DecodeStrict(r.Result, &res); err != nil || res.Task == nil {
		t.Fatalf("result %s: %v", r.Result, err)
	}
	return *res.Task
}

func TestGatewaySendMessage(t *testing.T) {
	m := newMesh(t)
	_, r := post(t, m.endpoint(), send("upper", `{"text":"hi"}`))
	task := sendResult(t, r)
	if task.Status.State != a2a.TaskStateCompleted || len(task.Artifacts) != 1 || string(task.Artifacts[0].Parts[0].Data) != `{"text":"HI"}` {
		t.Fatalf("task %+v", task)
	}
	if string(r.ID) != "7" {
		t.Fatalf("id %s, want 7", r.ID)
	}
	// The task id is the mesh task's: the provider knows it.
	mt, err := m.gw.TaskStatus(meshtest.Context(t, 10*time.Second), task.ID, m.prov.AgentID())
	if err != nil || mt.State != protocol.TaskCompleted {
		t.Fatalf("mesh task %s: %+v, %v", task.ID, mt, err)
	}

	_, r = post(t, m.endpoint(), send("fail", `{}`))
	task = sendResult(t, r)
	if task.Status.State != a2a.TaskStateFailed || task.Status.Message == nil || *task.Status.Message.Parts[0].Text != "INTERNAL_ERROR: it broke" {
		t.Fatalf("failed task %+v", task)
	}

	for _, tc := range []struct {
		name, body string
		header     []string
		code       int
	}{
		{"unknown skill", send("nope", `{}`), nil, a2a.CodeInvalidParams},
		{"data not an object", send("upper", `[1]`), nil, a2a.CodeInvalidParams},
		{"role agent", strings.Replace(send("upper", `{}`), "ROLE_USER", "ROLE_AGENT", 1), nil, a2a.CodeInvalidParams},
		{"unknown member", strings.Replace(send("upper", `{}`), `"messageId"`, `"bogus":1,"messageId"`, 1), nil, a2a.CodeInvalidParams},
		{"wrong type", strings.Replace(send("upper", `{}`), `"m1"`, `1`, 1), nil, a2a.CodeInvalidParams},
		{"continuing a task", strings.Replace(send("upper", `{}`), `"messageId"`, `"taskId":"t","messageId"`, 1), nil, a2a.CodeUnsupportedOperation},
		{"version 0.3", send("upper", `{}`), []string{"A2A-Version", "0.3"}, a2a.CodeVersionNotSupported},
		{"unknown method", `{"jsonrpc":"2.0","id":1,"method":"message/send","params":{}}`, nil, a2a.CodeMethodNotFound},
		{"not JSON", `{"jsonrpc"`, nil, a2a.CodeParseError},
		{"no id", `{"jsonrpc":"2.0","method":"GetTask","params":{"id":"x"}}`, nil, a2a.CodeInvalidRequest},
		{"unknown task", `{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"nope"}}`, nil, a2a.CodeTaskNotFound},
		{"bad page size", `{"jsonrpc":"2.0","id":1,"method":"ListTasks","params":{"pageSize":1000}}`, nil, a2a.CodeInvalidParams},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, r := post(t, m.endpoint(), tc.body, tc.header...)
			if status != http.StatusOK || r.Error == nil || r.Error.Code != tc.code {
				t.Fatalf("HTTP %d, error %+v; want code %d", status, r.Error, tc.code)
			}
		})
	}
	if status, _ := post(t, m.endpoint(), send("upper", `{}`), "Content-Type", "text/plain"); status != http.StatusUnsupportedMediaType {
		t.Fatalf("text/plain: HTTP %d, want 415", status)
	}
}

// events reads a Server-Sent Events stream of JSON-RPC responses.
func events(t *testing.T, url, body string) []a2a.StreamResponse {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("Content-Type %q: %s", ct, b)
	}
	var out []a2a.StreamResponse
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var r rpcResponse
		if err := json.Unmarshal([]byte(line), &r); err != nil || r.Error != nil {
			t.Fatalf("event %s: %v", line, err)
		}
		var ev a2a.StreamResponse
		if err := protocol.DecodeStrict(r.Result, &ev); err != nil {
			t.Fatalf("event %s: %v", r.Result, err)
		}
		out = append(out, ev)
	}
	return out
}

func TestGatewayStreamsProgress(t *testing.T) {
	m := newMesh(t)
	body := strings.Replace(send("count", `{}`), "SendMessage", "SendStreamingMessage", 1)
	evs := events(t, m.endpoint(), body)
	if len(evs) < 2 || evs[0].Task == nil || evs[len(evs)-1].Task == nil {
		t.Fatalf("stream %+v: want a task first and last", evs)
	}
	var steps []string
	for _, ev := range evs[1 : len(evs)-1] {
		if ev.StatusUpdate == nil || ev.StatusUpdate.Status.State != a2a.TaskStateWorking {
			t.Fatalf("event %+v, want a WORKING status update", ev)
		}
		steps = append(steps, string(ev.StatusUpdate.Status.Message.Parts[0].Data))
	}
	if strings.Join(steps, ",") != `{"step":1},{"step":2},{"step":3}` {
		t.Fatalf("progress %v", steps)
	}
	final := evs[len(evs)-1].Task
	if final.Status.State != a2a.TaskStateCompleted || string(final.Artifacts[0].Parts[0].Data) != `{"done":true}` {
		t.Fatalf("final %+v", final)
	}
}

func TestGatewayCancelGetList(t *testing.T) {
	m := newMesh(t)
	_, r := post(t, m.endpoint(), send("slow", `{}`, `{"returnImmediately":true}`))
	task := sendResult(t, r)
	if task.Status.State.Terminal() {
		t.Fatalf("task already %s", task.Status.State)
	}
	runCtx := wait.Receive(t, 10*time.Second, m.started, "the provider runs the task")

	_, r = post(t, m.endpoint(), `{"jsonrpc":"2.0","id":2,"method":"CancelTask","params":{"id":"`+task.ID+`"}}`)
	var canceled a2a.Task
	if r.Error != nil || json.Unmarshal(r.Result, &canceled) != nil || canceled.Status.State != a2a.TaskStateCanceled {
		t.Fatalf("CancelTask: %s %+v", r.Result, r.Error)
	}
	wait.ForTrue(t, 10*time.Second, "the provider's handler is cancelled", func() bool { return runCtx.Err() != nil })
	wait.For(t, 10*time.Second, func() error {
		mt, err := m.gw.TaskStatus(context.Background(), task.ID, m.prov.AgentID())
		if err != nil {
			return err
		}
		if mt.State != protocol.TaskCancelled {
			return errors.New(string(mt.State))
		}
		return nil
	})
	_, r = post(t, m.endpoint(), `{"jsonrpc":"2.0","id":3,"method":"CancelTask","params":{"id":"`+task.ID+`"}}`)
	if r.Error == nil || r.Error.Code != a2a.CodeTaskNotCancelable {
		t.Fatalf("second CancelTask: %+v", r.Error)
	}
	_, r = post(t, m.endpoint(), `{"jsonrpc":"2.0","id":4,"method":"GetTask","params":{"id":"`+task.ID+`"}}`)
	var got a2a.Task
	if r.Error != nil || json.Unmarshal(r.Result, &got) != nil || got.Status.State != a2a.TaskStateCanceled || got.ID != task.ID {
		t.Fatalf("GetTask: %s %+v", r.Result, r.Error)
	}
	post(t, m.endpoint(), send("upper", `{"text":"a"}`))
	_, r = post(t, m.endpoint(), `{"jsonrpc":"2.0","id":5,"method":"ListTasks","params":{"pageSize":1}}`)
	var list a2a.ListTasksResponse
	if r.Error != nil || json.Unmarshal(r.Result, &list) != nil || list.TotalSize != 2 || len(list.Tasks) != 1 || list.NextPageToken == "" {
		t.Fatalf("ListTasks: %s %+v", r.Result, r.Error)
	}
	_, r = post(t, m.endpoint(), `{"jsonrpc":"2.0","id":6,"method":"ListTasks","params":{"status":"TASK_STATE_CANCELED"}}`)
	if json.Unmarshal(r.Result, &list) != nil || len(list.Tasks) != 1 || list.Tasks[0].ID != task.ID {
		t.Fatalf("ListTasks by status: %s %+v", r.Result, r.Error)
	}
	// A SubscribeToTask of an ended task gets its final state and ends.
	evs := events(t, m.endpoint(), `{"jsonrpc":"2.0","id":8,"method":"SubscribeToTask","params":{"id":"`+task.ID+`"}}`)
	if len(evs) != 1 || evs[0].Task == nil || evs[0].Task.Status.State != a2a.TaskStateCanceled {
		t.Fatalf("SubscribeToTask: %+v", evs)
	}
}

func TestGatewayBoundsTasks(t *testing.T) {
	m := newMesh(t, a2a.WithMaxTasks(1))
	_, r := post(t, m.endpoint(), send("slow", `{}`, `{"returnImmediately":true}`))
	task := sendResult(t, r)
	wait.Receive(t, 10*time.Second, m.started, "the provider runs the task")
	_, r = post(t, m.endpoint(), send("upper", `{}`))
	if r.Error == nil || !strings.Contains(r.Error.Message, "already runs 1 tasks") {
		t.Fatalf("a second task while one runs: %s %+v", r.Result, r.Error)
	}
	post(t, m.endpoint(), `{"jsonrpc":"2.0","id":2,"method":"CancelTask","params":{"id":"`+task.ID+`"}}`)
	// The ended task makes room.
	_, r = post(t, m.endpoint(), send("upper", `{"text":"x"}`))
	if got := sendResult(t, r); got.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("task %+v", got)
	}
}

// TestGatewayRefusesForeignCard: a node that answers a2a.card with a card
// signed by another key (a forgery, or a gateway's own) is not served.
func TestGatewayRefusesForeignCard(t *testing.T) {
	forger := testSigner(t, 9)
	liar := meshtest.Node(t, 3, node.WithServices(node.Service{Capability: protocol.Capability{Name: "x"}, Handler: node.EchoHandler()}),
		node.WithAgentCard(func(_ node.JWSSigner, id, name string, caps []protocol.Capability, params json.RawMessage) (json.RawMessage, error) {
			return a2a.OwnCard(forger, id, name, caps, params)
		}))
	m := newMesh(t)
	meshtest.Connect(t, m.gw, liar)
	status, _ := getCard(t, m.url+"/agents/"+liar.AgentID()+"/.well-known/agent-card.json")
	if status != http.StatusBadGateway {
		t.Fatalf("a card signed by another key: HTTP %d, want 502", status)
	}
	_, r := post(t, m.url+"/agents/"+liar.AgentID()+"/", send("x", `{}`))
	if r.Error == nil {
		t.Fatalf("SendMessage to an agent without a valid card: %s", r.Result)
	}
}

// TestGatewayTasksOutliveIt: an A2A task is a durable mesh task. A gateway
// that stops while its task runs loses nothing: a new gateway in front of
// the same node lists the task, follows it to its end (SubscribeToTask),
// and answers GetTask with its result, also for a task that ended while
// no gateway ran.
func TestGatewayTasksOutliveIt(t *testing.T) {
	m := newMesh(t)
	_, r := post(t, m.endpoint(), send("gated", `{}`, `{"returnImmediately":true}`))
	running := sendResult(t, r)
	_, r = post(t, m.endpoint(), send("upper", `{"text":"done before"}`))
	ended := sendResult(t, r)
	if running.Status.State.Terminal() || ended.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("tasks %s, %s", running.Status.State, ended.Status.State)
	}
	if err := m.g.Close(); err != nil {
		t.Fatal(err)
	}

	url, _ := m.gateway(t)
	endpoint := url + "/agents/" + m.prov.AgentID() + "/"
	_, r = post(t, endpoint, `{"jsonrpc":"2.0","id":2,"method":"ListTasks","params":{}}`)
	var list a2a.ListTasksResponse
	if r.Error != nil || json.Unmarshal(r.Result, &list) != nil || list.TotalSize != 2 ||
		list.Tasks[0].ID != ended.ID || list.Tasks[0].Status.State != a2a.TaskStateCompleted ||
		list.Tasks[1].ID != running.ID || list.Tasks[1].Status.State != a2a.TaskStateWorking {
		t.Fatalf("ListTasks after a restart (newest first): %s %+v", r.Result, r.Error)
	}
	_, r = post(t, endpoint, `{"jsonrpc":"2.0","id":3,"method":"GetTask","params":{"id":"`+ended.ID+`"}}`)
	var got a2a.Task
	if r.Error != nil || json.Unmarshal(r.Result, &got) != nil || got.Status.State != a2a.TaskStateCompleted ||
		len(got.Artifacts) != 1 || string(got.Artifacts[0].Parts[0].Data) != `{"text":"DONE BEFORE"}` {
		t.Fatalf("GetTask of a task ended before the restart: %s %+v", r.Result, r.Error)
	}
	_, r = post(t, endpoint, `{"jsonrpc":"2.0","id":4,"method":"GetTask","params":{"id":"`+running.ID+`"}}`)
	if r.Error != nil || json.Unmarshal(r.Result, &got) != nil || got.Status.State != a2a.TaskStateWorking {
		t.Fatalf("GetTask of the running task after a restart: %s %+v", r.Result, r.Error)
	}
	close(m.release)
	stream := events(t, endpoint, `{"jsonrpc":"2.0","id":5,"method":"SubscribeToTask","params":{"id":"`+running.ID+`"}}`)
	final := stream[len(stream)-1].Task
	if final == nil || final.ID != running.ID || final.Status.State != a2a.TaskStateCompleted || string(final.Artifacts[0].Parts[0].Data) != `{"released":true}` {
		t.Fatalf("SubscribeToTask after a restart: %+v", stream)
	}
	_, r = post(t, endpoint, `{"jsonrpc":"2.0","id":6,"method":"GetTask","params":{"id":"no-such-task"}}`)
	if r.Error == nil || r.Error.Code != a2a.CodeTaskNotFound {
		t.Fatalf("GetTask of an unknown id: %+v", r.Error)
	}
}

// TestGatewayTaskTimeout: a task's mesh task runs for the gateway's task
// timeout (WithTaskTimeout): past it the provider's run is cancelled and
// the task has failed. A timeout past MaxTaskTimeout is refused.
func TestGatewayTaskTimeout(t *testing.T) {
	m := newMesh(t, a2a.WithTaskTimeout(time.Second))
	_, r := post(t, m.endpoint(), send("slow", `{}`, `{"returnImmediately":true}`))
	task := sendResult(t, r)
	run := wait.Receive(t, 10*time.Second, m.started, "the provider runs the task")
	wait.Receive(t, 10*time.Second, run.Done(), "the run's cancellation at the deadline")
	wait.For(t, 10*time.Second, func() error {
		_, r := post(t, m.endpoint(), `{"jsonrpc":"2.0","id":2,"method":"GetTask","params":{"id":"`+task.ID+`"}}`)
		var got a2a.Task
		if r.Error != nil || json.Unmarshal(r.Result, &got) != nil {
			return fmt.Errorf("GetTask: %s %+v", r.Result, r.Error)
		}
		if got.Status.State != a2a.TaskStateFailed {
			return fmt.Errorf("task %s, want failed at its deadline", got.Status.State)
		}
		return nil
	})
	if _, err := a2a.New(meshtest.Context(t, 10*time.Second), rpctest.DialClient(t, m.api), a2a.WithBaseURL("http://127.0.0.1:1"),
		a2a.WithTaskTimeout(a2a.MaxTaskTimeout+time.Second)); err == nil {
		t.Error("a task timeout past MaxTaskTimeout was taken")
	}
}

// fakeClock is a gateway's clock (WithClock) that moves only when the test
// advances it.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Now()} }

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// TestGatewayCardTTL: the gateway reuses an agent's card for its card TTL
// (WithCardTTL, here ten minutes, past the default) on its clock
// (WithClock): a skill the agent offers since shows only once the TTL has
// passed.
func TestGatewayCardTTL(t *testing.T) {
	clock := newFakeClock()
	m := newMesh(t, a2a.WithCardTTL(10*time.Minute), a2a.WithClock(clock.now))
	url := m.url + "/agents/" + m.prov.AgentID() + "/.well-known/agent-card.json"
	offers := func(skill string) bool {
		status, card := getCard(t, url)
		if status != http.StatusOK {
			t.Fatalf("card: HTTP %d", status)
		}
		return slices.ContainsFunc(card.Skills, func(s a2a.AgentSkill) bool { return s.ID == skill || s.Name == skill })
	}
	if offers("added") {
		t.Fatal("the card offers a skill not added yet")
	}
	if err := m.prov.Offer("test", []node.Service{{Capability: protocol.Capability{Name: "added"}, Handler: node.EchoHandler()}}); err != nil {
		t.Fatal(err)
	}
	clock.advance(2 * time.Minute) // past DefaultCardTTL
	if offers("added") {
		t.Error("the card was fetched again within its TTL")
	}
	clock.advance(9 * time.Minute)
	if !offers("added") {
		t.Error("the card was not fetched again once its TTL had passed")
	}
}

// fakeTasks stands for the node's mesh tasks (WithTasks): every task
// completes at once with its params as its result, and List counts how
// often the gateway had to ask the node for a task it no longer holds.
type fakeTasks struct {
	mu        sync.Mutex
	submitted []protocol.TaskInfo
	deadlines []time.Duration
	lists     int
}

func (f *fakeTasks) Submit(_ context.Context, agent, capability string, params json.RawMessage, deadline time.Duration) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	id := fmt.Sprintf("task-%d", len(f.submitted))
	f.submitted = append(f.submitted, protocol.TaskInfo{TaskID: id, Role: protocol.TaskRoleSubmitted, AgentID: agent, Capability: capability, State: protocol.TaskCompleted})
	f.deadlines = append(f.deadlines, deadline)
	return id, nil
}

func (f *fakeTasks) Wait(_ context.Context, taskID string, _ func(json.RawMessage)) (*protocol.SubmittedTask, error) {
	return &protocol.SubmittedTask{TaskID: taskID, State: protocol.TaskCompleted, Result: json.RawMessage(`{"done":true}`)}, nil
}

func (f *fakeTasks) List(_ context.Context, agent string) ([]protocol.TaskInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lists++
	return slices.Clone(f.submitted), nil
}

func (f *fakeTasks) Cancel(context.Context, string, string) (*protocol.Task, error) {
	return nil, errors.New("the fake's tasks have all ended")
}

// TestGatewayTaskTTL: the gateway runs its tasks through the Tasks it is
// given (WithTasks), with its task timeout as their deadline, and holds a
// finished task for its task TTL (WithTaskTTL) on its clock (WithClock):
// within it GetTask answers from the gateway; past it, once a new task
// is stored, from the node's records again.
func TestGatewayTaskTTL(t *testing.T) {
	clock := newFakeClock()
	tasks := &fakeTasks{}
	m := newMesh(t, a2a.WithTasks(tasks), a2a.WithTaskTTL(time.Minute), a2a.WithClock(clock.now))
	_, r := post(t, m.endpoint(), send("upper", `{"text":"a"}`))
	first := sendResult(t, r)
	if first.ID != "task-0" || first.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("task %+v, want the fake's task-0, completed", first)
	}
	getTask := func() {
		t.Helper()
		_, r := post(t, m.endpoint(), `{"jsonrpc":"2.0","id":2,"method":"GetTask","params":{"id":"task-0"}}`)
		var got a2a.Task
		if r.Error != nil || json.Unmarshal(r.Result, &got) != nil || got.ID != "task-0" || got.Status.State != a2a.TaskStateCompleted {
			t.Fatalf("GetTask: %s %+v", r.Result, r.Error)
		}
	}
	getTask()
	tasks.mu.Lock()
	lists, deadline := tasks.lists, tasks.deadlines[0]
	tasks.mu.Unlock()
	if lists != 0 || deadline != a2a.DefaultTaskTimeout {
		t.Fatalf("within the TTL: %d lists of the node's tasks, deadline %v; want none, and %v", lists, deadline, a2a.DefaultTaskTimeout)
	}
	clock.advance(2 * time.Minute)
	_, r = post(t, m.endpoint(), send("upper", `{"text":"b"}`))
	sendResult(t, r)
	getTask()
	tasks.mu.Lock()
	lists = tasks.lists
	tasks.mu.Unlock()
	if lists != 1 {
		t.Fatalf("past the TTL: %d lists of the node's tasks, want 1", lists)
	}
}
