package a2a

import (
	"encoding/json"
	"testing"
	"time"
)

// FuzzDecodeRequest drives the JSON-RPC request path up to the mesh call:
// the envelope, SendMessage's params, the skill and the params part. None
// may panic, and what DecodeRequest accepts is a request with a method and
// a string or number id.
func FuzzDecodeRequest(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m","role":"ROLE_USER","parts":[{"data":{"a":1}}],"metadata":{"skill":"upper"}}}}`,
		`{"jsonrpc":"2.0","id":"x","method":"GetTask","params":{"id":"t","historyLength":2}}`,
		`{"jsonrpc":"2.0","id":1,"method":"ListTasks","params":{"pageSize":5,"pageToken":"3","status":"TASK_STATE_WORKING"}}`,
		`{"jsonrpc":"2.0","id":null,"method":"x"}`,
		`[{"jsonrpc":"2.0"}]`,
		`{"jsonrpc":"2.0","id":1,"id":2,"method":"x"}`,
		`{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"role":"ROLE_USER","parts":[{"text":"hi","data":{}}]}}}`,
	} {
		f.Add([]byte(s))
	}
	skills := []AgentSkill{{ID: "upper"}, {ID: "echo"}}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, e := DecodeRequest(body)
		if e != nil {
			if req != nil && req.ID != nil && !validID(req.ID) {
				t.Fatalf("error answers an invalid id %s", req.ID)
			}
			return
		}
		if req.Method == "" || !validID(req.ID) {
			t.Fatalf("accepted %s", body)
		}
		var p SendMessageRequest
		if decodeParams(req.Method, req.Params, &p) == nil && p.Message != nil {
			_, _ = messageSkill(p.Message.Metadata, skills)
			if params, e := messageParams(p.Message.Parts); e == nil && !json.Valid(params) {
				t.Fatalf("params %s are not JSON", params)
			}
		}
		var l ListTasksRequest
		_ = decodeParams(req.Method, req.Params, &l)
	})
}

// TestTaskStoreBounds: at most max tasks; a finished one makes room, oldest
// first; finished tasks are forgotten after the TTL; running ones never.
func TestTaskStoreBounds(t *testing.T) {
	now := time.Unix(1000, 0)
	s := newTaskStore(2, time.Minute)
	mk := func() *task { return &task{done: make(chan struct{}), subs: map[chan StreamResponse]struct{}{}} }
	a, b, c := mk(), mk(), mk()
	if s.add(now, "a", a) != a || s.add(now, "b", b) != b || s.full() != true {
		t.Fatal("add refused below the bound, or the store is not full at it")
	}
	if s.add(now, "c", c) != nil {
		t.Fatal("a third task was added while two run")
	}
	if s.add(now, "a", mk()) != a {
		t.Fatal("a second add of a stored id did not return the stored task")
	}
	b.finish(now, TaskStatus{State: TaskStateCompleted}, nil)
	if s.full() || s.add(now, "c", c) != c || s.get("b") != nil || s.get("a") == nil {
		t.Fatal("the finished task did not make room")
	}
	c.finish(now, TaskStatus{State: TaskStateCompleted}, nil)
	later := now.Add(2 * time.Minute)
	if s.add(later, "d", mk()) == nil || s.get("c") != nil || s.get("a") == nil {
		t.Fatal("the expired task was kept, or the running one forgotten")
	}
}
