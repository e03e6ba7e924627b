package rpc_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/meshagent/meshagent/rpc"
)

// TestParseTaskResolveParams: mesh.taskResolve's params are read
// strictly; every wrong shape is -32602.
func TestParseTaskResolveParams(t *testing.T) {
	long := strings.Repeat("x", 4097)
	for _, tc := range []struct {
		raw     string
		approve bool
		reason  string
		bad     string // part of the error, "" when it is accepted
	}{
		{raw: `{"taskId":"t1","approve":true}`, approve: true},
		{raw: `{"taskId":"t1","approve":false,"reason":"no"}`, reason: "no"},
		{raw: `{"taskId":"t1"}`, bad: `"approve"`},
		{raw: `{"taskId":"t1","approve":null}`, bad: `"approve"`},
		{raw: `{"taskId":"t1","approve":"yes"}`, bad: "approve"},
		{raw: `{"taskId":"t1","approve":1}`, bad: "approve"},
		{raw: `{"taskId":7,"approve":true}`, bad: "taskId"},
		{raw: `{"approve":true}`, bad: `"taskId"`},
		{raw: `{"taskId":"t1","approve":true,"reason":5}`, bad: "reason"},
		{raw: `{"taskId":"t1","approve":true,"extra":1}`, bad: "extra"},
		{raw: `{"taskId":"t1","approve":true,"approve":false}`, bad: "approve"},
		{raw: `{"taskId":"t1","approve":true,"reason":"` + long + `"}`, bad: "longer than"},
		{raw: `[]`, bad: "takes"},
		{raw: ``, bad: "takes"},
	} {
		p, err := rpc.ParseTaskResolveParams(json.RawMessage(tc.raw))
		if tc.bad == "" {
			if err != nil || p.Approve == nil || *p.Approve != tc.approve || p.Reason != tc.reason {
				t.Errorf("%.60s: %+v %v", tc.raw, p, err)
			}
			continue
		}
		var re *rpc.Error
		if !errors.As(err, &re) || re.Code != rpc.CodeInvalidParams || !strings.Contains(re.Message, tc.bad) {
			t.Errorf("%.60s: got %v, want -32602 about %s", tc.raw, err, tc.bad)
		}
	}
}

// FuzzParseTaskResolveParams: whatever the params, the parser never
// panics, refuses with -32602, or accepts a task id and a decision.
func FuzzParseTaskResolveParams(f *testing.F) {
	f.Add([]byte(`{"taskId":"t1","approve":true,"reason":"ok"}`))
	f.Add([]byte(`{"taskId":"t1","approve":"true"}`))
	f.Add([]byte(`{"taskId":null,"approve":false}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		p, err := rpc.ParseTaskResolveParams(raw)
		if err != nil {
			var re *rpc.Error
			if !errors.As(err, &re) || re.Code != rpc.CodeInvalidParams {
				t.Fatalf("%q: %v is not -32602", raw, err)
			}
			return
		}
		if p.TaskID == "" || p.Approve == nil || len(p.Reason) > 4096 {
			t.Fatalf("%q accepted as %+v", raw, p)
		}
	})
}
