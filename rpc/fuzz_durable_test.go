package rpc

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/meshagent/meshagent/internal/fakemesh"
	"github.com/meshagent/meshagent/protocol"
)

// durableFuzzMesh is fakemesh.Instant with durable subscriptions that
// deliver messages "0", "1", … one at a time, each once its handler
// returned nil, until an error or the cancel, which waits for the
// delivering goroutine to end.
type durableFuzzMesh struct{ fakemesh.Instant }

var _ DurableSubscriber = (*durableFuzzMesh)(nil)

func (*durableFuzzMesh) SubscribeDurable(_ context.Context, _, _ string, handler func(context.Context, protocol.TopicMessage) error) (func(), error) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		for n := 0; ctx.Err() == nil; n++ {
			msg := protocol.TopicMessage{Topic: "news:1", From: fakemesh.SelfID, ID: fmt.Sprint(n), Payload: json.RawMessage(`{}`), Time: time.Unix(1700000000, 0).UTC()}
			if handler(ctx, msg) != nil {
				return
			}
		}
	})
	return func() { cancel(); wg.Wait() }, nil
}

// FuzzDurableAnswer answers a durable subscription's first mesh.message
// with a fuzzed frame ("%ID%" stands for the request's id) over a live
// connection: whatever the answer (a result of any shape, an error with
// members of the wrong types, an answer for an id never sent, twice, a
// batch), nothing panics or is answered -32603, mesh.unsubscribe then
// ends the subscription promptly (its delivering goroutine has returned
// when the answer comes: no subscription is left stuck), and the honest
// client on another connection is still answered.
func FuzzDurableAnswer(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":%ID%,"result":{}}`,
		`{"jsonrpc":"2.0","id":%ID%,"result":null}`,
		`{"jsonrpc":"2.0","id":%ID%,"result":[1,"x"]}`,
		`{"jsonrpc":"2.0","id":%ID%,"error":{"code":-32000,"message":"no"}}`,
		`{"jsonrpc":"2.0","id":%ID%,"error":{"code":"x","message":5,"data":{}}}`,
		`{"jsonrpc":"2.0","id":%ID%,"error":"boom"}`,
		`{"jsonrpc":"2.0","id":%ID%,"result":{},"error":{"code":1,"message":""}}`,
		`{"id":%ID%,"result":{}}`,
		`{"jsonrpc":"2.0","id":"never-sent","result":{}}`,
		`[{"jsonrpc":"2.0","id":%ID%,"result":{}},{"jsonrpc":"2.0","id":%ID%,"error":{"code":1,"message":"again"}}]`,
		`{"jsonrpc":"2.0","id":%ID%,"method":"mesh.message","params":{}}`,
	} {
		f.Add([]byte(s))
	}
	mesh := &durableFuzzMesh{}
	fb := newFuzzServerOn(f, mesh, WithTopics(mesh), WithDurables(mesh))
	f.Fuzz(func(t *testing.T, answer []byte) {
		if len(answer) > 16<<10 || bytes.Contains(answer, []byte(`"unsub"`)) {
			return // the size limit closes the connection: not this target's case
		}
		c := dialFuzz(t, fb.url)
		n := fb.n.Add(1)
		c.Write(fmt.Appendf(nil, `{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"clientId":"durable-%d","clientInfo":{"name":"fuzz"}}}`, n))
		// read returns the objects of the next frame (a batch's answers
		// come as one array).
		read := func() []rpcOut {
			t.Helper()
			b := c.Next()
			var outs []rpcOut
			if len(b) > 0 && b[0] == '[' {
				if err := json.Unmarshal(b, &outs); err != nil {
					t.Fatalf("server sent an undecodable batch %s: %v", b, err)
				}
			} else {
				var o rpcOut
				if err := json.Unmarshal(b, &o); err != nil {
					t.Fatalf("server sent undecodable %s: %v", b, err)
				}
				outs = []rpcOut{o}
			}
			for _, o := range outs {
				if o.Error != nil && o.Error.Code == CodeInternalError {
					t.Fatalf("internal error after answer %q: %+v", answer, o.Error)
				}
			}
			return outs
		}
		if o := read(); len(o) != 1 || o[0].Error != nil {
			t.Fatalf("initialize: %+v", o)
		}
		c.Write(fmt.Appendf(nil, `{"jsonrpc":"2.0","id":"sub","method":"mesh.subscribe","params":{"pattern":"news:*","durable":"d%d"}}`, n))
		var sub, reqID string
		for sub == "" || reqID == "" {
			for _, o := range read() {
				switch {
				case o.Method == MethodMeshMessage && reqID == "":
					reqID = string(o.ID)
				case string(o.ID) == `"sub"`:
					var r SubscribeResult
					if o.Error != nil || json.Unmarshal(o.Result, &r) != nil {
						t.Fatalf("mesh.subscribe: %+v %s", o.Error, o.Result)
					}
					sub = r.Subscription
				}
			}
		}
		c.Write(bytes.ReplaceAll(answer, []byte("%ID%"), []byte(reqID)))
		c.Write(fmt.Appendf(nil, `{"jsonrpc":"2.0","id":"unsub","method":"mesh.unsubscribe","params":{"subscription":%q}}`, sub))
		for unsubscribed := false; !unsubscribed; {
			for _, o := range read() {
				if o.Method == MethodMeshMessage && o.ID != nil {
					c.Write(fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%s,"result":{}}`, o.ID))
					continue
				}
				if string(o.ID) == `"unsub"` {
					// -32602 when the fuzzed frame unsubscribed it first.
					if o.Error != nil && o.Error.Code != CodeInvalidParams {
						t.Fatalf("mesh.unsubscribe after answer %q: %+v", answer, o.Error)
					}
					unsubscribed = true
				}
			}
		}
		fb.checkHonest(t)
	})
}
