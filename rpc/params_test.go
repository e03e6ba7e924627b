package rpc

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// Every method decodes its params strictly: a member of the wrong JSON
// type, or one whose name differs only in case, is -32602 (-32002 for
// initialize's client info, as seed 001 says) with a message naming the
// member, never a silent default.
func TestParamsWrongTypes(t *testing.T) {
	fb := newFuzzServer(t)
	for _, tc := range []struct {
		method, params string
		code           int
		want           string // in the message
	}{
		{MethodMeshCall, `{"agentId":5,"capability":"x"}`, CodeInvalidParams, `"agentId" must be a string`},
		{MethodMeshCall, `{"agentId":"` + fuzzAgent + `","action":7}`, CodeInvalidParams, `"action" must be a string`},
		{MethodMeshCall, `{"agentId":"` + fuzzAgent + `","capability":"x","timeoutMs":"10000"}`, CodeInvalidParams, `"timeoutMs"`},
		{MethodMeshCall, `{"agentId":"` + fuzzAgent + `","capability":"x","params":[1]}`, CodeInvalidParams, `"params" must be an object`},
		{MethodMeshCall, `{"agentId":"` + fuzzAgent + `","capability":"x","taskId":9}`, CodeInvalidParams, `"taskId" must be a string`},
		{MethodMeshCall, `{"AgentId":"` + fuzzAgent + `","capability":"x"}`, CodeInvalidParams, `unknown field "AgentId"`},
		{MethodMeshPublish, `{"topic":"t","payload":{},"timeoutMs":"100"}`, CodeInvalidParams, `"timeoutMs"`},
		{MethodMeshPublish, `{"topic":1,"payload":{}}`, CodeInvalidParams, `"topic" must be a string`},
		{MethodMeshPublish, `{"topic":"t","payload":"p"}`, CodeInvalidParams, `"payload"`},
		{MethodMeshPublish, `{"topic":"t","payload":{},"filter":{"includeAgents":"x"}}`, CodeInvalidParams, `"filter"`},
		{MethodMeshSubscribe, `{"pattern":{}}`, CodeInvalidParams, `"pattern" must be a string`},
		{MethodMeshUnsubscribe, `{"subscription":1}`, CodeInvalidParams, `"subscription" must be a string`},
		{MethodInitialize, `{"clientId":1}`, CodeInvalidClientInfo, `"clientId"`},
		{MethodInitialize, `{"clientId":"c","clientInfo":{"name":5}}`, CodeInvalidClientInfo, `"clientInfo"`},
		{MethodInitialize, `{"clientId":"c","clientInfo":{"NAME":"n"}}`, CodeInvalidClientInfo, `"clientInfo"`},
	} {
		t.Run(tc.method+" "+tc.params, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			var opts []ClientOption // Dial initializes, but not for initialize's own cases
			if tc.method == MethodInitialize {
				opts = append(opts, WithoutInitialize())
			}
			c, err := Dial(ctx, fb.url, opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			var re *Error
			err = c.Call(ctx, tc.method, jsonRaw(tc.params), nil)
			if !errors.As(err, &re) || re.Code != tc.code || !strings.Contains(re.Message, tc.want) {
				t.Fatalf("%s %s: %v, want %d with %q", tc.method, tc.params, err, tc.code, tc.want)
			}
		})
	}
}

type jsonRaw string

func (j jsonRaw) MarshalJSON() ([]byte, error) { return []byte(j), nil }

// Params decode with protocol.DecodeStrict: a member given twice is
// refused (encoding/json kept the last), and so is a filter member in
// another case (encoding/json folded it).
func TestParamsStrict(t *testing.T) {
	fb := newFuzzServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := Dial(ctx, fb.url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, tc := range []struct{ method, params, want string }{
		{MethodMeshCall, `{"agentId":"` + fuzzAgent + `","capability":"x","capability":"y"}`, `duplicate member "capability"`},
		{MethodMeshPublish, `{"topic":"a:b","topic":"a:c","payload":{}}`, `duplicate member "topic"`},
		{MethodMeshPublish, `{"topic":"a:b","payload":{},"filter":{"IncludeAgents":["a"]}}`, `"filter" must be an object`},
		{MethodMeshSubscribe, `{}`, `"pattern" is required`},
		{MethodMeshSubscribe, `{"pattern":null}`, `"pattern" is required`},
		{MethodMeshSubscribe, `{"pattern":""}`, `"pattern" is empty`},
	} {
		var re *Error
		err := c.Call(ctx, tc.method, jsonRaw(tc.params), nil)
		if !errors.As(err, &re) || re.Code != CodeInvalidParams || !strings.Contains(re.Message, tc.want) {
			t.Errorf("%s %s: %v, want %d with %q", tc.method, tc.params, err, CodeInvalidParams, tc.want)
		}
	}
}
